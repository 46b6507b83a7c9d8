"""Per-sample scoring: `score_sample` dispatches to a scoring mode; ``strict`` rules live here.

Both modes grade the *extracted* final answer (the trajectory's ``<answer>``, else
``\\boxed{}``, else "the answer is X" in the last turn), never the whole trace.

- ``vlmevalkit`` (default): VLMEvalKit's rules and judge protocols, per sample, quirks included
  (`codedance.eval.scoring_vlmevalkit`).
- ``strict``: our own rules, stricter where VLMEvalKit's are odd and more lenient where it is
  brittle. They are, per scorer:

  - countbench: VLMEvalKit's ``str(gold) in answer``; the strict count rule goes to extras
  - pixmocount: exact integer match (digits or number words); the same in both modes
  - mcq (V*), hrbench: option inference (``codedance.grading.choice``: "answer: X" anywhere, no
    length guard); no inference: our judge's consistency verdict (it sees the gold) with
    ``--judge``, else wrong
  - chartqa: relaxed accuracy, both sides stripped, max over gold answers
  - charxiv: judge only (per-item grading_query, fences stripped, only ``score``, right when 1)
  - mathvista: option inference / int / float rounded to the item's precision / normalized text;
    else judge extraction and the same check
  - mathvision: option inference, else equal as strings, numbers (1e-6) or symbolically
    (math-verify); final without a judge
  - mathverse: judge extraction (MathVista-style prompt), then exact match or a "Judgement: 0/1"
    verdict
  - wemath: the text after the last "Answer", ``><:.`` removed, first character if in A–H
  - tasks: a Task JSONL's tasks: the training rule of the task's kind
    (`codedance.grading.check_answer`); with ``--judge``, the judge decides what the rule calls
    wrong; the same in both modes

``correct=None`` with ``pending`` saying which judge step is missing is how a number that cannot
be produced without a judge is recorded; ``rule_correct`` always holds the rule-only verdict.
``correct`` may be a fraction (CharXiv's judge gives 0.5 for partly right answers).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

from codedance.eval.judge_steps import (
    charxiv_score,
    extract_answer_with_judge,
    mathverse_consistent,
)
from codedance.eval.scoring_vlmevalkit import verdict as vlmevalkit_verdict
from codedance.eval.spec import JUDGE_UNREACHABLE, SampleScore
from codedance.grading import (
    JudgeClient,
    JudgeError,
    JudgeUnavailableError,
    check_answer,
    extract_answer,
    infer_option,
    normalize_text,
)
from codedance.grading.check import check_math
from codedance.grading.numbers import parse_number
from codedance.grading.vlmeval_rules import wemath_letter
from codedance.messages import shorten
from codedance.types import AnswerKind, Task, Trajectory


def final_answer(trajectory: Trajectory) -> tuple[str | None, str]:
    """(extracted answer, where it was found) of a trajectory."""
    last = trajectory.turns[-1].text if trajectory.turns else ""
    extracted = extract_answer(last)
    if trajectory.answer is not None and extracted.text is None:
        return trajectory.answer, "answer_tag"
    return extracted.text, extracted.source


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


SCORING_MODES = ("vlmevalkit", "strict")


def score_sample(
    key: str,
    task: Task,
    trajectory: Trajectory,
    judge: JudgeClient | None = None,
    scorer: str = "",
    mode: str = "vlmevalkit",
) -> SampleScore:
    """Score one trajectory of `task` under the benchmark rule ``scorer`` and scoring ``mode``.

    ``vlmevalkit`` (default): `codedance.eval.scoring_vlmevalkit`; ``strict``: this module's rules
    (the table above). A judge whose replies give no verdict scores the sample 0 and says why in
    ``judge_failure``; an unreachable judge leaves the sample pending (a rerun scores it).
    """
    if mode not in SCORING_MODES:
        raise ValueError(f"unknown scoring mode {mode!r}; known: {', '.join(SCORING_MODES)}")
    answer, source = final_answer(trajectory)
    bench = meta(task).get("benchmark", task.source)

    def result(
        correct: bool | float | None,
        rule: bool,
        how: str,
        pending: str = "",
        failure: str = "",
        **extras: str,
    ) -> SampleScore:
        extras = {"gold": task.answer, **extras}
        return SampleScore(
            key,
            bench,
            task.id,
            correct,
            rule,
            answer,
            source,
            how,
            pending,
            tuple((k, str(v)) for k, v in extras.items()),
            scoring=mode,
            judge_failure=failure,
        )

    if scorer in ("charxiv", "mathverse") and judge is None:
        rule = answer is not None and normalize_text(answer) == normalize_text(task.answer)
        return result(None, rule, "none", pending=f"judge ({scorer})")
    if answer is None:
        return result(False, False, "none")
    try:
        if scorer == "tasks":
            return _kind_rule(task, answer, judge, result)
        if mode == "vlmevalkit" and scorer != "pixmocount":
            correct, rule, how, pending, extras, failure = vlmevalkit_verdict(
                scorer, task, answer, judge
            )
            return result(correct, rule, how, pending, failure, **extras)
        return _strict(task, answer, judge, scorer, result)
    except JudgeUnavailableError as exc:
        return result(
            None, False, "none", pending=f"{JUDGE_UNREACHABLE} ({shorten(str(exc), 120)})"
        )
    except JudgeError as exc:  # an HTTP error or an unparseable reply: 0 for this sample, counted
        return result(
            False, False, "judge", failure=f"{type(exc).__name__}: {shorten(str(exc), 200)}"
        )


def _kind_rule(task: Task, answer: str, judge: JudgeClient | None, result) -> SampleScore:
    rule = check_answer(answer, task.answer, task.kind, dict(task.choices) or None)
    if rule or judge is None:
        return result(rule, rule, f"rule:{task.kind.value}")
    return result(
        judge.judge(question=task.question, gold=task.answer, prediction=answer), False, "judge"
    )


def _strict(task: Task, answer: str, judge: JudgeClient | None, scorer: str, result) -> SampleScore:
    m = meta(task)
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
        rule = normalize_text(answer) == normalize_text(task.answer)
        score, extracted = charxiv_score(judge, m["grading_query"], answer)
        return result(
            math.isclose(score, 1.0),
            rule,
            "judge:charxiv",
            judge_score=score,
            judge_extracted=extracted,
        )
    if scorer == "mathverse":
        assert judge is not None
        extracted = extract_answer_with_judge(
            judge, m.get("question_for_eval", task.question), answer
        )
        rule = answer.strip() == task.answer.strip()
        verdict = mathverse_consistent(
            judge, m.get("question_for_eval", task.question), task.answer, extracted
        )
        return result(verdict, rule, "judge:mathverse", judge_extracted=extracted)
    raise ValueError(f"unknown scorer {scorer!r}")
