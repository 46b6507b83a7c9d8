"""``--scoring vlmevalkit`` (the default): each benchmark scored per sample as VLMEvalKit scores it.

Rules from `codedance.grading.vlmeval_rules`, judge protocols from
`codedance.eval.judge_vlmevalkit`; checked against VLMEvalKit's own functions by the recorded
golden verdicts (``tests/eval/fixtures/vlmevalkit_verdicts.jsonl``). Per scorer, without a
judge → with a judge:

- countbench: ``str(gold) in prediction`` → same
- pixmocount: exact count (VLMEvalKit has no PixmoCount; our rule, labelled ``rule:count``) → same
- mcq, hrbench: ``can_infer``; none: 0 (VLMEvalKit's ``exact_matching``) → ``can_infer``, else the
  option matcher
- chartqa: relaxed accuracy, max over the gold list → same
- charxiv: not produced → grading query, JSON verdict, 0.5 kept
- mathvista: ``post_check`` prefetch settles it, else not produced → extraction, then
  ``post_check``
- mathvision: ``is_equal`` prefetch settles it, else not produced (rule-only bound beside) →
  extraction, then ``is_equal``
- mathverse: not produced → MathVerse extraction, exact match or 0/1 verdict
- wemath: the letter after the last "Answer" (``exact_matching``) → ``can_infer``, else the option
  matcher

A prefetch that infers an option letter is final, right or wrong (no judge call). A prediction
of None (the trajectory gave no answer) scores 0 everywhere.
"""

from __future__ import annotations

from collections.abc import Callable

from codedance.eval import judge_vlmevalkit as jv
from codedance.grading import JudgeClient, check_answer
from codedance.grading.vlmeval_rules import (
    can_infer,
    literal_list,
    mathv_is_equal,
    mathvista_correct,
    mathvista_match,
    relaxed_correctness,
    wemath_letter,
)
from codedance.types import AnswerKind, Task

# (correct, rule_correct, how, pending, extras, judge_failure)
Verdict = tuple[bool | float | None, bool, str, str, dict[str, str], str]


def _meta(task: Task) -> dict[str, str]:
    return dict(task.metadata)


def _mcq(task: Task, answer: str, judge: JudgeClient | None, how: str) -> Verdict:
    choices = dict(task.choices)
    letter = can_infer(answer, choices)
    if letter or judge is None:
        hit = letter == task.answer
        return hit, hit, f"rule:{how}", "", {"letter": letter or ""}, ""
    question = _meta(task).get("raw_question", task.question)
    letter, failure = jv.match_option(judge, question, choices, answer)
    return (
        letter == task.answer,
        False,
        "judge:option-matching",
        "",
        {"letter": letter or ""},
        failure,
    )


def _mathvista(task: Task, answer: str, judge: JudgeClient | None) -> Verdict:
    m = _meta(task)
    item = {
        "question_type": m.get("question_type", ""),
        "answer_type": m.get("answer_type", ""),
        "answer": m.get("raw_answer", task.answer),
        "answer_option": task.answer if task.choices else "",
        "choices": [v for _, v in task.choices],
    }
    prefetch = mathvista_match(answer, **item)  # type: ignore[arg-type]
    rule = mathvista_correct(answer, **item)  # type: ignore[arg-type]
    if (
        prefetch
    ):  # VLMEvalKit: "Prefetch succeed" (a letter, right or wrong; a matching non-zero number)
        return rule, rule, "rule:post_check", "", {}, ""
    if judge is None:
        return None, rule, "rule:post_check", "judge (answer extraction)", {}, ""
    extracted, failure = jv.extract_math(judge, task.question, answer)
    hit = mathvista_correct(extracted, **item)  # type: ignore[arg-type]
    return hit, rule, "judge-extract+post_check", "", {"judge_extracted": extracted}, failure


