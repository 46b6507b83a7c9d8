"""Multiple-choice option inference, re-implementing VLMEvalKit's rule-based matcher.

Order (first hit wins): an explicit "answer is X" / "answer: X" naming an option letter; a lone
option letter among the last tokens (VLMEvalKit ``can_infer_option``: punctuation ``.()[],:;!*#{}``
becomes spaces, exactly one option letter occurs as a token, and it is among the last 5 tokens);
else exactly one option's text contained in the answer, case-insensitively (``can_infer_text``).
No inference means wrong (VLMEvalKit would then ask a judge; use ``codedance.grading.judge``).

Departures: VLMEvalKit's refusal strings map to a pseudo option 'Z'; here a refusal simply infers
nothing. Without ``choices`` the letters A–E (and the gold letter) are the options and no option
text can be matched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from codedance.errors import SettingsError

_PUNCT = str.maketrans({c: " " for c in ".()[],:;!*#{}"})
_ANSWER_IS_LETTER = re.compile(  # the phrase is case-insensitive, the letter is not ("is a dog")
    r"(?i:answer\s*(?:is|:)\s*(?:option\s*)?)[\(\[]?\s*([A-Z])\s*[\)\]]?(?![A-Za-z])"
)


def infer_option_letter(answer: str, choices: Mapping[str, str]) -> str | None:
    """The option letter an answer names by letter, or None.

    >>> infer_option_letter("The answer is (C).", {"A": "x", "B": "y", "C": "z"})
    'C'
    >>> infer_option_letter("B", {"A": "red", "B": "blue"})
    'B'
    >>> infer_option_letter("A or B", {"A": "red", "B": "blue"}) is None
    True
    """
    explicit = [m for m in _ANSWER_IS_LETTER.findall(answer) if m in choices]
    if explicit:
        return explicit[-1]
    tokens = answer.translate(_PUNCT).split()
    present = [c for c in choices if c in tokens]
    if len(present) == 1 and tokens.index(present[0]) > len(tokens) - 5:
        return present[0]
    return None


def infer_option_text(answer: str, choices: Mapping[str, str]) -> str | None:
    """The option whose text alone occurs in the answer (case-insensitive), or None.

    >>> infer_option_text("It is the blue one", {"A": "red", "B": "blue"})
    'B'
    >>> infer_option_text("red and blue", {"A": "red", "B": "blue"}) is None
    True
    """
    low = answer.lower()
    hits = [k for k, v in choices.items() if str(v).strip() and str(v).strip().lower() in low]
    return hits[0] if len(hits) == 1 else None


def infer_option(answer: str, choices: Mapping[str, str]) -> str | None:
    """VLMEvalKit-style inference: by letter first, else by option text.

    >>> infer_option("I think it is blue.", {"A": "red", "B": "blue"})
    'B'
    """
    return infer_option_letter(answer, choices) or infer_option_text(answer, choices)


def check_choice(prediction: str, gold: str, choices: Mapping[str, str] | None) -> bool:
    """True when the inferred option is the gold one. ``gold`` is an option letter, or an
    option's text when ``choices`` are given.

    >>> check_choice("(B) blue", "B", {"A": "red", "B": "blue"})
    True
    >>> check_choice("blue", "blue", {"A": "red", "B": "blue"})
    True
    >>> check_choice("A", "B", None)
    False
    """
    gold_s = gold.strip()
    if choices:
        options = {str(k).strip().upper(): str(v) for k, v in choices.items()}
        if gold_s.upper() not in options:
            by_text = [k for k, v in options.items() if v.strip().lower() == gold_s.lower()]
            if len(by_text) != 1:
                raise SettingsError(f"gold {gold!r} is neither an option letter nor an option text")
            gold_s = by_text[0]
    else:
        if not re.fullmatch(r"[A-Za-z]", gold_s.strip("()")):
            raise SettingsError(f"without choices the gold must be an option letter, got {gold!r}")
        gold_s = gold_s.strip("()")
        options = {c: "" for c in "ABCDE"} | {gold_s.upper(): ""}
    return infer_option(prediction, options) == gold_s.upper()
