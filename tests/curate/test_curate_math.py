"""The math recipe (Tables 8-9): the revision split into steps, one executed turn per step in the
real sandbox, the revision's own text used while the real outputs agree with its claims and the
strong model (scripted here: its choices only) taking over from the first disagreement."""

from __future__ import annotations

import asyncio

import pytest

from codedance.curate.math_recipe import (
    ProgramUnparseable,
    math_trajectory,
    split_revision,
    steps_of,
)
from codedance.policy.base import Completion
from codedance.rollout import Episode, EpisodeConfig
from codedance.sandbox import SandboxPool
from codedance.types import Message, StopReason
from codedance.world import generate

pytestmark = pytest.mark.tier("integration")


def _snippet(code: str, claim: str | None) -> str:
    tail = "" if claim is None else f"\n<interpreter>{claim}</interpreter>"
    return f"<code>\n```python\n{code}\n```\n</code>{tail}"


def test_revision_splits_into_steps_and_refuses_malformed_snippets() -> None:
    reply = (
        f"1. Read the sides.\n{_snippet('a, b = 3, 4' + chr(10) + 'print(a, b)', '3 4')}\n"
        f"2. Pythagoras.\n{_snippet('print((3**2 + 4**2) ** 0.5)', None)}\nSo "
        "5.\n<answer>5</answer>"
    )
    revision = split_revision(reply)
    assert [(s.text, s.claimed) for s in revision.steps] == [
        ("1. Read the sides.", "3 4"),
        ("2. Pythagoras.", None),
    ]
    assert revision.steps[0].code == "a, b = 3, 4\nprint(a, b)"
    assert revision.closing == "So 5.\n<answer>5</answer>"
    for bad in (
        "no code at all <answer>5</answer>",
        "<code>\n```python\nprint(1)\n```\n",
        "<code>print(1)</code>",
        "<code>\n```python\n\n```\n</code>",
    ):
        with pytest.raises(ProgramUnparseable):
            split_revision(bad)
    assert steps_of("1. a\n2. b\n<answer>5</answer>") == "1. a\n2. b"


class _Strong:
    """The strong model's choices, in order; records what it was shown."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.seen: list[tuple[Message, ...]] = []

    async def ask(
        self, messages: tuple[Message, ...], temperature: float | None = None
    ) -> Completion:
        self.seen.append(messages)
        return Completion(self.replies[len(self.seen) - 1])


def test_each_step_runs_in_the_sandbox_and_a_wrong_claim_hands_over_to_the_model() -> None:
    task = generate("counting", "easy", 0)
    episode = EpisodeConfig(max_turns=6)
    holds = (
        f"1. Count.\n{_snippet('n = 2 + 3' + chr(10) + 'print(n)', '5')}\n"
        f"2. Double.\n{_snippet('print(n * 2)', '10')}\nDone.\n<answer>10</answer>"
    )
    wrong = (
        f"1. Count.\n{_snippet('print(2 + 3)', '6')}\n"  # the revision's claim is wrong
        f"2. Double.\n{_snippet('print(12)', '12')}\n<answer>12</answer>"
    )

    async def main():
        async with SandboxPool(max_running=2) as pool:

            async def run(strong: _Strong):
                sandbox = await pool.asandbox(images=Episode(task, episode).images)
                try:
                    return await math_trajectory(task, strong, sandbox, episode)
                finally:
                    sandbox.close()

            held = _Strong(["1. Count: 5.\n2. Double: 10.\n<answer>10</answer>", holds])
            diverged = _Strong(
                [
                    "1. Count: 6.\n<answer>12</answer>",
                    wrong,
                    (
                        "<think>The sandbox printed 5, not 6: doubling gives 10.</think>\n"
                        "<answer>10</answer>"
                    ),
                ]
            )
            return await run(held), held, await run(diverged), diverged

    (trajectory, _, record), held, (trajectory2, _, record2), diverged = asyncio.run(main())
    assert [t.result.stdout for t in trajectory.turns[:2]] == ["5\n", "10\n"]  # the second reuses n
    assert trajectory.turns[2].text == "<think>Done.</think>\n<answer>10</answer>"
    assert trajectory.stop_reason is StopReason.ANSWERED and trajectory.answer == "10"
    assert (
        record["agreed"] == [True, True] and record["diverged_at"] is None and len(held.seen) == 2
    )
    # the first step's real output (5) disagrees with the claim (6): the model writes the rest
    assert trajectory2.turns[0].result.stdout == "5\n" and len(trajectory2.turns) == 2
    assert record2["agreed"] == [False] and record2["diverged_at"] == 0 and len(diverged.seen) == 3
    assert "5" in diverged.seen[2][-1].parts[-1] and trajectory2.answer == "10"
