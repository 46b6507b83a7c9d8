"""Grading cases of docs/benchmarks.md, one kind at a time, against hand-checked expectations."""

from __future__ import annotations

import threading

import pytest

from codedance.grading import check_answer, extract_answer, grade_response
from codedance.types import AnswerKind, Task

pytestmark = pytest.mark.tier("unit")

VSTAR = {"A": "red", "B": "blue", "C": "green", "D": "white"}


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ("B", "B", True),
        ("(B)", "B", True),
        ("The answer is C.", "C", True),
        ("Answer: (A) red", "A", True),
        ("I think the color is blue.", "B", True),  # option text, no letter
        ("blue or green", "B", False),  # two option texts: no inference
        ("A or B", "A", False),  # two letters
        ("B", "A", False),
        # a lone letter far from the end is not inferred (VLMEvalKit: among the last 5 tokens)
        ("B is what some say but looking closer at the image it looks different", "B", False),
        ("The answer is a dog", "A", False),  # lowercase article is not option A
        ("blue", "blue", True),  # gold given as the option text
    ],
)
def test_choice(pred: str, gold: str, expected: bool) -> None:
    assert check_answer(pred, gold, "choice", VSTAR) is expected


def test_choice_accepts_task_choice_pairs_and_rejects_bad_gold() -> None:
    assert check_answer("D", "D", AnswerKind.CHOICE, tuple(VSTAR.items()))
    with pytest.raises(ValueError, match="neither an option letter"):
        check_answer("A", "purple", "choice", VSTAR)
    with pytest.raises(ValueError, match="option letter"):
        check_answer("A", "purple", "choice", None)
    assert check_answer("(E)", "E", "choice") and not check_answer("E", "A", "choice")


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ("7", "7", True),
        ("seven", "7", True),
        ("Seven.", "7", True),
        ("There are 7 coins.", "7", True),
        ("twenty-four", "24", True),
        ("7 coins in 2 rows", "7", False),
        ("8", "7", False),
        ("7.5", "7", False),
        ("none", "0", False),
        ("zero", "0", True),
    ],
)
def test_count(pred: str, gold: str, expected: bool) -> None:
    assert check_answer(pred, gold, "count") is expected


def test_count_substring_hack_is_not_credited() -> None:
    # VLMEvalKit's CountBench rule `str(answer) in prediction` would credit this; we do not.
    assert not check_answer("1 2 3 4 5 6 7 8 9 10", "7", "count")
    with pytest.raises(ValueError):
        check_answer("7", "many", "count")


def test_number_tolerance() -> None:
    assert check_answer("3.14159", "3.14159", "number")
    assert not check_answer("3.1416", "3.14159", "number")  # default abs_tol 1e-6
    assert check_answer("3.1416", "3.14159", "number", abs_tol=1e-3)
    assert check_answer("105", "100", "number", rel_tol=0.05)
    assert not check_answer("106", "100", "number", rel_tol=0.05)
    assert check_answer("The length is 12 cm", "12", "number")
    assert check_answer("1,200", "1200", "number")


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ("10.5", "10", True),
        ("10.51", "10", False),
        ("9.5", "10", True),
        ("45%", "0.45", True),
        ("0.45", "45%", True),
        ("45", "45%", False),
        ("Yes", "yes", True),
        ("no", "yes", False),
        ("0", "0", True),
        ("0.001", "0", False),
    ],  # gold 0: exact string match (pix2struct)
)
def test_relaxed_chartqa(pred: str, gold: str, expected: bool) -> None:
    assert check_answer(pred, gold, "relaxed") is expected


def test_relaxed_max_over_golds() -> None:
    assert check_answer("12", ["11", "12"], "relaxed")
    assert not check_answer("13", ["11", "12"], "relaxed")
    with pytest.raises(ValueError):
        check_answer("13", [], "relaxed")


def test_text() -> None:
    assert check_answer('"Tokyo."', "tokyo", "text")
    assert not check_answer("Kyoto", "tokyo", "text")
    assert not check_answer("the tokyo", "tokyo", "text")  # articles are kept


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ("0.5", "\\frac{1}{2}", True),
        ("$\\frac{2}{4}$", "0.5", True),
        ("2\\sqrt{3}", "\\sqrt{12}", True),
        ("x = 3", "3", True),
        ("4", "3", False),
        ("$x^2+2x+1$", "(x+1)^2", True),
        ("B", "B", True),
        ("C", "B", False),
    ],
)
def test_math(pred: str, gold: str, expected: bool) -> None:
    assert check_answer(pred, gold, "math") is expected


def test_math_is_safe_in_threads() -> None:
    results: list[bool] = []
    lock = threading.Lock()

    def work() -> None:
        ok = check_answer("\\frac{3}{6}", "0.5", "math")
        with lock:
            results.append(ok)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 8


def test_missing_prediction_and_unknown_kind() -> None:
    assert not check_answer(None, "1", "text") and not check_answer("  ", "1", "text")
    with pytest.raises(ValueError):
        check_answer("1", "1", "fuzzy")


def test_extraction_sources() -> None:
    assert extract_answer("<answer>a</answer> then <answer>b</answer>").text == "b"
    assert extract_answer("x \\boxed{\\frac{1}{2}} y").source == "boxed"
    assert extract_answer("The answer is 42.").text == "42"
    assert extract_answer("The answer is 4.5 meters.").text == "4.5 meters"
    assert extract_answer("Final answer: B\nmore").text == "B"
    assert extract_answer("no answer here").source == "none"


def test_grade_response_scores_the_extracted_answer_not_the_trace() -> None:
    task = Task(id="c", question="How many?", images=(), answer="7", kind=AnswerKind.COUNT)
    trace = "<think>maybe 7, maybe 8</think><code>print(1)</code><answer>8</answer>"
    grade = grade_response(response=trace, task=task)
    assert (grade.correct, grade.answer, grade.source, grade.scorer) == (
        False,
        "8",
        "answer_tag",
        "rule:count",
    )
    assert not grade_response(response="I see 7", task=task).correct  # no final answer found
    with pytest.raises(ValueError, match="needs a JudgeClient"):
        grade_response(response=trace, task=task, judge_policy="fallback")
