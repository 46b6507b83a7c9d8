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


RECORDERS = {"deepeyes": record_deepeyes, "deepeyesv2": record_deepeyesv2}


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
