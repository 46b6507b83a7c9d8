"""Record what each peer's own evaluation loop does with scripted model replies, as test fixtures.

    .venv/bin/python scripts/record_agent_fixtures.py deepeyes GIT_DIR \\
        tests/agents/fixtures/deepeyes.jsonl
    .venv/bin/python scripts/record_agent_fixtures.py deepeyesv2 GIT_DIR \\
        tests/agents/fixtures/deepeyesv2.jsonl

``GIT_DIR`` is a git repository (bare or not) of the peer holding the pinned commit below, for
example ``git clone https://github.com/Visual-Agent/DeepEyes`` (or ``.../DeepEyesV2``). The peer's
evaluation file is read from that commit (``git show``) and run as it is; its parsing, tool and
answer code run unchanged on the shared cases of `CASES` and the images of
``tests/agents/fixtures/images/`` (made by `write_images` when missing).
``tests/agents/test_agent_fixtures.py`` replays the same cases through codedance's agent profile and
compares.

The only stand-in is the model: the ``openai`` package is replaced by a client whose
``chat.completions.create`` returns the case's replies in order and keeps a copy of every request's
messages. Each output line: case id, image, question, options, replies, and what the peer's loop
did: ``requests`` (per model call, the messages added since the previous call; images as the
SHA-256 of their RGB pixels plus size, as ``tests/agents/fixture_cases.py`` reduces them),
``answer`` (its ``pred_ans``) and ``status``.

DeepEyes (``eval/eval_vstar.py``): the module is executed with ``sys.argv`` naming a model (so it
does not ask a server for one) and a scratch save folder; its ``process`` runs each case. It also
imports torch (unused by the loop; the CPU build is enough).

DeepEyesV2 (its VLMEvalKit fork under ``evaluation/VLMEvalKit/vlmeval``): ``api/agent_utils.py``
and ``api/prompt.py`` run whole; ``get_image_fmt_from_image_path`` and the agent-mode methods of
``VLLMAPIWrapper`` (``prepare_itlist_agent``, ``prepare_inputs_agent``, ``prepare_payload``,
``request_with_retry``, ``prepare_inputs_agent_turn``, ``generate_inner_agent``) are cut out of
``api/vllm_api.py`` with ``ast`` and run as written on an object holding the constructor's
defaults (``agent_try`` 10) and ``eval.sh``'s ``max_tokens``; VLMEvalKit's image functions
(``resize_image_by_factor``, ``encode_image_to_base64``, ``decode_base64_to_image[_file]``) are cut
out of ``smp/vlm.py``, and each case's image is stored with the last one as VLMEvalKit's
``dump_image`` stores a TSV image. Stand-ins: ``requests`` answers both the model (the case's
replies, as vLLM returns them: without the ``</code>`` stop string) and the session server (the
case's ``tool`` results: stdout, stderr, images; the server itself,
ChenShawn/MultiModal-Jupyter-Sandbox, is not run); ``autopep8.fix_code`` is the identity (the
package is not installed here). The fixture also keeps every code the loop sent to the server.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import ClassVar

PINNED = {
    "deepeyes": ("6c5e79671dbff958a6f9d44848ba2ca87854f0b0", "eval/eval_vstar.py"),
    "deepeyesv2": ("0373e6e0c923110fd6ff807b30474d8184785562", "evaluation/VLMEvalKit/vlmeval"),
    "thyme": ("b9285b7a0c5f1effcd9908ec5936fae47fc592e5", "eval/VLMEvalKit/vlmeval"),
    "mini-o3": ("8654dbf42d2ea98b9d81b6cc7179026dd0598fdf", "verl"),
}
IMAGES = Path(__file__).resolve().parents[1] / "tests" / "agents" / "fixtures" / "images"

Z = (
    '<tool_call>\n{{"name": "image_zoom_in_tool", '
    '"arguments": {{"bbox_2d": {box}, "label": "the sign"}}}}\n</tool_call>'
)
THINK = "<think>The sign is small; zoom in.</think>\n"


def zoom(box: str) -> str:
    return THINK + Z.format(box=box)


ANSWER_B = "<think>Now it is clear.</think>\n<answer>B</answer>"
CASES: list[dict] = [
    {"id": "direct-answer", "replies": ["<think>I can see it.</think> <answer>A</answer>"]},
    {"id": "one-zoom", "replies": [zoom("[40, 30, 200, 150]"), ANSWER_B]},
    {"id": "float-box", "replies": [zoom("[10.6, 20.4, 200.2, 150.9]"), ANSWER_B]},
    {"id": "tiny-box-upscaled", "replies": [zoom("[100, 100, 110, 108]"), ANSWER_B]},
    {"id": "box-past-the-edge", "replies": [zoom("[400, 300, 520, 400]"), ANSWER_B]},
    {
        "id": "whole-small-image",
        "image": "small.png",
        "replies": [zoom("[0, 0, 100, 80]"), ANSWER_B],
    },
    {
        "id": "two-zooms",
        "replies": [zoom("[0, 0, 224, 168]"), zoom("[224, 168, 448, 336]"), ANSWER_B],
    },
    {
        "id": "two-calls-one-reply",
        "replies": [
            zoom("[0, 0, 100, 100]") + "\n" + Z.format(box="[200, 200, 300, 300]"),
            ANSWER_B,
        ],
    },
    {
        "id": "unclosed-call-at-end",
        "replies": [
            THINK + '<tool_call>{"name": "image_zoom_in_tool", "arguments": '
            '{"bbox_2d": [5, 5, 300, 200]}}',
            ANSWER_B,
        ],
    },
    {
        "id": "other-tool-name",
        "replies": [
            THINK + '<tool_call>{"name": "crop", "arguments": '
            '{"bbox_2d": [50, 60, 250, 160]}}</tool_call>',
            ANSWER_B,
        ],
    },
    {
        "id": "json-true-literal",
        "replies": [
            THINK + '<tool_call>{"name": "image_zoom_in_tool", "arguments": '
            '{"bbox_2d": [1, 2, 100, 100], "exact": true}}</tool_call>'
        ],
    },
    {
        "id": "wrong-argument-key",
        "replies": [
            THINK + '<tool_call>{"name": "image_zoom_in_tool", "arguments": '
            '{"bbox": [1, 2, 100, 100]}}</tool_call>'
        ],
    },
    {
        "id": "arguments-as-string",
        "replies": [
            THINK + '<tool_call>{"name": "image_zoom_in_tool", "arguments": '
            '"{\\"bbox_2d\\": [1, 2, 100, 100]}"}</tool_call>'
        ],
    },
    {"id": "three-numbers", "replies": [zoom("[1, 2, 100]")]},
    {"id": "reversed-box", "replies": [zoom("[300, 200, 100, 50]")]},
    {"id": "zero-width-box", "replies": [zoom("[50, 50, 50, 200]"), ANSWER_B]},
    {
        "id": "truncated-call",
        "replies": [
            THINK + '<tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [1'
        ],
    },
    {"id": "prose-then-answer", "replies": ["The answer is probably B.", ANSWER_B]},
    {
        "id": "truncated-thinking",
        "replies": ["<think>Let me look at every part of the image in turn, starting"] * 11,
    },
    {"id": "close-tag-only", "replies": ["<think>done</think> B</answer>"]},
    {"id": "call-and-answer", "replies": [zoom("[0, 0, 50, 50]") + "\n<answer>C</answer>"]},
    {
        "id": "bad-call-and-answer",
        "replies": [zoom("[300, 200, 100, 50]") + "\n<answer>C</answer>"],
    },
    {
        "id": "eleven-zooms",
        "replies": [zoom(f"[{i * 10}, {i * 5}, {i * 10 + 150}, {i * 5 + 120}]") for i in range(11)],
    },
]
QUESTION = "What is the colour of the sign?"
OPTIONS = ["red", "blue", "green", "yellow"]


def write_images(folder: Path) -> None:
    """The shared images: RGB patterns (gradients, a checkerboard, a box) of several sizes, and a
    near-white RGBA image (for the tools' outputs)."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for name, (w, h) in {
        "scene.png": (448, 336),
        "small.png": (100, 80),
        "shown.png": (150, 90),
        "tiny.png": (20, 12),
    }.items():
        y, x = np.mgrid[0:h, 0:w]
        rgb = np.stack(
            [x * 255 // w, y * 255 // h, ((x // 16 + y // 16) % 2) * 200], axis=-1
        ).astype(np.uint8)
        rgb[h // 4 : h // 2, w // 3 : w // 2] = (220, 30, 40)
        Image.fromarray(rgb, "RGB").save(folder / name, format="PNG", optimize=True)
    Image.new("RGBA", (64, 48), (252, 255, 250, 255)).save(folder / "white.png", format="PNG")


def _helpers() -> types.ModuleType:
    """``tests/agents/fixture_cases.py``: the one definition of how requests are stored."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "fixture_cases", IMAGES.parents[1] / "fixture_cases.py"
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class _Model:
    """Stands in for ``openai.OpenAI``: the case's replies in order, each request kept."""

    replies: ClassVar[list[str]] = []
    requests: ClassVar[list[list[dict]]] = []

    def __init__(self, **_: object) -> None:
        self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self.create))

    @classmethod
    def create(cls, **params: object) -> object:
        cls.requests.append(copy.deepcopy(params["messages"]))  # type: ignore[arg-type]
        text = cls.replies[len(cls.requests) - 1]
        message = types.SimpleNamespace(content=text)
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=message)])


