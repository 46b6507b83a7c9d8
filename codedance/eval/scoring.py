"""Per-sample scoring, one rule per benchmark, as docs/benchmarks.md states them.

`score_sample(key, task, trajectory, judge)` grades the *extracted* final answer (the
trajectory's ``<answer>``, else ``\\boxed{}``, else "the answer is X" in the last turn), never
the whole trace. Rules:

| scorer | rule |
|---|---|
| countbench | VLMEvalKit: ``str(gold) in answer`` (substring); the strict count rule goes to extras |
| pixmocount | exact integer match (digits or number words) |
| mcq (V*), hrbench | option inference (``codedance.grading.choice``); no inference: the judge's verdict with ``--judge``, else wrong (VLMEvalKit's exact matching) |
| chartqa | relaxed accuracy, max over gold answers |
| charxiv | judge only (per-item grading_query); without a judge: not produced |
| mathvista | rule first (option inference / int / float rounded to the item's precision); else judge extraction, then the same check; without a judge, items the rule cannot settle are not produced |
| mathvision | MATH-V's rule: option inference for MCQ, else equal as strings, as numbers (1e-6) or symbolically (math-verify); with a judge, its extraction retries a failed rule |
| mathverse | judge extraction, then exact match or a 0/1 judge verdict; without a judge: not produced |
| wemath | VLMEvalKit: the text after the last "Answer", ``><:.`` removed, first character if in A–H, equal to the gold letter |

``correct=None`` with ``pending`` saying which judge step is missing is how a number that cannot
be produced without a judge is recorded; ``rule_correct`` always holds the rule-only verdict.
Not handled: VLMEvalKit's judge-based option extraction prompt (our judge's consistency verdict
stands in for it on V*/HR-Bench).
"""

from __future__ import annotations

import math
from fractions import Fraction

from codedance.eval.judge_steps import (
    charxiv_score,
    extract_answer_with_judge,
    mathverse_consistent,
)
from codedance.eval.spec import SampleScore
from codedance.grading import (
    JudgeClient,
    check_answer,
    extract_answer,
    infer_option,
    normalize_text,
)
from codedance.grading.check import check_math
from codedance.grading.numbers import parse_number
from codedance.types import AnswerKind, Task, Trajectory


def final_answer(trajectory: Trajectory) -> tuple[str | None, str]:
    """(extracted answer, where it was found) of a trajectory."""
    last = trajectory.turns[-1].text if trajectory.turns else ""
    extracted = extract_answer(last)
    if trajectory.answer is not None and extracted.text is None:
        return trajectory.answer, "answer_tag"
    return extracted.text, extracted.source


def wemath_letter(answer: str) -> str | None:
    """VLMEvalKit's WeMath rule (on the extracted answer).

    >>> wemath_letter("B"), wemath_letter("Answer: C. 12 cm"), wemath_letter("(B)")
    ('B', 'C', None)
    """
    s = answer.split("Answer")[-1].strip()
    s = "".join(c for c in s if c not in "><:.").strip()
    return s[0] if s and s[0] in "ABCDEFGH" else None


def _number(text: str) -> float | None:
    value = parse_number(text)
    if value is None:
        try:
            value = float(Fraction(text.strip().replace(" ", "")))
        except (ValueError, ZeroDivisionError):
            return None
    return value


def mathv_equal(answer: str, gold: str) -> bool:
    """MATH-V's equality: strings (lower-cased), numbers within 1e-6, or symbolically.

    >>> mathv_equal("1/2", "0.5"), mathv_equal("\\\\frac{1}{2}", "0.5"), mathv_equal("3", "4")
    (True, True, False)
    """
    a, g = answer.lower().strip(), gold.lower().strip()
    if a == g:
        return True
    x, y = _number(a), _number(g)
    if x is not None and y is not None:
        return abs(x - y) < 1e-6
    try:
        return check_math(answer, gold)
    except Exception:  # noqa: BLE001 - math-verify cannot parse this pair: not equal, as MATH-V's grader
        return False


def meta(task: Task) -> dict[str, str]:
    return dict(task.metadata)


