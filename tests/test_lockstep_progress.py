"""The lockstep loop (train's evaluation and GRPO rollouts) reports how many episodes have ended
after each turn, so the held-out evaluation inside ``codedance train`` shows a progress bar."""

from __future__ import annotations

import pytest

from codedance.policy.base import Completion
from codedance.sandbox import Sandbox
from codedance.train.sampler import run_lockstep
from codedance.world import task_set

pytestmark = pytest.mark.tier("integration")

CODE = "<code>\n```python\nprint(1)\n```\n</code>"


class Scripted:
    """The model's choices: episode j writes code j times, then answers."""

    def __init__(self, tasks):
        self.turns_of = {t.question: j for j, t in enumerate(tasks)}

    def complete_many(self, conversations):
        replies = []
        for messages in conversations:
            question = next(m for m in messages if m.role == "user")
            j = next(v for q, v in self.turns_of.items() if q in question.text)
            asked = sum(m.role == "assistant" for m in messages)
            replies.append(
                Completion(text="<answer>1</answer>" if asked >= j else CODE, finish_reason="stop")
            )
        return replies


def test_run_lockstep_reports_episodes_ended_after_each_turn():
    tasks = tuple({t.question: t for t in task_set(24, 0, ["counting"])}.values())[:3]
    assert len(tasks) == 3
    seen: list[int] = []
    trajectories = run_lockstep(
        Scripted(tasks),
        tasks,
        lambda images: Sandbox(images=images),
        threads=2,
        on_done=seen.append,
    )
    assert [len(t.turns) for t in trajectories] == [1, 2, 3]
    assert seen == [1, 2, 3]