def peer_source(name: str, git_dir: Path) -> str:
    commit, path = PINNED[name]
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def record_deepeyes(git_dir: Path) -> list[dict]:
    source = peer_source("deepeyes", git_dir)
    sys.modules["openai"] = types.SimpleNamespace(OpenAI=_Model)  # type: ignore[assignment]
    scratch = Path(tempfile.mkdtemp())
    sys.argv = [
        "eval_vstar.py",
        "--eval_model_name",
        "scripted",
        "--save_path",
        str(scratch / "out"),
    ]
    module = types.ModuleType("deepeyes_eval_vstar")
    exec(compile(source, PINNED["deepeyes"][1], "exec"), module.__dict__)  # noqa: S102 - the peer's own file
    helpers = _helpers()
    lines = []
    for case in CASES:
        image = case.get("image", "scene.png")
        folder = scratch / case["id"]
        folder.mkdir()
        (folder / f"{case['id']}.jpg").write_bytes(
            (IMAGES / image).read_bytes()
        )  # the name it expects
        (folder / f"{case['id']}.json").write_text(
            json.dumps({"question": QUESTION, "options": OPTIONS})
        )
        _Model.replies, _Model.requests = list(case["replies"]), []
        info = module.process((f"{case['id']}.jpg", str(folder)))
        lines.append(
            {
                "id": case["id"],
                "image": image,
                "question": QUESTION,
                "options": OPTIONS,
                "replies": case["replies"],
                "deepeyes": {
                    "requests": helpers.deltas([helpers.normal(m) for m in _Model.requests]),
                    "answer": info["pred_ans"],
                    "status": info["status"],
                },
            }
        )
    return lines


