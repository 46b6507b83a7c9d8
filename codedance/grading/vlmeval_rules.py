"""VLMEvalKit's rule-level answer checks, quirks included, written from reading its algorithms.

Reference: VLMEvalKit commit ``e8e78f05f3080fe28154f2130321f17951c3be94`` (the functions named
below live in ``vlmeval/utils/matching_util.py`` and ``vlmeval/dataset/utils/*.py``). This is our
own code, checked per sample against VLMEvalKit's real functions by the golden verdicts in
``tests/eval/fixtures/vlmevalkit_verdicts.jsonl`` (recorded by
``scripts/record_vlmevalkit_verdicts.py``).

- `can_infer_option` / `can_infer_text` / `can_infer`: option inference. A letter counts when
  exactly one option letter is a token (after ``.()[],:;!*#{}`` become spaces) and it is among
  the last 4 tokens; refusal phrases and a lone ``Z`` give ``'Z'``; then the first
  case-insensitive ``answer is [A-D]`` (no word boundary: "the answer is black" reads ``B``).
  Option text counts when exactly one option's text is a substring of the answer
  (case-insensitive) and the answer is at most twice the options' total length.
- `mathvista_match`: MathVista's ``post_check`` (multiple choice by `can_infer`; integer and float
  by exact equality of ``int()``/``float()``; any other answer type can never be right).
- `mathv_is_equal`: MATH-V's ``is_equal`` (lower-cased strings; then both evaluated as Python
  arithmetic within 1e-6; then both through ``latex2sympy``, printed, and evaluated again).
- `relaxed_correctness`: ChartQA (5 %; only the prediction is stripped; a gold of 0 must match as
  a string).
- `wemath_letter`: WeMath's exact-matching rule (text after the last "Answer", ``><:.`` removed).
- `literal_list`: VLMEvalKit's ``istype(x, list)`` then ``eval`` for list-valued gold cells.

Departures (each documented where it lives): Python's ``eval`` is replaced by `safe_eval`, an
arithmetic-only evaluator (model output is never executed), which gives the same values on
literals, + - * / // % ** ^ & | << >> and tuples/lists, and treats every name as undefined
(VLMEvalKit's module namespace also defines none of sqrt, pi, ...); the few builtins VLMEvalKit's
``eval`` would reach (``abs(3)``, ``max(1, 2)``) are treated as undefined. ``latex2sympy`` runs only
on strings of at most 300 characters (VLMEvalKit gives up after 30 s instead).
"""

from __future__ import annotations

import ast
import operator
import re
import string
from collections.abc import Mapping

from codedance import python_ast

_VERBOSE_ANSWER = re.compile(r"(?i)(?:correct\s+)?answer\s+is\s+\**([ABCD])\**")
_PUNCT = ".()[],:;!*#{}"
_REFUSALS = (
    "Sorry, I can't help with images of people yet.",
    "I can't process this file.",
    "I'm sorry, but without the image provided",
    "Cannot determine the answer",
)
FAIL_MSG = "Failed to obtain answer via API."


def can_infer_option(answer: str, choices: Mapping[str, object]) -> str | None:
    """The option letter named by letter, ``'Z'`` for a refusal, or None.

    >>> can_infer_option("The answer is (C).", {"A": 1, "B": 2, "C": 3})
    'C'
    >>> can_infer_option("The answer is black", {"A": 1, "B": 2, "C": 3, "D": 4})
    'B'
    >>> can_infer_option("A or B", {"A": 1, "B": 2}) is None
    True
    """
    if "Failed to obtain answer via API" in answer:
        return None
    if any(r in answer for r in _REFUSALS):
        return "Z"
    cleaned = answer
    for c in _PUNCT:
        cleaned = cleaned.replace(c, " ")
    tokens = cleaned.split()
    named = [c for c in choices if c in tokens]
    if len(named) == 1:
        for c in choices:  # VLMEvalKit walks the options in order and returns the first that passes
            if c in tokens and tokens.index(c) > len(tokens) - 5:
                return c
    elif not named and sum(1 for z in ("Z", "") if z in tokens) == 1:
        return "Z"
    match = _VERBOSE_ANSWER.search(answer)
    if match and match.group(1).upper() in choices:
        return match.group(1).upper()
    return None


def can_infer_text(answer: str, choices: Mapping[str, object]) -> str | None:
    """The one option whose text occurs in a short enough answer, or None.

    >>> can_infer_text("blue", {"A": "red", "B": "blue"})
    'B'
    >>> can_infer_text("It is quite clearly the blue one", {"A": "red", "B": "blue"}) is None
    True
    """
    low = answer.lower()
    if len(low) > 2 * sum(len(str(v)) for v in choices.values()):
        return None
    hits = [k for k, v in choices.items() if str(v).lower() in low]
    return hits[0] if len(hits) == 1 else None


def can_infer(answer: object, choices: Mapping[str, object]) -> str | None:
    """`can_infer_option`, else `can_infer_text` (VLMEvalKit's ``can_infer``)."""
    text = str(answer)
    return can_infer_option(text, choices) or can_infer_text(text, choices)


def options_of(values: list[object]) -> dict[str, object]:
    """A list of option texts as ``{"A": ..., "B": ...}`` (VLMEvalKit's ``list_to_dict``)."""
    return {string.ascii_uppercase[i]: v for i, v in enumerate(values)}


class _Undefined(Exception):
    """`safe_eval` met something Python's eval would reject or that is not arithmetic."""


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.BitXor: operator.xor,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.Pow: operator.pow,
}
_UNARY = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
    ast.Not: operator.not_,
}


