"""Numbers in answers: plain, with thousands separators, signs, percent, and number words.

Handled: ``7``, ``-3.5``, ``1,234``, ``1e-3``, ``45%`` (as 45 with a percent flag), English
cardinal words zero–twenty, tens up to ninety, "hundred" compounds (``twenty-one``,
``one hundred and five``). Not handled: fractions like ``1/2`` (use the ``math`` kind), ordinals,
Roman numerals, other languages.
"""

from __future__ import annotations

import re

_UNITS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
WORD_VALUES: dict[str, int] = {w: i for i, w in enumerate(_UNITS)}
WORD_VALUES.update({w: 20 + 10 * i for i, w in enumerate(_TENS)})
WORD_VALUES["a dozen"] = 12

NUMBER_RE = re.compile(
    r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])"
)
_WORD_RE = re.compile(
    r"\b(?:(?P<h>" + "|".join(_UNITS[1:10]) + r")\s+hundred(?:\s+and)?\s*)?"
    r"(?P<t>" + "|".join(_TENS) + r")?(?:[-\s]?(?P<u>" + "|".join(_UNITS) + r"))?\b",
    re.IGNORECASE,
)


def parse_number(text: str) -> float | None:
    """The value of a string that is a single number (spaces, ``$`` and a trailing ``%`` or
    period allowed), else None. A percent sign is dropped here: callers that divide by 100 do it.

    >>> parse_number(" 1,234.5 "), parse_number("-3"), parse_number("45%"), parse_number("7 cats")
    (1234.5, -3.0, 45.0, None)
    """
    s = text.strip().rstrip(".").strip().lstrip("$").rstrip("%").strip()
    if not NUMBER_RE.fullmatch(s):
        return None
    return float(s.replace(",", ""))


def word_number(text: str) -> int | None:
    """The value of a string that is a single English number word, else None.

    >>> word_number("Seven"), word_number("twenty-one"), word_number("one hundred and five")
    (7, 21, 105)
    >>> word_number("seven cats") is None
    True
    """
    s = text.strip().rstrip(".").strip().lower()
    match = _WORD_RE.fullmatch(s)
    if not s or not match or not any(match.group(g) for g in "htu"):
        return WORD_VALUES.get(s)
    return _word_match_value(match)


def _word_match_value(match: re.Match[str]) -> int:
    h, t, u = (match.group(g) for g in "htu")
    value = 100 * WORD_VALUES[h.lower()] if h else 0
    value += WORD_VALUES[t.lower()] if t else 0
    value += WORD_VALUES[u.lower()] if u else 0
    return value


def numbers_in(text: str) -> list[float]:
    """Every number mentioned in ``text``, digits and number words, in order of appearance.

    >>> numbers_in("I count seven apples and 2 pears, 1,000 in all")
    [7.0, 2.0, 1000.0]
    """
    found: list[tuple[int, float]] = []
    for m in NUMBER_RE.finditer(text):
        found.append((m.start(), float(m.group().replace(",", ""))))
    for m in _WORD_RE.finditer(text):
        if m.group() and any(m.group(g) for g in "htu"):
            found.append((m.start(), float(_word_match_value(m))))
    return [value for _, value in sorted(found)]
