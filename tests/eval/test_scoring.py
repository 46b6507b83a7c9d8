"""Per-benchmark rules on hand-made trajectories, with hand-computed verdicts."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from codedance.eval.loaders import load_benchmark
from codedance.eval.scoring import mathv_equal, score_sample, wemath_letter
from codedance.eval.spec import get_spec
from codedance.types import AnswerKind, StopReason, Task, Trajectory, Turn

pytestmark = pytest.mark.tier("unit")


def traj(task_id: str, text: str) -> Trajectory:
    from codedance.parsing import parse_message

    parsed = parse_message(text)
    return Trajectory(
        task_id,
        (Turn(text=text, answer=parsed.answer),),
        StopReason.ANSWERED,
        parsed.scoring_answer,
    )


def task(bench: str, answer: str, kind: AnswerKind, choices=(), **meta: str) -> Task:
    return Task(
        id=f"{bench}/1",
        question="q",
        images=(),
        answer=answer,
        kind=kind,
        choices=tuple(choices),
        source=bench,
        metadata=(("benchmark", bench), *meta.items()),
    )


def score(t: Task, text: str, scorer: str, judge=None, mode="vlmevalkit"):
    return score_sample(f"{t.id}#0", t, traj(t.id, text), judge, scorer, mode)


def test_countbench_substring_rule_on_the_extracted_answer_only():
    t = task("countbench", "2", AnswerKind.COUNT)
    s = score(t, "<think>2 rows of 6</think><answer>12</answer>", "countbench")
    assert (
        s.correct is True and dict(s.extras)["strict_count"] == "False"
    )  # VLMEvalKit's substring test
    assert (
        score(t, "<think>there are 2</think><answer>7</answer>", "countbench").correct is False
    )  # trace ignored
    assert score(t, "<think>2</think>no answer tag", "countbench").correct is False


def test_pixmocount_exact_count():
    t = task("pixmocount", "12", AnswerKind.COUNT)
    assert score(t, "<answer>twelve</answer>", "pixmocount").correct is True
    assert score(t, "<answer>2</answer>", "pixmocount").correct is False


def test_mcq_option_inference_and_no_inference_without_judge():
    t = task("vstar", "B", AnswerKind.CHOICE, [("A", "red"), ("B", "blue")])
    assert score(t, "<answer>(B) blue</answer>", "mcq").correct is True
    assert score(t, "<answer>the blue one</answer>", "mcq").correct is True
    s = score(t, "<answer>red or blue</answer>", "mcq")
    assert s.correct is False and s.scorer == "rule:can_infer"
    assert score(t, "<answer>red or blue</answer>", "mcq", mode="strict").scorer == "rule:choice"
    # VLMEvalKit's quirks (default) against our strict rules
    assert score(t, "<answer>the answer is b</answer>", "mcq").correct is True
    assert score(t, "<answer>the answer is b</answer>", "mcq", mode="strict").correct is False
    long = "<answer>Looking closely at the image, the umbrella appears to be blue.</answer>"
    assert (
        score(t, long, "mcq").correct is False
        and score(t, long, "mcq", mode="strict").correct is True
    )


def test_chartqa_relaxed_over_gold_list():
    t = task(
        "chartqa",
        "12",
        AnswerKind.RELAXED,
        golds=json.dumps(["12", "twelve"]),
        raw_answer="['12', 'twelve']",
    )
    assert score(t, "<answer>12.5</answer>", "chartqa").correct is True  # 4.2 % off
    assert score(t, "<answer>12.7</answer>", "chartqa").correct is False  # 5.8 % off
    assert score(t, "<answer>Twelve</answer>", "chartqa").correct is True


def test_wemath_vlmeval_letter_rule():
    assert (
        wemath_letter("Answer: B") == "B"
        and wemath_letter("(B)") is None
        and wemath_letter("b") is None
    )
    t = task("wemath", "C", AnswerKind.CHOICE, [("A", "1"), ("B", "2"), ("C", "3")])
    assert score(t, "<answer>C. 3</answer>", "wemath").correct is True
    assert score(t, "<answer>(C)</answer>", "wemath").correct is False  # exactly VLMEvalKit's rule


def test_mathvista_rule_and_pending_without_judge():
    t = task(
        "mathvista",
        "1.45",
        AnswerKind.TEXT,
        answer_type="float",
        precision="2.0",
        raw_answer="1.45",
    )
    assert score(t, "<answer>1.4500</answer>", "mathvista").correct is True
    s = score(t, "<answer>$1.45 in total</answer>", "mathvista")
    assert s.correct is None and s.rule_correct is False and "judge" in s.pending
    ti = task("mathvista", "14", AnswerKind.TEXT, answer_type="integer", raw_answer="14")
    assert score(ti, "<answer>14</answer>", "mathvista").correct is True
    tc = task(
        "mathvista",
        "B",
        AnswerKind.CHOICE,
        [("A", "3/11"), ("B", "8/11")],
        answer_type="text",
        question_type="multi_choice",
    )
    assert score(tc, "<answer>(B) 8/11</answer>", "mathvista").correct is True
    assert (
        score(tc, "<answer>A</answer>", "mathvista").correct is False
    )  # a letter is final, no judge needed
    # VLMEvalKit: exact float equality; strict: rounded to the item's precision
    assert score(t, "<answer>1.449</answer>", "mathvista").correct is None
    assert score(t, "<answer>1.449</answer>", "mathvista", mode="strict").correct is True


def test_charxiv_and_mathverse_are_not_produced_without_judge():
    for bench, scorer in (("charxiv", "charxiv"), ("mathverse", "mathverse")):
        t = task(bench, "7", AnswerKind.TEXT, grading_query="{PREDICTION}")
        s = score(t, "<answer>7</answer>", scorer)
        assert s.correct is None and s.rule_correct is True and s.pending == f"judge ({scorer})"


def test_mathv_equality():
    assert (
        mathv_equal("0.5", "1/2")
        and mathv_equal("2\\sqrt{3}", "\\sqrt{12}")
        and not mathv_equal("7", "8")
    )


@pytest.mark.tier("integration")
def test_every_real_mathvision_gold_scores_right_and_a_wrong_answer_wrong(mathv_root):
    tasks = load_benchmark(get_spec("mathvision_mini"), path=mathv_root, limit=60)
    for t in tasks:
        right = score_sample("k", t, traj(t.id, f"<answer>{t.answer}</answer>"), None, "mathvision")
        assert right.correct is True, (t.id, t.answer)
        wrong_answer = "Z" if t.choices else "123456789"
        wrong = score_sample(
            "k", t, traj(t.id, f"<answer>{wrong_answer}</answer>"), None, "mathvision"
        )
        # a wrong letter is final; a wrong number needs VLMEvalKit's judge (not produced without
        # one)
        assert wrong.rule_correct is False and wrong.correct is (False if t.choices else None)
        strict = score_sample(
            "k", t, traj(t.id, f"<answer>{wrong_answer}</answer>"), None, "mathvision", "strict"
        )
        assert strict.correct is False


def test_unknown_scorer_raises():
    t = task("x", "1", AnswerKind.TEXT)
    with pytest.raises(ValueError, match="unknown scorer"):
        score(t, "<answer>1</answer>", "nope")


def test_an_unreachable_judge_leaves_the_sample_pending_and_never_raises():
    from codedance.grading import JUDGE_SERVER, JudgeClient

    t = task("charxiv", "7", AnswerKind.TEXT, grading_query="{PREDICTION}")
    with JudgeClient(replace(JUDGE_SERVER, url="http://127.0.0.1:9/v1", retries=0)) as judge:
        for mode in ("vlmevalkit", "strict"):
            s = score(t, "<answer>7</answer>", "charxiv", judge, mode)
            assert s.correct is None and s.pending.startswith("judge unreachable")
