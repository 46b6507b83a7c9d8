"""Record what each peer's own evaluation loop does with scripted model replies, as test fixtures.

    .venv/bin/python scripts/record_agent_fixtures.py deepeyes GIT_DIR tests/agents/fixtures/deepeyes.jsonl

``GIT_DIR`` is a git repository (bare or not) of the peer holding the pinned commit below, for
example ``git clone https://github.com/Visual-Agent/DeepEyes``. The peer's evaluation file is read
from that commit (``git show``) and run as it is; its parsing, tool and answer code run unchanged
on the shared cases of `CASES` and the images of ``tests/agents/fixtures/images/`` (made by
`write_images` when missing). ``tests/agents/test_agent_fixtures.py`` replays the same cases
through codedance's agent profile and compares.

The only stand-in is the model: the ``openai`` package is replaced by a client whose
``chat.completions.create`` returns the case's replies in order and keeps a copy of every request's
messages. Each output line: case id, image, question, options, replies, and what the peer's loop
did: ``requests`` (per model call, the messages added since the previous call; images as the
SHA-256 of their RGB pixels plus size, as ``tests/agents/fixture_cases.py`` reduces them), ``answer`` (its ``pred_ans``) and ``status``.

DeepEyes (``eval/eval_vstar.py``): the module is executed with ``sys.argv`` naming a model (so it
does not ask a server for one) and a scratch save folder; its ``process`` runs each case. It also
imports torch (unused by the loop; the CPU build is enough).
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

PINNED = {"deepeyes": ("6c5e79671dbff958a6f9d44848ba2ca87854f0b0", "eval/eval_vstar.py")}
IMAGES = Path(__file__).resolve().parents[1] / "tests" / "agents" / "fixtures" / "images"

Z = '<tool_call>\n{{"name": "image_zoom_in_tool", "arguments": {{"bbox_2d": {box}, "label": "the sign"}}}}\n</tool_call>'
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
    {"id": "whole-small-image", "image": "small.png", "replies": [zoom("[0, 0, 100, 80]"), ANSWER_B]},
    {"id": "two-zooms", "replies": [zoom("[0, 0, 224, 168]"), zoom("[224, 168, 448, 336]"), ANSWER_B]},
    {"id": "two-calls-one-reply", "replies": [zoom("[0, 0, 100, 100]") + "\n" + Z.format(box="[200, 200, 300, 300]"),
                                              ANSWER_B]},
    {"id": "unclosed-call-at-end", "replies": [THINK + '<tool_call>{"name": "image_zoom_in_tool", "arguments": '
                                               '{"bbox_2d": [5, 5, 300, 200]}}', ANSWER_B]},
    {"id": "other-tool-name", "replies": [THINK + '<tool_call>{"name": "crop", "arguments": '
                                          '{"bbox_2d": [50, 60, 250, 160]}}</tool_call>', ANSWER_B]},
    {"id": "json-true-literal", "replies": [THINK + '<tool_call>{"name": "image_zoom_in_tool", "arguments": '
                                            '{"bbox_2d": [1, 2, 100, 100], "exact": true}}</tool_call>']},
    {"id": "wrong-argument-key", "replies": [THINK + '<tool_call>{"name": "image_zoom_in_tool", "arguments": '
                                             '{"bbox": [1, 2, 100, 100]}}</tool_call>']},
    {"id": "arguments-as-string", "replies": [THINK + '<tool_call>{"name": "image_zoom_in_tool", "arguments": '
                                              '"{\\"bbox_2d\\": [1, 2, 100, 100]}"}</tool_call>']},
    {"id": "three-numbers", "replies": [zoom("[1, 2, 100]")]},
    {"id": "reversed-box", "replies": [zoom("[300, 200, 100, 50]")]},
    {"id": "zero-width-box", "replies": [zoom("[50, 50, 50, 200]"), ANSWER_B]},
    {"id": "truncated-call", "replies": [THINK + '<tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [1']},
    {"id": "prose-then-answer", "replies": ["The answer is probably B.", ANSWER_B]},
    {"id": "truncated-thinking", "replies": ["<think>Let me look at every part of the image in turn, starting"] * 11},
    {"id": "close-tag-only", "replies": ["<think>done</think> B</answer>"]},
    {"id": "call-and-answer", "replies": [zoom("[0, 0, 50, 50]") + "\n<answer>C</answer>"]},
    {"id": "eleven-zooms", "replies": [zoom(f"[{i * 10}, {i * 5}, {i * 10 + 150}, {i * 5 + 120}]") for i in range(11)]},
]
QUESTION = "What is the colour of the sign?"
OPTIONS = ["red", "blue", "green", "yellow"]


def write_images(folder: Path) -> None:
    """The shared images: a 448x336 and a 100x80 RGB pattern (gradients, a checkerboard, a box)."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for name, (w, h) in {"scene.png": (448, 336), "small.png": (100, 80)}.items():
        y, x = np.mgrid[0:h, 0:w]
        rgb = np.stack([x * 255 // w, y * 255 // h, ((x // 16 + y // 16) % 2) * 200], axis=-1).astype(np.uint8)
        rgb[h // 4:h // 2, w // 3:w // 2] = (220, 30, 40)
        Image.fromarray(rgb, "RGB").save(folder / name, format="PNG", optimize=True)


def _helpers() -> types.ModuleType:
    """``tests/agents/fixture_cases.py``: the one definition of how requests are stored."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fixture_cases", IMAGES.parents[1] / "fixture_cases.py")
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
    return subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def record_deepeyes(git_dir: Path) -> list[dict]:
    source = peer_source("deepeyes", git_dir)
    sys.modules["openai"] = types.SimpleNamespace(OpenAI=_Model)  # type: ignore[assignment]
    scratch = Path(tempfile.mkdtemp())
    sys.argv = ["eval_vstar.py", "--eval_model_name", "scripted", "--save_path", str(scratch / "out")]
    module = types.ModuleType("deepeyes_eval_vstar")
    exec(compile(source, PINNED["deepeyes"][1], "exec"), module.__dict__)  # noqa: S102 - the peer's own file
    helpers = _helpers()
    lines = []
    for case in CASES:
        image = case.get("image", "scene.png")
        folder = scratch / case["id"]
        folder.mkdir()
        (folder / f"{case['id']}.jpg").write_bytes((IMAGES / image).read_bytes())  # the name it expects
        (folder / f"{case['id']}.json").write_text(json.dumps({"question": QUESTION, "options": OPTIONS}))
        _Model.replies, _Model.requests = list(case["replies"]), []
        info = module.process((f"{case['id']}.jpg", str(folder)))
        lines.append({"id": case["id"], "image": image, "question": QUESTION, "options": OPTIONS,
                      "replies": case["replies"], "deepeyes": {
                          "requests": helpers.deltas([helpers.normal(m) for m in _Model.requests]),
                          "answer": info["pred_ans"], "status": info["status"]}})
    return lines


RECORDERS = {"deepeyes": record_deepeyes}


def main(argv: list[str]) -> None:
    if len(argv) != 3 or argv[0] not in RECORDERS:
        raise SystemExit(f"usage: record_agent_fixtures.py {{{','.join(RECORDERS)}}} GIT_DIR OUT.jsonl")
    name, git_dir, out = argv[0], Path(argv[1]), Path(argv[2])
    if not (IMAGES / "scene.png").exists():
        write_images(IMAGES)
    lines = RECORDERS[name](git_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines), encoding="utf-8")
    print(f"{len(lines)} cases -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