def _value(node: ast.AST) -> object:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, complex, str, bool)):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_value(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if (
            isinstance(node.op, (ast.Pow, ast.LShift))
            and isinstance(right, (int, float))
            and abs(right) > 4096
        ):
            raise _Undefined("exponent too large")
        return _BINARY[type(node.op)](left, right)
    raise _Undefined(type(node).__name__)


def safe_eval(text: str) -> object:
    """The value Python's ``eval`` gives an arithmetic expression, without executing anything.

    Raises ValueError where ``eval`` would raise (names, calls, syntax errors, ...).

    >>> safe_eval("1/2"), safe_eval("2^3"), safe_eval("(3, 4)")
    (0.5, 1, (3, 4))
    """
    try:
        return _value(python_ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, _Undefined, ArithmeticError, TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"not arithmetic: {text[:80]!r}") from exc


def _close(a: object, b: object) -> bool:
    return abs(a - b) < 1e-6  # type: ignore[operator]


def mathv_is_equal(answer: str, gold: str) -> bool:
    """MATH-V's ``is_equal`` as VLMEvalKit runs it (see the module docstring).

    >>> (mathv_is_equal("0.5", "1/2"), mathv_is_equal("\\\\frac{1}{2}", "0.5"),
    ...  mathv_is_equal("\\\\sqrt{12}", "2\\\\sqrt{3}"))
    (True, True, False)
    """
    a, g = str(answer).lower().strip(), str(gold).lower().strip()
    if a == g:
        return True
    try:
        if _close(safe_eval(g), safe_eval(a)):
            return True
    except (ValueError, TypeError, ArithmeticError):
        pass
    if max(len(a), len(g)) > 300:
        return False
    from latex2sympy2_extended import (
        latex2sympy,  # math-verify's dependency; a missing one must not pass silently
    )

    try:
        x, y = latex2sympy(g), latex2sympy(a)
        return _close(safe_eval(str(x)), safe_eval(str(y)))
    except Exception:  # noqa: BLE001 - VLMEvalKit's try block swallows every failure as "not equal"
        return False


def mathvista_match(
    response: object,
    *,
    question_type: str,
    answer_type: str,
    answer: str,
    answer_option: str = "",
    choices: list[object] | None = None,
) -> str | int | float | None:
    """MathVista's ``post_check``: the matching value, or None when it does not match.

    For multiple choice the inferred letter is returned even when it is wrong (VLMEvalKit's
    prefetch then stops there); compare it with ``answer_option``. A match of the integer 0 is
    returned as 0 (falsy: VLMEvalKit then asks its judge anyway).

    >>> mathvista_match("1.45", question_type="free_form", answer_type="float", answer="1.45")
    1.45
    >>> float_question = dict(question_type="free_form", answer_type="float", answer="1.45")
    >>> mathvista_match("1.449", **float_question) is None
    True
    """
    if question_type == "multi_choice":
        return can_infer(response, options_of(list(choices or [])))
    try:
        if answer_type == "integer":
            value, gold = int(str(response)), int(answer)
        elif answer_type == "float":
            value, gold = float(str(response)), float(answer)
        else:
            return None  # VLMEvalKit compares str(None) with the gold: never equal
    except ValueError:
        return None
    return value if value == gold else None


def mathvista_correct(response: object, **item: object) -> bool:
    """Whether a (judge-extracted or prefetched) response is right under ``post_check``."""
    value = mathvista_match(response, **item)  # type: ignore[arg-type]
    if item.get("question_type") == "multi_choice":
        return value is not None and value == item.get("answer_option")
    return value is not None


def relaxed_correctness(target: str, prediction: str, max_relative_change: float = 0.05) -> bool:
    """ChartQA's relaxed accuracy as VLMEvalKit computes it (only the prediction is stripped).

    >>> (relaxed_correctness("12", "12.4"), relaxed_correctness("0", "0.0"),
    ...  relaxed_correctness("Cable TV ", "Cable TV"))
    (True, False, False)
    """

    def number(text: str) -> float | None:
        try:
            return float(text.rstrip("%")) / 100.0 if text.endswith("%") else float(text)
        except ValueError:
            return None

    prediction = prediction.strip()
    p, t = number(prediction), number(target)
    if p is not None and t:
        return abs(p - t) / abs(t) <= max_relative_change
    return prediction.lower() == target.lower()


def literal_list(text: str) -> list[str] | None:
    """The list a cell holds when VLMEvalKit's ``istype(cell, list)`` says it is one, else None.

    >>> literal_list("['a', 'b']"), literal_list("[Cable TV]"), literal_list("5")
    (['a', 'b'], None, None)
    """
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return [str(x) for x in value] if isinstance(value, list) else None


def wemath_letter(answer: str) -> str | None:
    """WeMath's exact-matching rule (on the prediction).

    >>> wemath_letter("B"), wemath_letter("Answer: C. 12 cm"), wemath_letter("(B)")
    ('B', 'C', None)
    """
    s = answer.split("Answer")[-1].strip()
    s = "".join(c for c in s if c not in "><:.").strip()
    return s[0] if s and s[0] in "ABCDEFGH" else None


def first_verdict(reply: str) -> bool | None:
    """MathVerse's verdict parse: exactly ``0`` or ``1`` after stripping, else None."""
    reply = reply.strip()
    return reply == "1" if reply in ("0", "1") else None


__all__ = [
    "FAIL_MSG",
    "can_infer",
    "can_infer_option",
    "can_infer_text",
    "first_verdict",
    "literal_list",
    "mathv_is_equal",
    "mathvista_correct",
    "mathvista_match",
    "options_of",
    "relaxed_correctness",
    "safe_eval",
    "wemath_letter",
]
