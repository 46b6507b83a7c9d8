"""Record the release's and DeepEyes' own reward verdicts on shared episodes, as test fixtures.

    git -C <CodeDance mirror> archive 62f8c6f | tar -x -C /tmp/codedance-release
    git -C <DeepEyes mirror> archive 6c5e796 | tar -x -C /tmp/deepeyes
    PYTHONPATH=$PWD .venv/bin/python scripts/record_reward_verdicts.py \\
        /tmp/codedance-release /tmp/deepeyes > tests/fixtures/reward_verdicts.jsonl

The checkouts must be CodeDance-VL/CodeDance at 62f8c6f (only
``verl/utils/reward_score/llm_judge_qwen_tool_step.py`` is read) and Visual-Agent/DeepEyes at
6c5e796 (only ``verl/utils/reward_score/vl_agent.py``). Each file is executed as written, and its
scoring functions are called on the episodes of `cases()`: the release's ``compute_score_default``
(general data) and ``compute_score_math``; DeepEyes' ``compute_score`` (general) and
``compute_score_math``. ``tests/test_reward_verdicts.py`` scores the same episodes with the
``release`` and ``deepeyes`` profiles and compares.

Stubs (package glue only; no scoring logic): ``openai.OpenAI`` is a scripted client whose
``chat.completions.create`` returns the case's ``judge`` replies in order (the judge's *choices*
are the test double; ``math_verify`` runs for real), and while ``vl_agent.py`` is imported
``requests.get`` answers its model-list request with one model.

The response each scorer reads is rendered from the episode as the rollout decodes it: every
assistant turn's text, then its tool response in a user message. Tool responses are codedance's
own feedback text under the ``release`` prompt profile (``<tool_response>…</tool_response>``, an
error as ``--- Execution Error (…) ---``); each returned image is
``<|vision_start|><|image_pad|><|image_pad|><|vision_end|>``; the turn-limit note follows as one
more ``<tool_response>``, as the release sends it.

Each output line: scorer (``release`` or ``deepeyes``), domain, id, turns (text, status, stdout,
images, limit_note), correct (the grader's verdict on the model's own answer, what the profile is
given), judge (the scripted replies), response (the rendered string), and ``verdict``: the
scorer's returned score and, for the release, acc, format_r, tool_success_rate (null without
calls), tool_reward_component and tool_step.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import types
from pathlib import Path
from typing import ClassVar

RELEASE_FILE = "verl/utils/reward_score/llm_judge_qwen_tool_step.py"
DEEPEYES_FILE = "verl/utils/reward_score/vl_agent.py"
IMAGE = "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>"
TURN_END, USER, ASSISTANT = "<|im_end|>\n", "<|im_start|>user\n", "<|im_start|>assistant\n"


class ScriptedJudge:
    """What ``openai.OpenAI`` is while recording: every client returns the scripted replies."""

    replies: ClassVar[list[str]] = []
    calls: ClassVar[int] = 0

    def __init__(self, **kwargs: object) -> None:
        self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self._create))

    @classmethod
    def _create(cls, **kwargs: object) -> object:
        cls.calls += 1
        reply = cls.replies.pop(0) if cls.replies else ""
        message = types.SimpleNamespace(content=reply)
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=message)])


def _load(path: Path, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(path)
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)  # noqa: S102 - their file
    return module


def load_scorers(release_root: Path, deepeyes_root: Path) -> dict[str, types.ModuleType]:
    """The two outside scorer modules, executed from their checkouts (see the module docstring)."""
    sys.modules["openai"] = types.SimpleNamespace(OpenAI=ScriptedJudge)  # type: ignore[assignment]
    real_requests = sys.modules.get("requests")
    models = types.SimpleNamespace(json=lambda: {"data": [{"id": "judge"}]})
    sys.modules["requests"] = types.SimpleNamespace(get=lambda *a, **k: models)  # type: ignore[assignment]
    try:
        deepeyes = _load(deepeyes_root / DEEPEYES_FILE, "deepeyes_vl_agent")
    finally:
        if real_requests is not None:
            sys.modules["requests"] = real_requests
        else:
            del sys.modules["requests"]
    release = _load(release_root / RELEASE_FILE, "release_llm_judge_qwen_tool_step")
    return {"release": release, "deepeyes": deepeyes}


def _png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), "white").save(buffer, format="PNG")
    return buffer.getvalue()


def feedback_text(turn: dict) -> str:
    """codedance's own tool response for the turn's call (``release`` prompt profile)."""
    from codedance.prompts.feedback import IMAGE_PLACEHOLDER, render_feedback
    from codedance.prompts.profiles import RELEASE
    from codedance.types import ExecError, ExecResult, ExecStatus, Image

    status = ExecStatus(turn["status"])
    images = tuple(Image.from_png(_png(), f"turn:0:{k}") for k in range(turn.get("images", 0)))
    error = (
        None
        if status is ExecStatus.OK
        else ExecError(
            "ZeroDivisionError" if status is ExecStatus.ERROR else "TimeoutError",
            "division by zero",
        )
    )
    result = ExecResult(status, stdout=turn.get("stdout", ""), images=images, error=error)
    return render_feedback(result, RELEASE).text.replace(IMAGE_PLACEHOLDER, IMAGE)


def response(turns: list[dict]) -> str:
    """The decoded response a scorer reads (see the module docstring)."""
    from codedance.prompts.profiles import TURN_LIMIT

    parts: list[str] = []
    for turn in turns:
        parts.append(turn["text"])
        blocks = [feedback_text(turn)] if turn.get("status") else []
        if turn.get("limit_note"):
            blocks.append(f"<tool_response>\n{TURN_LIMIT}\n</tool_response>")
        if blocks:
            parts.append(TURN_END + USER + "\n".join(blocks) + TURN_END + ASSISTANT)
    return "".join(parts)


def _clean(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def score(scorers: dict[str, types.ModuleType], case: dict) -> dict:
    """The outside scorer's verdict on one case."""
    module = scorers[case["scorer"]]
    ScriptedJudge.replies, ScriptedJudge.calls = list(case["judge"]), 0
    text, extra = case["response"], {"question": "How many coins are there?"}
    with contextlib.redirect_stdout(sys.stderr):  # their debug prints
        return _score(module, case, text, extra)


