"""`BatchedSampler` reports each reply as it ends, from inside ``generate`` (a row's end-of-turn
token, looked for at every generated token), so the evaluation bar of ``codedance train`` moves
before a batched turn returns."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from codedance.policy.base import SamplingParams
from codedance.train.sampler import BatchedSampler, _Ended
from tests.train.helpers import CONFIG, corpus, task, tiny

pytestmark = pytest.mark.tier("torch")


def test_rows_are_reported_at_the_token_that_ends_them():
    reports: list[int] = []
    ended = _Ended(width=2, eos_id=9, report=reports.append)
    prompt = [[1, 2], [1, 2], [1, 2]]
    steps = [[5, 5, 5], [9, 5, 5], [0, 5, 9], [0, 9, 0]]  # row 0 ends at 2, row 2 at 3, row 1 at 4
    generated: list[list[int]] = [[], [], []]
    for step in steps:
        for row, token in enumerate(step):
            generated[row].append(token)
        ids = torch.tensor([p + g for p, g in zip(prompt, generated, strict=True)])
        assert not ended(ids, None).any()  # it never stops a row itself
    assert reports == [1, 1, 1]


def test_complete_many_reports_every_reply_once():
    from codedance.rollout import Episode

    model, processor = tiny(corpus())
    sampler = BatchedSampler(model, processor, SamplingParams(max_tokens=6), batch_size=2)
    conversations = [Episode(task(i), CONFIG).messages for i in range(3)]
    reports: list[int] = []
    replies = sampler.complete_many(conversations, on_reply=reports.append)
    assert len(replies) == 3 and sum(reports) == 3