def _mathv_check(task: Task, response: str) -> tuple[object, bool]:
    """(prefetch value, correct) of MATH-V's ``post_check``."""
    if task.choices:
        letter = can_infer(response, dict(task.choices))
        return letter, bool(letter) and mathv_is_equal(str(letter), task.answer)
    hit = mathv_is_equal(response, task.answer)
    return (response if hit else None), hit


def _mathvision(task: Task, answer: str, judge: JudgeClient | None) -> Verdict:
    prefetch, rule = _mathv_check(task, answer)
    if prefetch:
        return rule, rule, "rule:is_equal", "", {}, ""
    if judge is None:
        return None, rule, "rule:is_equal", "judge (answer extraction)", {}, ""
    extracted, failure = jv.extract_math(judge, task.question, answer)
    _, hit = _mathv_check(task, extracted)
    return hit, rule, "judge-extract+is_equal", "", {"judge_extracted": extracted}, failure


def _mathverse(task: Task, answer: str, judge: JudgeClient | None) -> Verdict:
    rule = answer.strip() == task.answer.strip()
    if judge is None:
        return None, rule, "none", "judge (mathverse)", {}, ""
    extracted, failure = jv.extract_mathverse(judge, answer)
    question = _meta(task).get("question_for_eval", task.question)
    verdict, verdict_failure = jv.mathverse_verdict(judge, question, task.answer, extracted)
    return (
        verdict,
        rule,
        "judge:mathverse",
        "",
        {"judge_extracted": extracted},
        failure or verdict_failure,
    )


def _charxiv(task: Task, answer: str, judge: JudgeClient | None) -> Verdict:
    rule = answer.strip().lower() == task.answer.strip().lower()
    if judge is None:
        return None, rule, "none", "judge (charxiv)", {}, ""
    score, extracted, failure = jv.charxiv_grade(judge, _meta(task)["grading_query"], answer)
    value: bool | float = score if score not in (0.0, 1.0) else score == 1.0
    return (
        value,
        rule,
        "judge:charxiv",
        "",
        {"judge_score": str(score), "judge_extracted": extracted},
        failure,
    )


def _wemath(task: Task, answer: str, judge: JudgeClient | None) -> Verdict:
    if judge is not None:
        return _mcq(task, answer, judge, "can_infer")
    letter = wemath_letter(answer)
    hit = letter == task.answer
    return hit, hit, "rule:wemath-exact", "", {"letter": letter or ""}, ""


def _chartqa(task: Task, answer: str, judge: JudgeClient | None) -> Verdict:
    raw = _meta(task).get("raw_answer", task.answer)
    golds = literal_list(raw) or [raw]
    hit = any(relaxed_correctness(g, answer) for g in golds)
    return hit, hit, "rule:relaxed", "", {}, ""


def _countbench(task: Task, answer: str, judge: JudgeClient | None) -> Verdict:
    hit = str(task.answer) in answer
    strict = check_answer(
        answer, task.answer, AnswerKind.COUNT
    )  # reported beside, as accuracy_strict_count
    return hit, hit, "rule:substring", "", {"strict_count": str(strict)}, ""


RULES: dict[str, Callable[[Task, str, JudgeClient | None], Verdict]] = {
    "countbench": _countbench,
    "chartqa": _chartqa,
    "wemath": _wemath,
    "mcq": lambda t, a, j: _mcq(t, a, j, "can_infer"),
    "hrbench": lambda t, a, j: _mcq(t, a, j, "can_infer"),
    "mathvista": _mathvista,
    "mathvision": _mathvision,
    "mathverse": _mathverse,
    "charxiv": _charxiv,
}


def verdict(scorer: str, task: Task, answer: str, judge: JudgeClient | None) -> Verdict:
    """The VLMEvalKit verdict for a non-empty prediction (see the module table)."""
    if scorer not in RULES:
        raise ValueError(f"unknown scorer {scorer!r}")
    return RULES[scorer](task, answer, judge)