def _mathvista_check(task: Task, answer: str) -> bool:
    m = meta(task)
    if task.kind is AnswerKind.CHOICE:
        return infer_option(answer, dict(task.choices)) == task.answer
    gold = m.get("raw_answer", task.answer)
    kind = m.get("answer_type", "")
    try:
        if kind == "integer":
            return int(answer.strip()) == int(gold)
        if kind == "float":
            digits = int(float(m.get("precision") or 2))
            return round(float(answer.strip()), digits) == round(float(gold), digits)
    except ValueError:
        return False
    return normalize_text(answer) == normalize_text(gold) and kind not in ("", "integer", "float")


def _mathvision_check(task: Task, answer: str) -> bool:
    if task.choices:
        letter = infer_option(answer, dict(task.choices))
        return letter is not None and mathv_equal(letter, task.answer)
    return mathv_equal(answer, task.answer)


def score_sample(key: str, task: Task, trajectory: Trajectory, judge: JudgeClient | None = None,
                 scorer: str = "") -> SampleScore:
    """Score one trajectory of `task` under the benchmark rule ``scorer`` (see the module table)."""
    answer, source = final_answer(trajectory)
    m = meta(task)
    bench = m.get("benchmark", task.source)

    def result(correct: bool | None, rule: bool, how: str, pending: str = "", **extras: str) -> SampleScore:
        extras = {"gold": task.answer, **extras}
        return SampleScore(key, bench, task.id, correct, rule, answer, source, how, pending,
                           tuple((k, str(v)) for k, v in extras.items()))

    if scorer in ("charxiv", "mathverse") and judge is None:
        rule = answer is not None and normalize_text(answer) == normalize_text(task.answer)
        return result(None, rule, "none", pending=f"judge ({scorer})")
    if answer is None:
        return result(False, False, "none")
    if scorer == "countbench":
        strict = check_answer(answer, task.answer, AnswerKind.COUNT)
        hit = str(task.answer).strip() in answer
        return result(hit, hit, "rule:vlmeval-substring", strict_count=strict)
    if scorer == "pixmocount":
        hit = check_answer(answer, task.answer, AnswerKind.COUNT)
        return result(hit, hit, "rule:count")
    if scorer in ("mcq", "hrbench"):
        choices = dict(task.choices)
        letter = infer_option(answer, choices)
        if letter is not None or judge is None:
            hit = letter == task.answer
            return result(hit, hit, "rule:choice", letter=letter or "")
        gold = f"{task.answer}. {choices.get(task.answer, '')}"
        verdict = judge.judge(question=task.question, gold=gold, prediction=answer)
        return result(verdict, False, "judge", letter="")
    if scorer == "chartqa":
        import json

        golds = json.loads(m.get("golds", "[]")) or [task.answer]
        hit = check_answer(answer, golds, AnswerKind.RELAXED)
        return result(hit, hit, "rule:relaxed")
    if scorer == "wemath":
        letter = wemath_letter(answer)
        hit = letter == task.answer
        return result(hit, hit, "rule:wemath", letter=letter or "")
    if scorer == "mathvista":
        rule = _mathvista_check(task, answer)
        if rule:
            return result(True, True, "rule:mathvista")
        if judge is None:
            return result(None, False, "rule:mathvista", pending="judge (answer extraction)")
        extracted = extract_answer_with_judge(judge, task.question, answer)
        hit = bool(extracted) and _mathvista_check(task, extracted)
        return result(hit, False, "judge-extract+rule", judge_extracted=extracted)
    if scorer == "mathvision":
        rule = _mathvision_check(task, answer)
        if rule or judge is None:
            return result(rule, rule, "rule:mathvision")
        extracted = extract_answer_with_judge(judge, task.question, answer)
        hit = bool(extracted) and _mathvision_check(task, extracted)
        return result(hit, False, "judge-extract+rule", judge_extracted=extracted)
    if scorer == "charxiv":
        assert judge is not None
        score, extracted = charxiv_score(judge, m["grading_query"], answer)
        rule = normalize_text(answer) == normalize_text(task.answer)
        return result(math.isclose(score, 1.0), rule, "judge:charxiv", judge_score=score, judge_extracted=extracted)
    if scorer == "mathverse":
        assert judge is not None
        extracted = extract_answer_with_judge(judge, m.get("question_for_eval", task.question), answer)
        verdict = mathverse_consistent(judge, m.get("question_for_eval", task.question), task.answer, extracted)
        rule = answer.strip() == task.answer.strip()
        return result(verdict, rule, "judge:mathverse", judge_extracted=extracted)
    raise ValueError(f"unknown scorer {scorer!r}")
