"""``--scoring vlmevalkit`` against VLMEvalKit's own verdicts, per sample.

The fixture ``fixtures/vlmevalkit_verdicts.jsonl`` was recorded once by running VLMEvalKit's real
scoring functions (commit e8e78f0) on messy predictions: ``scripts/record_vlmevalkit_verdicts.py``.
Here each case's TSV row goes through our loader, the prediction is the trajectory's answer, and
judge cases get the same scripted judge replies from a real HTTP server (the judge's *choices*
are scripted; ``null`` is an API failure, served as HTTP 500). Agreement means the same score
(0, 1 or 0.5), the same "needs a judge" (None: pending without a judge) and the same number of
judge calls.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from codedance.eval.loaders import to_task
from codedance.eval.scoring import score_sample
from codedance.eval.sources import RawItem
from codedance.eval.spec import get_spec
from codedance.grading import JUDGE_SERVER, JudgeClient
from codedance.policy.replay_server import ReplayServer, ServerReply
from codedance.types import StopReason, Trajectory, Turn

pytestmark = pytest.mark.tier("unit")

CASES = [
    json.loads(line)
    for line in (Path(__file__).parent / "fixtures" / "vlmevalkit_verdicts.jsonl")
    .read_text(encoding="utf-8")
    .splitlines()
]
SPEC = {
    "countbench": "countbench",
    "vstar": "vstar",
    "hrbench": "hrbench4k",
    "chartqa": "chartqa",
    "wemath": "wemath",
    "mathvista": "mathvista",
    "mathvision": "mathvision",
    "mathverse": "mathverse",
    "charxiv": "charxiv",
}


class Replies:
    """The judge server's script: the current case's replies, in order."""

    def __init__(self) -> None:
        self.queue: list[str | None] = []
        self.calls = 0

    def __call__(self, body: dict) -> ServerReply:
        self.calls += 1
        reply = self.queue.pop(0) if self.queue else None
        return (
            ServerReply(status=500, error="judge API failure")
            if reply is None
            else ServerReply(reply)
        )


@pytest.fixture(scope="module")
def judge_server():
    replies = Replies()
    with (
        ReplayServer(replies, model_names=("judge",)) as server,
        JudgeClient(replace(JUDGE_SERVER, url=server.url, model="judge", retries=0)) as judge,
    ):
        yield judge, replies


def ours(case: dict, judge_server) -> tuple[float | None, int, str]:
    spec = get_spec(SPEC[case["benchmark"]])
    task = to_task(spec, RawItem(case["row"], ()), 0, images=False)
    trajectory = Trajectory(task.id, (Turn(""),), StopReason.ANSWERED, answer=case["prediction"])
    judge, replies = judge_server
    use_judge = case.get("judge_replies") is not None
    replies.queue, replies.calls = list(case.get("judge_replies") or []), 0
    score = score_sample(
        f"{task.id}#0", task, trajectory, judge if use_judge else None, spec.scorer
    )
    return score.value, replies.calls, score.judge_failure


def test_the_fixture_has_at_least_20_messy_cases_per_benchmark():
    counts = Counter(c["benchmark"] for c in CASES)
    assert set(counts) == set(SPEC) and min(counts.values()) >= 20, counts
    assert sum(1 for c in CASES if c.get("judge_replies") is not None) >= 60


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case_agrees_with_vlmevalkit(case, judge_server):
    value, calls, failure = ours(case, judge_server)
    expected = case["vlmevalkit"]
    if expected.get("random_fallback"):  # VLMEvalKit picks a random option; we score 0 and say why
        assert value == 0 and failure
        return
    assert value == expected["score"], (case["prediction"], case.get("judge_replies"))
    assert calls == expected["judge_calls"]


def test_a_wholly_boxed_wemath_answer_is_unwrapped_before_vlmevalkits_rule():
    """docs/eval.md's WeMath row: VLMEvalKit's exact matching reads ``\\boxed{B}`` as written
    (0, recorded from its own function); our extraction unwraps an ``<answer>`` that is one
    ``\\boxed{}`` first, so the same answer scores 1 here."""
    recorded = next(
        c
        for c in CASES
        if c["benchmark"] == "wemath"
        and c["prediction"] == "\\boxed{B}"
        and c.get("judge_replies") is None
    )
    assert recorded["vlmevalkit"]["score"] == 0.0 and recorded["row"]["answer"] == "B"
    spec = get_spec("wemath")
    task = to_task(spec, RawItem(recorded["row"], ()), 0, images=False)
    boxed = Trajectory(
        task.id,
        (Turn("<think>so</think><answer>\\boxed{B}</answer>"),),
        StopReason.ANSWERED,
        answer="\\boxed{B}",
    )
    score = score_sample(f"{task.id}#0", task, boxed, None, spec.scorer)
    assert (score.value, score.answer, score.source) == (1, "B", "answer_tag")