def code(body: str, think: str = "<think>Crop the sign.</think>\n") -> str:
    """A DeepEyesV2 code reply as vLLM returns it: stopped at ``</code>``, which is dropped."""
    return f"{think}<code>\n```python\n{body}\n```\n"


def shown(*images: str, stdout: str = "", stderr: str = "") -> dict:
    """A scripted session-server result: stdout, stderr and the images (in IMAGES) it showed."""
    return {"stdout": stdout, "stderr": stderr, "images": list(images)}


V2_QUESTION = (
    "Question: What is the colour of the sign?\nOptions:\nA. red\nB. blue\nC. green\nD. yellow\n"
    "Please select the correct answer from the options above. \n"
)
V2_CASES: list[dict] = [
    {"id": "direct-answer", "replies": ["<think>It is visible.</think>\n<answer>B</answer>"]},
    {
        "id": "one-crop",
        "replies": [
            code("crop = image_1.crop((0, 0, 100, 100))\nplt.imshow(crop)\nplt.show()"),
            ANSWER_B,
        ],
        "tool": [shown("shown.png", stdout="(100, 100)\n")],
    },
    {
        "id": "dedent-after-block",
        "replies": [code("w, h = image_1.size\nif w > 100:\n    x = 1\nprint(x)"), ANSWER_B],
        "tool": [shown(stdout="1\n")],
    },
    {
        "id": "try-except-else",
        "replies": [
            code(
                "try:\n    v = 1 / 0\nexcept ZeroDivisionError:\n    v = 0\n"
                "else:\n    v = 2\nprint(v)"
            ),
            ANSWER_B,
        ],
        "tool": [shown(stdout="0\n")],
    },
    {
        "id": "unfenced-code",
        "replies": ["<think>t</think><code>print(image_1.size)", ANSWER_B],
        "tool": [shown(stdout="(448, 336)\n")],
    },
    {
        "id": "white-image-dropped",
        "replies": [code("plt.imshow(image_1)\nplt.show()"), ANSWER_B],
        "tool": [shown("white.png", "shown.png")],
    },
    {
        "id": "tiny-image-upscaled",
        "replies": [code("plt.imshow(image_1.crop((0, 0, 20, 12)))\nplt.show()"), ANSWER_B],
        "tool": [shown("tiny.png")],
    },
    {
        "id": "stderr-traceback",
        "replies": [code("print(undefined_name)"), ANSWER_B],
        "tool": [shown(stderr="NameError: name 'undefined_name' is not defined")],
    },
    {"id": "small-input-image", "image": "small.png", "replies": [ANSWER_B]},
    {"id": "prose-then-answer", "replies": ["I think the sign is blue.", ANSWER_B]},
    {"id": "answer-tag-unclosed", "replies": ["<think>done</think>\n<answer>B"]},
    {
        "id": "code-and-answer",
        "replies": [ANSWER_B + "\n<code>\n```python\nprint('answered')\n```\n"],
        "tool": [shown(stdout="answered\n")],
    },
    {
        "id": "truncated-thinking",
        "replies": ["<think>Let me look at every part of the image in turn, starting"] * 11,
    },
    {
        "id": "eleven-code-calls",
        "replies": [code(f"print({i})") for i in range(11)],
        "tool": [shown(stdout=f"{i}\n") for i in range(11)],
    },
]


class _Requests:
    """Stands in for ``requests`` in the loop: the model's replies and the session server's results
    are the case's; every model request's messages and every code sent to the server are kept."""

    class exceptions:  # what the loop catches: requests.exceptions.RequestException
        RequestException = OSError

    def __init__(self, case: dict) -> None:
        self.case, self.requests, self.codes = case, [], []

    def post(
        self,
        url: str,
        headers: object = None,
        data: str | None = None,
        json: dict | None = None,
        timeout: object = None,
    ) -> object:
        import base64

        if json is not None:  # the session server
            self.codes.append(json["code"])
            if len(self.codes) == 1:  # its init code
                result = shown()
            else:
                result = self.case["tool"][len(self.codes) - 2]
            output = {
                "stdout": result["stdout"],
                "stderr": result["stderr"],
                "images": [
                    base64.b64encode((IMAGES / i).read_bytes()).decode() for i in result["images"]
                ],
            }
            return types.SimpleNamespace(json=lambda: {"output": output, "status": "success"})
        import json as _json

        body = _json.loads(data or "{}")
        self.requests.append(copy.deepcopy(body["messages"]))
        text = self.case["replies"][len(self.requests) - 1]
        reply = {"choices": [{"message": {"content": text}}]}
        return types.SimpleNamespace(status_code=200, text=_json.dumps(reply))