def _score(module: types.ModuleType, case: dict, text: str, extra: dict) -> dict:
    if case["scorer"] == "release":
        fn = module.compute_score_math if case["domain"] == "math" else module.compute_score_default
        out = fn(text, case["gold"], extra)
        keys = (
            "score",
            "acc",
            "format_r",
            "tool_success_rate",
            "tool_reward_component",
            "tool_step",
        )
        verdict = {k: _clean(out[k]) for k in keys}
    else:
        fn = module.compute_score_math if case["domain"] == "math" else module.compute_score
        verdict = {"score": float(fn(text, case["gold"], extra))}
    verdict["judge_calls"] = ScriptedJudge.calls
    return verdict


THINK = "<think>Count the coins.</think>"
CODE = THINK + "<code>\n```python\nprint(count(input_image))\n```\n</code>"
CROP = (
    THINK + "<code>\n```python\ncrop = input_image.crop((0, 0, 32, 32))\ncrop.show()\n```\n</code>"
)


def answer(text: str = "7") -> str:
    return f"<think>The count is {text}.</think><answer>{text}</answer>"


def call(status: str = "ok", text: str = CODE, **extra: object) -> dict:
    return {
        "text": text,
        "status": status,
        "stdout": "RESULT: 7" if status == "ok" else "",
        **extra,
    }


def say(text: str) -> dict:
    return {"text": text, "status": None}


YES, NO = "Judgement: 1", "Judgement: 0"
TRUE, FALSE = "## Equivalence Judgement\nTRUE", "## Equivalence Judgement\nFALSE"


def _release_general() -> list[tuple[str, list[dict], bool, list[str]]]:
    noted = call(limit_note=True)
    return [
        ("direct, right", [say(answer())], True, [YES]),
        ("direct, wrong", [say(answer("6"))], False, [NO]),
        ("one call, right", [call(), say(answer())], True, [YES]),
        ("failed then ok call, wrong", [call("error"), call(), say(answer("6"))], False, [NO]),
        ("ok then failed call, right", [call(), call("error"), say(answer())], True, [YES]),
        ("timeout, right", [call("timeout"), say(answer())], True, [YES]),
        (
            "three calls, one failed, right",
            [call(), call("error"), call(), say(answer())],
            True,
            [YES],
        ),
        ("unbalanced think", [call(), say("<think>so<answer>7</answer>")], True, [YES]),
        ("untagged boxed answer", [call(), say(THINK + r"\boxed{7}")], True, [NO]),
        (
            "answer of 1000 characters",
            [say(THINK + "<answer>" + "7" * 1000 + "</answer>")],
            True,
            [YES],
        ),
        ("note, answered after", [call(), noted, say(answer())], True, [NO]),
        (
            "note after a failed call, answered",
            [call(), {**call("error"), "limit_note": True}, say(answer())],
            True,
            [NO],
        ),
        ("note, code again after (not run)", [call(), noted, say(CODE)], False, [NO]),
        ("note, untagged boxed after", [call(), noted, say(THINK + r"\boxed{7}")], True, [NO]),
        ("note, wrong answer after", [call("error"), noted, say(answer("6"))], False, [NO]),
        ("note, nothing tagged, unbalanced think", [noted, say("<think>so 7")], False, [NO]),
    ]


