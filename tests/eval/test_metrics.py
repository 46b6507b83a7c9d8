"""Benchmark metrics against hand-computed numbers."""

from __future__ import annotations

import pytest

from codedance.eval.metrics import benchmark_metrics
from codedance.eval.spec import SampleScore, get_spec
from codedance.types import AnswerKind, Task

pytestmark = pytest.mark.tier("unit")


def make(bench: str, rows: list[tuple[dict, bool | None]]):
    tasks, scores = [], []
    for n, (meta, correct) in enumerate(rows):
        t = Task(
            id=f"{bench}/{n}",
            question="q",
            images=(),
            answer="A",
            kind=AnswerKind.CHOICE,
            metadata=tuple(meta.items()),
        )
        tasks.append(t)
        scores.append(
            SampleScore(f"{t.id}#0", bench, t.id, correct, bool(correct), "A", "answer_tag", "rule")
        )
    return tasks, scores


def test_hrbench_per_rotation_average_with_single_and_cross():
    # cycle 1: single 1/1, cross 0/1 -> all 1/2;  cycle 2: single 1/1, cross 1/1 -> all 2/2
    rows = [
        ({"cycle": "c1", "category": "single"}, True),
        ({"cycle": "c1", "category": "cross"}, False),
        ({"cycle": "c2", "category": "single"}, True),
        ({"cycle": "c2", "category": "cross"}, True),
    ]
    metrics, breakdowns, _ = benchmark_metrics(get_spec("hrbench4k"), *make("hrbench4k", rows))
    assert metrics["accuracy"] == pytest.approx(0.75)  # (0.5 + 1.0) / 2
    assert metrics["avg_single"] == 1.0 and metrics["avg_cross"] == pytest.approx(0.5)
    assert {k: v for k, v, _ in dict(breakdowns)["cycle"]}["c1:all"] == 0.5


def test_chartqa_human_and_augmented():
    rows = [({"split": "human"}, True), ({"split": "human"}, False), ({"split": "augmented"}, True)]
    metrics, breakdowns, _ = benchmark_metrics(get_spec("chartqa"), *make("chartqa", rows))
    assert metrics["accuracy"] == pytest.approx(2 / 3)
    assert {k: v for k, v, _ in dict(breakdowns)["split"]} == {"augmented": 1.0, "human": 0.5}


def test_wemath_four_dimensions_strict_and_loose():
    def problem(i: str, steps: int, parts: list[bool], whole: bool):
        return [({"ID": i, "key": f"{steps}steps_{k + 1}"}, p) for k, p in enumerate(parts)] + [
            ({"ID": i, "key": f"{steps}steps_multi"}, whole)
        ]

    rows = (
        problem("1", 2, [True, True], True)  # CM (strict and loose)
        + problem("2", 2, [True, False], True)  # RM strict, CM loose
        + problem("3", 2, [False, False], True)  # RM (strict and loose)
        + problem("4", 2, [True, True], False)  # IG
        + problem("5", 3, [True, False, True], False)
    )  # IK
    metrics, _, _ = benchmark_metrics(get_spec("wemath"), *make("wemath", rows))
    n = 5
    assert metrics["composite_problems"] == n
    assert metrics["IK"] == 1 / n and metrics["IG"] == 1 / n
    assert metrics["CM_strict"] == 1 / n and metrics["CM_loose"] == 2 / n
    assert metrics["RM_strict"] == pytest.approx(2 / 3)  # RM / (CM + RM) = 2 / (1 + 2)
    assert metrics["RM_loose"] == pytest.approx(1 / 3)  # 1 / (2 + 1)
    assert metrics["score_strict"] == pytest.approx((5 - 0.5 - 2 - 1) / 5)
    assert metrics["score_loose"] == pytest.approx((5 - 0.5 - 1 - 1) / 5)
    assert metrics["S1"] == pytest.approx(7 / 11)  # right one-step parts: 2+1+0+2+2 of 11
    assert metrics["S2"] == pytest.approx(3 / 4) and metrics["S3"] == 0.0


def test_not_produced_is_said_not_guessed():
    rows = [({"task": "geometry"}, True), ({"task": "geometry"}, None)]
    tasks, scores = make("mathvista", rows)
    scores[1] = SampleScore(
        scores[1].key,
        "mathvista",
        scores[1].task_id,
        None,
        False,
        "x",
        "answer_tag",
        "rule:mathvista",
        pending="judge (answer extraction)",
    )
    metrics, breakdowns, not_produced = benchmark_metrics(get_spec("mathvista"), tasks, scores)
    assert metrics["accuracy"] is None and metrics["accuracy_rule_only"] == 0.5
    assert "1 of 2 samples need a judge" in not_produced[0] and "--judge" in not_produced[0]
    assert {k: v for k, v, _ in dict(breakdowns)["task"]}["geometry"] is None
