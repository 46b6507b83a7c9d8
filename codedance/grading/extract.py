"""Final-answer extraction: ``<answer>…</answer>``, else ``\\boxed{…}``, else "the answer is X".

Answers are graded on the extracted final answer, never on the whole trace (several of
VLMEvalKit's rules are substring tests that a long trace would game; see docs/benchmarks.md).
The source of the extraction is recorded so evaluation reports can say how an answer was found.

Handled: the *last* complete ``<answer>`` block (a ``\\boxed{X}`` that is the block's whole content
is unwrapped); the last ``\\boxed{…}`` / ``\\fbox{…}`` with balanced braces; the last
"the answer is X" / "answer: X" up to the end of its sentence or line. The answer pattern and the
boxed extractor are `codedance.parsing`'s (one grammar); this module adds evaluation's fallbacks.
Training rewards do not use these fallbacks: see `codedance.parsing.tagged_answer`.
Not handled: an unclosed ``<answer>`` (a truncated trace has no answer), answers spread over
several tags, answers in other languages' phrasings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from codedance.parsing import ANSWER_RE, extract_boxed

ANSWER_TAG = "answer_tag"
BOXED = "boxed"
ANSWER_IS = "answer_is"
NONE = "none"

_ANSWER_IS_RE = re.compile(
    r"(?:the\s+(?:final\s+|correct\s+)?answer\s+is|final\s+answer\s*:|answer\s*:)\s*:?\s*"
    r"(.+?)(?:\.(?!\d)|\n|$)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ExtractedAnswer:
    """The extracted answer text (None when nothing was found) and where it came from:
    ``answer_tag``, ``boxed``, ``answer_is`` or ``none``."""

    text: str | None
    source: str


def extract_answer(text: str) -> ExtractedAnswer:
    """Find the final answer in a model's output (one message or a whole trace).

    >>> extract_answer("<think>hm</think><answer> 7 </answer>")
    ExtractedAnswer(text='7', source='answer_tag')
    >>> extract_answer(r"<answer>\\boxed{12}</answer>")
    ExtractedAnswer(text='12', source='answer_tag')
    >>> extract_answer(r"thus \\boxed{x^2}")
    ExtractedAnswer(text='x^2', source='boxed')
    >>> extract_answer("So the answer is (B). Done")
    ExtractedAnswer(text='(B)', source='answer_is')
    >>> extract_answer("<answer>unclosed")
    ExtractedAnswer(text=None, source='none')
    """
    if not isinstance(text, str):
        raise TypeError(f"extract_answer needs a str, got {type(text).__name__}")
    tags = ANSWER_RE.findall(text)
    if tags:
        content = tags[-1].strip()
        boxed = extract_boxed(content)
        if boxed is not None and re.fullmatch(r"\\(?:boxed|fbox)\s*\{.*\}", content, re.DOTALL):
            content = boxed
        return ExtractedAnswer(content, ANSWER_TAG)
    boxed = extract_boxed(text)
    if boxed is not None:
        return ExtractedAnswer(boxed, BOXED)
    matches = _ANSWER_IS_RE.findall(text)
    if matches and matches[-1].strip():
        return ExtractedAnswer(matches[-1].strip(), ANSWER_IS)
    return ExtractedAnswer(None, NONE)
