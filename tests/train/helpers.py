"""Shared builders for the training tests: scripted trajectories through the real loop and a
very small Qwen2.5-VL over a tokenizer fitted to them (no download)."""

from __future__ import annotations

import pytest
from PIL import Image as PILImage

from codedance.policy.scripted import ScriptedPolicy
from codedance.prompts import PAPER
from codedance.rollout import EpisodeConfig, run_episode
from codedance.types import AnswerKind, ExecResult, ExecStatus, Image, Task, Trajectory

pytestmark = pytest.mark.tier("torch")

CODE = "<think>count the red</think><code>\n```python\nprint(3)\n```\n</code>"
ANSWER = "<think>the output says 3</think><answer>{a}</answer>"
CONFIG = EpisodeConfig(max_turns=4, profile=PAPER)


class FakeRunner:
    """A `CodeRunner` that prints 3 and returns one image, or fails on ``raise``."""

    def __init__(self, images: tuple[Image, ...] = ()) -> None:
        self.image = Image.from_pil(PILImage.new("RGB", (40, 30), "blue"), "turn:0:0")

    def run(self, code: str) -> ExecResult:
        if "raise" in code:
            return ExecResult(ExecStatus.ERROR)
        return ExecResult(ExecStatus.OK, stdout="3\n", images=(self.image,))

    async def arun(self, code: str) -> ExecResult:
        return self.run(code)

    def close(self) -> None:
        pass


def task(i: int = 0, difficulty: str = "medium") -> Task:
    image = Image.from_pil(PILImage.new("RGB", (56 + 8 * i, 56), (200, 10 * i, 10)), "input:0")
    return Task(
        f"toy-{difficulty}-{i}",
        "How many red squares are there?",
        (image,),
        "3",
        AnswerKind.COUNT,
        metadata=(("difficulty", difficulty),),
    )


def scripted(t: Task, replies: list[str]) -> Trajectory:
    return run_episode(ScriptedPolicy(replies), t, FakeRunner(), CONFIG)


def corpus() -> list[Trajectory]:
    """Tool-using right answers, direct wrong ones, a failing call."""
    out = []
    for i in range(4):
        out.append(scripted(task(i), [CODE, ANSWER.format(a=3)]))
        out.append(scripted(task(i, "easy"), [ANSWER.format(a=5)]))
    out.append(
        scripted(
            task(9, "hard"),
            [
                "<think>x</think><code>\n```python\nraise ValueError\n```\n</code>",
                ANSWER.format(a=3),
            ],
        )
    )
    return out


def tiny(trajectories: list[Trajectory], hidden: int = 64):  # type: ignore[no-untyped-def]
    from codedance.prompts import conversation
    from codedance.train.processor import ImageTextProcessor
    from codedance.train.tiny import TinySize, build_model, build_tokenizer

    texts = [
        p for t in trajectories for m in conversation(t) for p in m.parts if isinstance(p, str)
    ]
    tok = build_tokenizer(texts, 400, "lines")
    size = TinySize(
        hidden=hidden, layers=2, heads=2, kv_heads=1, intermediate=2 * hidden, vision_hidden=16
    )
    return build_model(tok, size), ImageTextProcessor(tok, max_pixels=56 * 56)