def _cut(source: str, filename: str, names: list[str], namespace: dict) -> None:
    """Top-level functions, or methods of any class, cut from a file into ``namespace``."""
    import ast

    tree = ast.parse(source)
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            found.setdefault(node.name, node)
    missing = sorted(set(names) - set(found))
    assert not missing, f"{filename}: {missing} not found"
    module = ast.Module(body=[found[n] for n in names], type_ignores=[])
    exec(compile(module, filename, "exec"), namespace)  # noqa: S102 - the peer's own functions


def record_deepeyesv2(git_dir: Path) -> list[dict]:
    import logging

    import numpy as np

    commit, root = PINNED["deepeyesv2"]
    show = lambda path: (
        subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"{commit}:{root}/{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    helpers = _helpers()
    sys.modules["autopep8"] = types.SimpleNamespace(fix_code=lambda code, options=None: code)  # type: ignore[assignment]
    scratch = Path(tempfile.mkdtemp())
    resize_root = Path("/root/LMUData_Resize")
    made_resize_root = not resize_root.exists()  # agent_utils makes its folder when imported
    utils = types.ModuleType("agent_utils")
    exec(compile(show("api/agent_utils.py"), "agent_utils.py", "exec"), utils.__dict__)  # noqa: S102
    if made_resize_root and resize_root.exists():
        subprocess.run(["rm", "-r", str(resize_root)], check=True)
    utils.ORIGIN_PATH, utils.RESIZE_PATH = (
        str(scratch / "LMUData/images"),
        str(scratch / "LMUData_Resize/images"),
    )
    prompt: dict = {}
    exec(compile(show("api/prompt.py"), "prompt.py", "exec"), prompt)  # noqa: S102
    import base64 as b64
    import io as _io
    import os
    import re
    import time

    from PIL import Image

    smp: dict = {"io": _io, "os": os, "base64": b64, "Image": Image, "osp": os.path}
    _cut(
        show("smp/vlm.py"),
        "vlm.py",
        [
            "resize_image_by_factor",
            "encode_image_to_base64",
            "decode_base64_to_image",
            "decode_base64_to_image_file",
        ],
        smp,
    )
    space: dict = {
        "np": np,
        "os": os,
        "re": re,
        "json": json,
        "time": time,
        "copy": copy,
        "AGENT_CONFIG": prompt["AGENT_CONFIG"],
        "THINKING_CONFIG": prompt["THINKING_CONFIG"],
        "encode_image_to_base64": smp["encode_image_to_base64"],
        "ORIGIN_PATH": utils.ORIGIN_PATH,
        "RESIZE_PATH": utils.RESIZE_PATH,
    }
    for name in (
        "generate_session_id",
        "execute_code",
        "encode_pil_image_to_base64",
        "check_white_image",
        "replace_image_path_resize",
        "maybe_resize_image_v2",
        "return_init_code",
    ):
        space[name] = getattr(utils, name)
    methods = [
        "get_image_fmt_from_image_path",
        "prepare_itlist_agent",
        "prepare_inputs_agent",
        "prepare_payload",
        "request_with_retry",
        "prepare_inputs_agent_turn",
        "generate_inner_agent",
    ]
    _cut(show("api/vllm_api.py"), "vllm_api.py", methods, space)
    wrapper = type("VLLMAPIWrapper", (), {m: space[m] for m in methods[1:]})
    lines = []
    for n, case in enumerate(V2_CASES):
        fake = _Requests(case)
        space["requests"] = utils.requests = fake  # the model and the session server
        api = wrapper()
        api.__dict__.update(
            inference_mode="agent",
            agent_try=10,
            temperature=0,
            max_tokens=20480,
            model="m",
            timeout=600,
            fail_msg="Failed to obtain answer via API. ",
            verbose=False,
            logger=logging.getLogger("vllm_api"),
            _next_api_base=lambda: "http://model/v1/chat/completions",
        )
        image = case.get("image", "scene.png")
        stored = (
            Path(utils.ORIGIN_PATH) / "VStarBench" / f"{n}.jpg"
        )  # as VLMEvalKit's dump_image stores it
        smp["decode_base64_to_image_file"](
            b64.b64encode((IMAGES / image).read_bytes()).decode(), str(stored)
        )
        inputs = [{"type": "image", "value": str(stored)}, {"type": "text", "value": V2_QUESTION}]
        status, answer = "success", None
        try:
            _, result, _ = api.generate_inner_agent(
                api.prepare_inputs_agent(inputs), temperature=0, max_tokens=20480
            )
            answer = result["response"]
        except Exception as exc:  # noqa: BLE001 - the loop's own failure is part of the record
            status = f"error: {type(exc).__name__}: {exc}"
        lines.append(
            {
                "id": case["id"],
                "image": image,
                "question": V2_QUESTION,
                "options": OPTIONS,
                "replies": case["replies"],
                "tool": case.get("tool", []),
                "deepeyesv2": {
                    "requests": helpers.deltas([helpers.normal(m) for m in fake.requests]),
                    "init_code": fake.codes[0],
                    "codes": fake.codes[1:],
                    "answer": answer,
                    "status": status,
                },
            }
        )
    return lines


def crop_code(body: str, think: str = "<think>Crop the sign.</think>\n") -> str:
    """A Thyme code reply as its loop receives it: generation stopped at ``</code>``, kept."""
    return f"{think}<code>\n```python\n{body}\n```\n</code>"


SAVE = (
    "img = Image.open(image_path)\n"
    "crop = img.crop(crop_box)\n"
    "processed = '/mnt/data/temp_processed_images/crop.jpg'\n"
    "crop.save(processed)\n"
    "print(processed)"
)
THEN_B = "\nThe sign is blue.</think>\n<answer>B</answer>"
PROSE = "<think>Let me look at every part of the image in turn, starting"
THYME_CASES: list[dict] = [
    {"id": "direct-answer", "replies": ["<think>I can see it.</think>\n<answer>B</answer>"]},
    {
        "id": "crop-and-print",
        "replies": [crop_code("crop_box = (40, 30, 200, 150)\n" + SAVE), THEN_B],
    },
    {
        "id": "box-clamped-into-the-image",
        "replies": [crop_code("crop_box = (400, 300, 520, 400)\n" + SAVE), THEN_B],
    },
    {
        "id": "tiny-corners-widened",
        "replies": [
            crop_code(
                "x1, y1, x2, y2 = (100, 100, 110, 108)\n"
                "crop = Image.open(image_path).crop((x1, y1, x2, y2))\n"
                "crop.save('/mnt/data/temp_processed_images/tiny.png')\n"
                "print('/mnt/data/temp_processed_images/tiny.png')"
            ),
            THEN_B,
        ],
    },
    {
        "id": "wrong-image-path-replaced",
        "replies": [
            crop_code("image_path = '/data/vstar/sign.jpg'\ncrop_box = (0, 0, 224, 168)\n" + SAVE),
            THEN_B,
        ],
    },
    {
        "id": "processed-path-variable",
        "replies": [
            crop_code(
                "processed_path = temp_output_dir + 'half.jpg'\n"
                "Image.open(image_path).resize((224, 168)).save(processed_path)"
            ),
            THEN_B,
        ],
    },
    {
        "id": "opencv-namespace",
        "replies": [
            crop_code(
                "import cv2\nimg = cv.imread(image_path)\n"
                "gray = cv.cvtColor(img, cv.COLOR_BGR2GRAY)\n"
                "cv.imwrite('/mnt/data/temp_processed_images/gray.png', gray)\n"
                "print('/mnt/data/temp_processed_images/gray.png')"
            ),
            THEN_B,
        ],
    },
    {
        "id": "printed-result",
        "replies": [
            crop_code("w, h = Image.open(image_path).size\nprint(w * h, f'{w / h:.2f}')"),
            THEN_B,
        ],
    },
    {
        "id": "two-files-named-by-name",
        "replies": [
            crop_code(
                "img = Image.open(image_path)\n"
                "img.crop((0, 0, 100, 100)).save(temp_output_dir + 'a.png')\n"
                "img.crop((100, 100, 300, 300)).save(temp_output_dir + 'b.jpg')\n"
                "print('saved a.png and b.jpg')"
            ),
            THEN_B,
        ],
    },
    {
        "id": "variables-carry-over",
        "replies": [
            crop_code("img = Image.open(image_path)\ncrop_box = (0, 0, 150, 120)\n" + SAVE),
            crop_code(
                "img.crop((150, 120, 400, 300)).save(temp_output_dir + 'second.jpg')\n"
                "print(temp_output_dir + 'second.jpg')",
                think="\nNow the other half.\n",
            ),
            THEN_B,
        ],
    },
    {
        "id": "error-discarded-then-answer",
        "replies": [crop_code("print(1 / 0)"), "<think>Direct.</think>\n<answer>B</answer>"],
    },
    {
        "id": "no-output-discarded",
        "replies": [crop_code("x = 1"), "<think>Direct.</think>\n<answer>B</answer>"],
    },
    {
        "id": "refused-call",
        "replies": [crop_code("import sys\nprint(sys.version)"), "<answer>B</answer>"],
    },
    {
        "id": "builtin-not-allowed",
        "replies": [crop_code("print(set([1, 2]))"), "<answer>B</answer>"],
    },
    {
        "id": "code-and-answer-in-one-reply",
        "replies": [
            "<think>t</think><answer>B</answer>" + crop_code("print(image_path)", think="")
        ],
    },
    {
        "id": "prose-then-new-attempt",
        "replies": ["I think the sign is blue.", "<answer>B</answer>"],
    },
    {"id": "boxed-answer", "replies": ["<think>t</think>\n<answer>\\boxed{B}</answer>"]},
    {"id": "no-answer-tag-closed", "replies": ["<think>done</think> B</answer>"]},
    {
        "id": "five-calls-then-new-attempt",
        "replies": [
            crop_code(f"print({i} * 7)", think=f"<think>step {i}</think>") for i in range(5)
        ]
        + ["<answer>B</answer>"],
    },
    {"id": "truncated-thinking-then-fallback", "replies": [PROSE] * 5 + ["The sign is blue."]},
    {
        "id": "short-answer-question",
        "options": [],
        "replies": ["<think>t</think><answer>blue</answer>"],
    },
]


class _Processor:
    """Stands in for the transformers processor (and the model's tokenizer): keeps each rendering
    request (the conversation, whether a generation prompt was asked) and the images
    qwen-vl-utils prepared for it; decodes to the case's next reply."""

    eos_token_id = 2

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.requests, self.tokenizer = replies, [], self

    def apply_chat_template(self, conversations, tokenize=False, add_generation_prompt=False):
        self.requests.append(
            {"messages": copy.deepcopy(conversations[0]), "continue": not add_generation_prompt}
        )
        return ["<|im_end|>\n"]

    def __call__(self, text, images=None, videos=None, padding=True, return_tensors=None):
        self.requests[-1]["images"] = list(images or [])
        inputs = _Inputs(input_ids=[[0]])
        inputs.to = lambda device: inputs
        return inputs

    def reply(self) -> str:
        return self.replies[len(self.requests) - 1]

    def batch_decode(self, ids, skip_special_tokens=True, clean_up_tokenization_spaces=False):
        return [self.reply()]


class _Inputs(dict):
    @property
    def input_ids(self):
        return self["input_ids"]


class _Model:
    """Stands in for the Qwen2.5-VL model: one token past the prompt, the end-of-sequence token
    unless the reply ends with a stop string (where generation stopped instead)."""

    def __init__(self, processor: _Processor) -> None:
        self.processor = processor

    def generate(self, input_ids, stop_strings=None, temperature=None, **_: object):
        self.processor.requests[-1]["temperature"] = temperature
        self.processor.requests[-1]["stop"] = list(stop_strings or [])
        stopped = any(self.processor.reply().endswith(s) for s in stop_strings or [])
        return [input_ids[0] + [1 if stopped else _Processor.eos_token_id]]


def _thyme_request(request: dict, helpers: types.ModuleType) -> dict:
    """A rendering request as the fixture keeps it: messages as parts (images as pixel keys of
    what qwen-vl-utils handed the processor, in order), whether the last message is continued."""
    import io as _io

    images = iter(request["images"])
    messages = []
    for message in request["messages"]:
        content = message["content"]
        parts = [{"text": content}] if isinstance(content, str) else []
        for item in content if isinstance(content, list) else ():
            if item["type"] == "text":
                parts.append({"text": item["text"]})
            else:
                buffer = _io.BytesIO()
                next(images).save(buffer, format="PNG")
                parts.append({"image": helpers.pixel_key(buffer.getvalue())})
        messages.append({"role": message["role"], "parts": parts})
    return {
        "messages": messages,
        "continue": request["continue"],
        "temperature": request["temperature"],
        "stop": request["stop"],
    }


def record_thyme(git_dir: Path) -> list[dict]:
    import base64 as b64
    import contextlib
    import io as _io
    import logging
    import os
    import re
    import warnings

    from PIL import Image

    commit, root = PINNED["thyme"]
    show = lambda path: (
        subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"{commit}:{root}/{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    helpers = _helpers()
    sys.modules["autopep8"] = types.SimpleNamespace(fix_code=lambda code, options=None: code)  # type: ignore[assignment]
    sys.modules["timeout_decorator"] = types.SimpleNamespace(  # type: ignore[assignment]
        timeout=lambda *a, **k: lambda f: f, TimeoutError=TimeoutError
    )
    vision = types.ModuleType("torchvision")  # qwen-vl-utils imports it for videos only
    vision.io, vision.transforms = types.ModuleType("io"), types.ModuleType("transforms")  # type: ignore[attr-defined]
    vision.transforms.InterpolationMode = None  # type: ignore[attr-defined]
    sys.modules.update({"torchvision": vision, "torchvision.transforms": vision.transforms})
    sandbox = types.ModuleType("thyme_sandbox")
    exec(compile(show("vlm/thyme/sandbox.py"), "sandbox.py", "exec"), sandbox.__dict__)  # noqa: S102
    executed: list[str] = []

    def recording_exec(code, *namespaces):
        executed.append(code)
        return exec(code, *namespaces)  # noqa: S102 - the peer's sandbox running the case's code

    sandbox.exec = recording_exec  # type: ignore[attr-defined]
    utils = types.ModuleType("thyme_utils")
    exec(compile(show("vlm/thyme/utils.py"), "utils.py", "exec"), utils.__dict__)  # noqa: S102
    space: dict = {
        "os": os,
        "re": re,
        "copy": copy,
        "logging": logging,
        "warnings": warnings,
        "DynamicCache": list,
        "execute_code_in_sandbox": sandbox.execute_code_in_sandbox,
        "listinstr": lambda names, text: any(n in text for n in names),
        **{
            n: getattr(utils, n)
            for n in (
                "generate_prompt_final_qa",
                "generate_prompt_simple_qa",
                "SPECIAL_STRING_LIST",
                "REASONING_SYS_PROMPT",
                "SIMPLE_SYS_PROMPT",
            )
        },
    }
    model_methods = [
        "ensure_image_url",
        "_extract_image_path",
        "_prepare_content",
        "_prepare_content_simple",
        "_extract_box_answer",
        "_remove_unpickable_values",
        "generate_inner_transformers",
    ]
    _cut(show("vlm/thyme/model.py"), "model.py", model_methods, space)
    _cut(
        show("vlm/thyme/prompt.py"), "prompt.py", ["_build_mcq_prompt", "_build_vqa_prompt"], space
    )
    smp: dict = {"io": _io, "os": os, "base64": b64, "Image": Image, "osp": os.path}
    _cut(
        show("smp/vlm.py"), "vlm.py", ["decode_base64_to_image", "decode_base64_to_image_file"], smp
    )
    thyme = type(
        "Thyme",
        (),
        {m: space[m] for m in [*model_methods[1:], "_build_mcq_prompt", "_build_vqa_prompt"]},
    )
    scratch, here = Path(tempfile.mkdtemp()), Path.cwd()
    lines = []
    for case in THYME_CASES:
        folder = scratch / case["id"]
        folder.mkdir()
        os.chdir(folder)  # its image path and output folder are relative to here
        try:
            image = case.get("image", "scene.png")
            smp["decode_base64_to_image_file"](
                b64.b64encode((IMAGES / image).read_bytes()).decode(),
                str(folder / "input_image.jpg"),
            )
            processor = _Processor(case["replies"])
            model = thyme()
            model.__dict__.update(
                processor=processor,
                model=_Model(processor),
                min_pixels=None,
                max_pixels=None,
                max_iterations=5,
                max_retry=5,
                verbose=True,
                post_process=True,
                system_prompt="You are a helpful assistant.",
                temperature=0.01,
                dump_image=lambda line, dataset: "input_image.jpg",
                generate_kwargs={
                    "max_new_tokens": 2048,
                    "top_p": 0.001,
                    "top_k": 1,
                    "temperature": 0.01,
                    "repetition_penalty": 1.0,
                    "stop_strings": utils.SPECIAL_STRING_LIST,
                    "eos_token_id": _Processor.eos_token_id,
                    "tokenizer": processor,
                },
            )
            options = case.get("options", OPTIONS)
            line = {"question": QUESTION, **dict(zip("ABCD", options))}
            build = model._build_mcq_prompt if options else model._build_vqa_prompt
            message = build(line, "VStarBench")
            del executed[:]
            status, answer = "success", None
            with contextlib.redirect_stdout(_io.StringIO()):
                try:
                    answer = model.generate_inner_transformers(message, dataset="VStarBench")
                except Exception as exc:  # noqa: BLE001 - the loop's own failure is recorded
                    status = f"error: {type(exc).__name__}: {exc}"
        finally:
            os.chdir(here)
        lines.append(
            {
                "id": case["id"],
                "image": image,
                "question": QUESTION,
                "options": options,
                "replies": case["replies"],
                "thyme": {
                    "requests": [_thyme_request(r, helpers) for r in processor.requests],
                    "executed": list(executed),
                    "answer": answer,
                    "status": status,
                },
            }
        )
    return lines


def grounding(
    box: str, source: str = "original_image", think: str = "<think>Zoom in.</think>\n"
) -> str:
    """A Mini-o3 call as its rollout receives it: generation stopped at ``</grounding>``, kept."""
    return f'{think}<grounding>{{"bbox_2d": {box}, "source": "{source}"}}</grounding>'


ANSWER_TAGGED = "<think>Now it is clear.</think>\n<answer>B</answer>"
MINI_O3_CASES: list[dict] = [
    {"id": "direct-answer", "replies": ["<think>I can see it.</think>\n<answer>B</answer>"]},
    {"id": "one-zoom", "replies": [grounding("[0.1, 0.1, 0.5, 0.5]"), ANSWER_TAGGED]},
    {
        "id": "zoom-into-an-observation",
        "replies": [
            grounding("[0.2, 0.2, 0.8, 0.7]"),
            grounding("[0.25, 0.25, 0.75, 0.75]", "observation_1"),
            ANSWER_TAGGED,
        ],
    },
    {"id": "box-past-the-edge", "replies": [grounding("[0.8, 0.8, 1.2, 1.2]"), ANSWER_TAGGED]},
    {"id": "zero-width-box", "replies": [grounding("[0.5, 0.1, 0.5, 0.4]"), ANSWER_TAGGED]},
    {
        "id": "missing-observation",
        "replies": [grounding("[0.1, 0.1, 0.5, 0.5]", "observation_5"), ANSWER_TAGGED],
    },
    {
        "id": "unknown-source-name",
        "replies": [grounding("[0.1, 0.1, 0.5, 0.5]", "crop_1"), ANSWER_TAGGED],
    },
    {
        "id": "other-argument-name",
        "replies": [
            (
                '<think>z</think><grounding>{"bbox": [0.1, 0.1, 0.5, 0.5], '
                '"source": "original_image"}</grounding>'
            ),
            ANSWER_TAGGED,
        ],
    },
    {"id": "three-numbers", "replies": [grounding("[0.1, 0.1, 0.5]"), ANSWER_TAGGED]},
    {
        "id": "unclosed-list",
        "replies": [
            (
                '<think>z</think><grounding>{"bbox_2d": [0.1, 0.2, 0.3, '
                '"source": "original_image"}</grounding>'
            ),
            ANSWER_TAGGED,
        ],
    },
    {
        "id": "single-quoted-source",
        "replies": [
            (
                '<think>z</think><grounding>{"bbox_2d": [0.3, 0.3, 0.6, 0.6], "source": '
                "'original_image'}</grounding>"
            ),
            ANSWER_TAGGED,
        ],
    },
    {
        "id": "two-calls-in-one-reply",
        "replies": [
            grounding("[0.0, 0.0, 0.3, 0.3]") + "\n" + grounding("[0.5, 0.5, 0.9, 0.9]", think=""),
            ANSWER_TAGGED,
        ],
    },
    {
        "id": "small-input-upscaled",
        "image": "small.png",
        "replies": [grounding("[0.0, 0.0, 0.5, 0.5]"), ANSWER_TAGGED],
    },
    {"id": "tiny-crop-upscaled", "replies": [grounding("[0.5, 0.5, 0.52, 0.53]"), ANSWER_TAGGED]},
    {"id": "prose-without-answer", "replies": ["The sign looks blue."]},
    {
        "id": "twelve-rounds",
        "replies": [
            grounding(f"[{i / 40:.3f}, {i / 50:.3f}, {0.5 + i / 40:.3f}, {0.5 + i / 50:.3f}]")
            for i in range(12)
        ],
    },
]


def record_mini_o3(git_dir: Path) -> list[dict]:
    """Its tool and observation code on the cases' calls: ``function_tools.py`` whole,
    ``process_image`` and ``process_tool_call`` cut out of ``vllm_async_engine.py`` (run on an
    object with the README's settings; its tokenizer's ``encode`` keeps the message text), the
    input sized by its dataset's ``process_image``. The rollout loop itself (vLLM's async engine)
    cannot run here; its control (a reply without ``<grounding>`` ends; a call in round 12 or with
    12 images ends) is applied around those calls as written there."""
    import io as _io
    import math
    import os
    import re

    import numpy as np
    import torch
    from PIL import Image

    commit = PINNED["mini-o3"][0]
    show = lambda path: (
        subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    helpers = _helpers()
    tools: dict = {}
    tools_source = show("verl/workers/rollout/vllm_rollout/function_tools.py")
    exec(compile(tools_source, "function_tools.py", "exec"), tools)  # noqa: S102
    constants: dict = {}
    exec(compile(show("verl/trainer/constants.py"), "constants.py", "exec"), constants)  # noqa: S102
    space: dict = {
        "re": re,
        "os": os,
        "json": json,
        "math": math,
        "np": np,
        "torch": torch,
        "Image": Image,
        "prepare_grounding_inputs_multi_turn": tools["prepare_grounding_inputs_multi_turn"],
        "crop_image": tools["crop_image"],
        "TOOL_CALL_CROP_MULTI_TRUN_PROMPT": constants["TOOL_CALL_CROP_MULTI_TRUN_PROMPT"],
        "ERROR_INFO_MULTI_TURN_PROMPT": constants["ERROR_INFO_MULTI_TURN_PROMPT"],
    }
    engine = show("verl/workers/rollout/vllm_rollout/vllm_async_engine.py")
    _cut(engine, "vllm_async_engine.py", ["process_image", "process_tool_call"], space)
    dataset: dict = {"np": np, "os": os, "math": math}
    _cut(
        show("verl/utils/dataset/multimodal_dataset.py"),
        "multimodal_dataset.py",
        ["process_image"],
        dataset,
    )
    rollout = types.SimpleNamespace(
        config=types.SimpleNamespace(rollout=types.SimpleNamespace(use_relative_coordinates=True)),
        tokenizer=types.SimpleNamespace(encode=lambda text: [text]),
        max_pixels=2_000_000,
        min_pixels=40_000,
        calculate_image_token_num=lambda image: 1,
    )
    tool_call = space["process_tool_call"]
    calls = re.compile(r"<grounding>(.*?)</grounding>", re.DOTALL)

    def key(image) -> str:
        buffer = _io.BytesIO()
        image.save(buffer, format="PNG")
        return helpers.pixel_key(buffer.getvalue())

    lines = []
    for case in MINI_O3_CASES:
        image = case.get("image", "scene.png")
        original = Image.open(IMAGES / image).convert("RGB")  # its load_image
        first = dataset["process_image"](original, 2_000_000, 40_000)
        vllm_input = {"prompt_token_ids": [], "multi_modal_data": {"image": [first]}}
        observations, sizes = [original], [first.size]
        mask = [torch.zeros(1)]
        turns, end = [], "answer"
        with contextlib_quiet():
            for n, reply in enumerate(case["replies"]):
                if not calls.findall(reply):
                    end = "answer"
                    break
                if len(vllm_input["multi_modal_data"]["image"]) >= 12 or n == 11:
                    end = "exceed"
                    break
                before = len(vllm_input["multi_modal_data"]["image"])
                tool_call(
                    rollout, vllm_input, reply, observations, sizes, mask, n, False, None, None
                )
                shown = vllm_input["multi_modal_data"]["image"][before:]
                turns.append(
                    {
                        "message": vllm_input["prompt_token_ids"][-1],
                        "images": [key(i) for i in shown],
                    }
                )
        lines.append(
            {
                "id": case["id"],
                "image": image,
                "question": QUESTION,
                "options": OPTIONS,
                "replies": case["replies"],
                "mini-o3": {
                    "input": key(first),
                    "turns": turns,
                    "calls": len(turns) + 1,
                    "end": end,
                },
            }
        )
    return lines


def contextlib_quiet():
    """Its tool prints each error; keep the recorder's output to the summary line."""
    import contextlib
    import io as _io

    return contextlib.redirect_stdout(_io.StringIO())


RECORDERS = {
    "deepeyes": record_deepeyes,
    "deepeyesv2": record_deepeyesv2,
    "thyme": record_thyme,
    "mini-o3": record_mini_o3,
}


def main(argv: list[str]) -> None:
    if len(argv) != 3 or argv[0] not in RECORDERS:
        raise SystemExit(
            f"usage: record_agent_fixtures.py {{{','.join(RECORDERS)}}} GIT_DIR OUT.jsonl"
        )
    name, git_dir, out = argv[0], Path(argv[1]), Path(argv[2])
    if not (IMAGES / "white.png").exists():
        write_images(IMAGES)
    lines = RECORDERS[name](git_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines), encoding="utf-8"
    )
    print(f"{len(lines)} cases -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
