"""The lockstep loop (train's evaluation and GRPO rollouts) reports the turns done as each reply
ends, so the progress bar of the held-out evaluation inside ``codedance train`` moves within the
first turn of the batch, not only when it ends."""

from __future__ import annotations

import pytest

from codedance.policy.base import Completion
from codedance.rollout import EpisodeConfig
from codedance.sandbox import Sandbox
from codedance.train.sampler import run_lockstep
from codedance.world import task_set

pytestmark = pytest.mark.tier("integration")

CODE = "<code>\n```python\nprint(1)\n```\n</code>"


class Scripted:
    """The model's choices: episode j writes code j times, then answers."""

    def __init__(self, tasks):
        self.turns_of = {t.question: j for j, t in enumerate(tasks)}

    def complete_many(self, conversations, on_reply=None):
        replies = []
        for messages in conversations:
            question = next(m for m in messages if m.role == "user")
            j = next(v for q, v in self.turns_of.items() if q in question.text)
            asked = sum(m.role == "assistant" for m in messages)
            replies.append(
                Completion(text="<answer>1</answer>" if asked >= j else CODE, finish_reason="stop")
            )
            on_reply(1)  # this reply has ended; the batch goes on
        return replies


def test_run_lockstep_counts_turns_as_each_reply_ends():
    tasks = tuple({t.question: t for t in task_set(24, 0, ["counting"])}.values())[:3]
    assert len(tasks) == 3
    seen: list[int] = []
    config = EpisodeConfig(max_turns=4)
    trajectories = run_lockstep(
        Scripted(tasks),
        tasks,
        lambda images: Sandbox(images=images),
        config,
        threads=2,
        on_turns=seen.append,
    )
    assert [len(t.turns) for t in trajectories] == [1, 2, 3]
    # the first batched call: one turn per reply, before any episode ended; then each ended
    # episode adds its unused turns (4 - 1, 4 - 2, 4 - 3), reaching 3 x 4 with the last
    assert seen[:3] == [1, 2, 3]
    assert seen == [1, 2, 3, 6, 7, 8, 10, 11, 12]