def _release_math() -> list[tuple[str, list[dict], bool, list[str]]]:
    noted = call(limit_note=True)
    return [
        ("direct, right", [say(answer())], True, []),
        ("direct, wrong", [say(answer("6"))], False, [FALSE]),
        ("one call, right", [call(), say(answer())], True, []),
        ("failed call, wrong", [call("error"), say(answer("6"))], False, [FALSE]),
        ("ok then failed call, right", [call(), call("error"), say(answer())], True, []),
        (
            "answer before its think",
            [call(), say("<answer>7</answer><think>done</think>")],
            True,
            [],
        ),
        ("tool_call after the last think", [say(answer() + " tool_call")], True, []),
        ("untagged boxed answer", [call(), say(THINK + r"\boxed{7}")], True, []),
        ("note, answered after", [call(), noted, say(answer())], True, []),
        ("note, code with think after (not run)", [call(), noted, say(CODE)], False, []),
        (
            "note, code without think after (not run)",
            [call(), noted, say("<code>\n```python\nprint(1)\n```\n</code>")],
            False,
            [FALSE],
        ),
        (
            "note after a failed call, wrong",
            [call("error"), noted, say(answer("6"))],
            False,
            [FALSE],
        ),
    ]


def _deepeyes_general() -> list[tuple[str, list[dict], bool, list[str]]]:
    crop = call(text=CROP, images=1)
    return [
        ("direct, right", [say(answer())], True, [YES]),
        ("direct, wrong", [say(answer("6"))], False, [NO]),
        ("printing call, right", [call(), say(answer())], True, [YES]),
        ("image call, right", [crop, say(answer())], True, [YES]),
        ("image call, wrong", [crop, say(answer("6"))], False, [NO]),
        ("failed call, right", [call("error"), say(answer())], True, [YES]),
        ("failed then image call, right", [call("error"), crop, say(answer())], True, [YES]),
        ("two images in two calls, right", [crop, crop, say(answer())], True, [YES]),
        ("two images in one call, right", [call(text=CROP, images=2), say(answer())], True, [YES]),
        (
            "image call, unbalanced think, right",
            [crop, say("<think>so<answer>7</answer>")],
            True,
            [YES],
        ),
        (
            "answer of 1000 characters, image",
            [crop, say(THINK + "<answer>" + "7" * 1000 + "</answer>")],
            True,
            [YES],
        ),
    ]


def _deepeyes_math() -> list[tuple[str, list[dict], bool, list[str]]]:
    crop = call(text=CROP, images=1)
    boxed = THINK + r"<answer>\boxed{7}</answer>"
    return [
        ("direct, right", [say(boxed)], True, []),
        ("direct, wrong", [say(THINK + r"<answer>\boxed{6}</answer>")], False, [FALSE]),
        ("image call, right", [crop, say(boxed)], True, []),
        ("printing call, right", [call(), say(boxed)], True, []),
        ("image call, wrong", [crop, say(THINK + r"<answer>\boxed{6}</answer>")], False, [FALSE]),
        (
            "image call, unbalanced think, right",
            [crop, say(r"<think>so<answer>\boxed{7}</answer>")],
            True,
            [],
        ),
        ("failed call, right", [call("error"), say(boxed)], True, []),
    ]


def cases() -> list[dict]:
    """The shared episodes (see the module docstring), with the gold answer 7."""
    out = []
    for scorer, domain, rows in (
        ("release", "general", _release_general()),
        ("release", "math", _release_math()),
        ("deepeyes", "general", _deepeyes_general()),
        ("deepeyes", "math", _deepeyes_math()),
    ):
        for n, (note, turns, correct, judge) in enumerate(rows, 1):
            out.append(
                {
                    "scorer": scorer,
                    "domain": domain,
                    "id": f"{scorer}-{domain}-{n}",
                    "note": note,
                    "gold": "7",
                    "turns": turns,
                    "correct": correct,
                    "judge": judge,
                    "response": response(turns),
                }
            )
    return out


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(
            "usage: record_reward_verdicts.py /path/to/CodeDance@62f8c6f /path/to/DeepEyes@6c5e796"
        )
    scorers = load_scorers(Path(sys.argv[1]), Path(sys.argv[2]))
    counts: dict[str, int] = {}
    for case in cases():
        case["verdict"] = score(scorers, case)
        counts[case["scorer"]] = counts.get(case["scorer"], 0) + 1
        print(json.dumps(case, ensure_ascii=False))
    print(json.dumps(counts), file=sys.stderr)


if __name__ == "__main__":
    main()
