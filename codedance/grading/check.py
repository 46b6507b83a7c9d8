"""Rule-based answer checking: ``check_answer(prediction, gold, kind, choices=None) -> bool``.

``prediction`` is the *extracted* final answer (see `extract_answer`), not a whole trace.
``gold`` may be a string or a sequence of acceptable strings (any match counts, as ChartQA's
"max over gold answers"). Kinds (``codedance.types.AnswerKind`` or its value):

- ``choice``: VLMEvalKit option inference (`codedance.grading.choice`).
- ``count``: an integer; digits or English number words. The answer must mention exactly one
  distinct number ("There are 7 coins" is 7; "7 coins in 2 rows" is ambiguous, so wrong).
- ``number``: one number within ``abs_tol`` (default 1e-6, MathVision's) or ``rel_tol`` of gold.
  A trailing % is kept as written (``45%`` equals gold ``45``).
- ``relaxed``: ChartQA relaxed accuracy exactly as pix2struct / VLMEvalKit: both sides parse as
  floats (a trailing % divides by 100) and gold is non-zero → relative error ≤ 5 %; otherwise
  case-insensitive exact string match.
- ``text``: normalized exact match (case-folded, whitespace collapsed, surrounding quotes and
  final punctuation dropped). Articles are kept; semantic equivalence needs the judge.
- ``math``: math-verify, gold wrapped in ``$…$`` unless it already has ``$`` or ``\\boxed``,
  with its signal-based timeouts disabled so it is safe in threads (a pathological expression
  can then run long: callers own the time limit). When the gold parses to nothing (letters,
  words) the check falls back to ``text``.

Errors raise (an unknown kind, a choice gold that is not an option): never a silent False.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

from codedance.errors import SettingsError
from codedance.grading.choice import check_choice
from codedance.grading.numbers import numbers_in, parse_number, word_number
from codedance.types import AnswerKind

logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns about disabled timeouts


def normalize_text(text: str) -> str:
    """Case-folded, whitespace-collapsed, without surrounding quotes or final punctuation.

    >>> normalize_text('  "The  Red Car." ')
    'the red car'
    """
    s = " ".join(text.split()).casefold()
    return s.strip(" \"'`").rstrip(".!?;:,").strip(" \"'`")


def _as_count(text: str) -> int | None:
    value = parse_number(text)
    if value is None:
        value = word_number(text)
    if value is None:
        found = set(numbers_in(text))
        if len(found) != 1:
            return None
        value = found.pop()
    return int(value) if float(value).is_integer() else None


def check_count(prediction: str, gold: str) -> bool:
    """An integer answer (digits or number words) equal to the integer gold.

    >>> check_count("seven", "7"), check_count("I see 7 coins.", "7"), check_count("7 or 8", "7")
    (True, True, False)
    """
    gold_value = _as_count(gold)
    if gold_value is None:
        raise SettingsError(f"count gold {gold!r} is not an integer")
    return _as_count(prediction) == gold_value


def check_number(
    prediction: str, gold: str, *, abs_tol: float = 1e-6, rel_tol: float = 0.0
) -> bool:
    """One number within the tolerance of gold.

    >>> check_number("3.1415", "3.14", abs_tol=0.01), check_number("3.2", "3.14")
    (True, False)
    """
    gold_value = parse_number(gold)
    if gold_value is None:
        raise SettingsError(f"number gold {gold!r} is not a number")
    value = parse_number(prediction)
    if value is None:
        found = set(numbers_in(prediction))
        value = found.pop() if len(found) == 1 else None
    return value is not None and math.isclose(value, gold_value, rel_tol=rel_tol, abs_tol=abs_tol)


def _relaxed_float(text: str) -> float | None:
    try:
        if text.endswith("%"):
            return float(text.rstrip("%")) / 100.0
        return float(text)
    except ValueError:
        return None


def check_relaxed(prediction: str, gold: str, *, max_relative_change: float = 0.05) -> bool:
    """ChartQA's relaxed correctness.

    >>> check_relaxed("10.4", "10"), check_relaxed("10.6", "10"), check_relaxed("45%", "0.45")
    (True, False, True)
    >>> check_relaxed("Yes", "yes"), check_relaxed("0.01", "0")
    (True, False)
    """
    pred, target = prediction.strip(), gold.strip()
    p, t = _relaxed_float(pred), _relaxed_float(target)
    if p is not None and t:
        return abs(p - t) / abs(t) <= max_relative_change
    return pred.lower() == target.lower()


def _dollar(gold: str) -> str:
    return gold if ("$" in gold or "\\boxed" in gold) else f"${gold}$"


def check_math(prediction: str, gold: str) -> bool:
    """math-verify equivalence, thread-safe (no signal-based timeout).

    >>> (check_math("0.5", "\\\\frac{1}{2}"), check_math("$\\\\sqrt{12}$", "2\\\\sqrt{3}"),
    ...  check_math("3", "2"))
    (True, True, False)
    """
    from math_verify import parse, verify

    gold_parsed = parse(_dollar(gold), parsing_timeout=None)  # type: ignore[arg-type]
    if not gold_parsed:
        return normalize_text(prediction) == normalize_text(gold)
    bare_latex = "$" not in prediction and any(c in prediction for c in "\\^{")
    # bare LaTeX such as 2\\sqrt{3} is wrapped first (unwrapped, math-verify reads it as "2")
    pred_parsed = parse(f"${prediction}$" if bare_latex else prediction, parsing_timeout=None)  # type: ignore[arg-type]
    if not pred_parsed and "$" not in prediction:
        alternative = prediction if bare_latex else f"${prediction}$"
        pred_parsed = parse(alternative, parsing_timeout=None)  # type: ignore[arg-type]
    if not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def check_answer(
    prediction: str | None,
    gold: str | Sequence[str],
    kind: AnswerKind | str,
    choices: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
    *,
    abs_tol: float = 1e-6,
    rel_tol: float = 0.0,
) -> bool:
    """Whether an extracted answer matches the gold answer under the rules of ``kind``.

    A missing prediction (None or blank) is wrong. ``choices`` maps option letters to option
    texts (a ``Task.choices`` tuple of pairs works too).

    >>> check_answer("(B)", "B", "choice", {"A": "cat", "B": "dog"})
    True
    >>> check_answer("eleven", "11", "count"), check_answer("12%", "12", "relaxed")
    (True, False)
    >>> check_answer("The Eiffel Tower.", "the eiffel tower", "text")
    True
    >>> check_answer(None, "1", "math")
    False
    """
    try:
        kind = AnswerKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in AnswerKind)
        raise SettingsError(f"unknown answer kind {kind!r}; one of: {known}") from None
    if prediction is None or not prediction.strip():
        return False
    golds = [gold] if isinstance(gold, str) else list(gold)
    if not golds:
        raise SettingsError("check_answer needs at least one gold answer")
    options = dict(choices) if choices is not None else None
    return any(_check_one(prediction, str(g), kind, options, abs_tol, rel_tol) for g in golds)


def _check_one(
    pred: str,
    gold: str,
    kind: AnswerKind,
    options: dict[str, str] | None,
    abs_tol: float,
    rel_tol: float,
) -> bool:
    if kind is AnswerKind.CHOICE:
        return check_choice(pred, gold, options)
    if kind is AnswerKind.COUNT:
        return check_count(pred, gold)
    if kind is AnswerKind.NUMBER:
        return check_number(pred, gold, abs_tol=abs_tol, rel_tol=rel_tol)
    if kind is AnswerKind.RELAXED:
        return check_relaxed(pred, gold)
    if kind is AnswerKind.TEXT:
        return normalize_text(pred) == normalize_text(gold)
    if kind is AnswerKind.MATH:
        return check_math(pred, gold)
    raise ValueError(f"unknown answer kind {kind!r}")  # pragma: no cover


__all__ = [
    "check_answer",
    "check_choice",
    "check_count",
    "check_math",
    "check_number",
    "check_relaxed",
    "normalize_text",
]
