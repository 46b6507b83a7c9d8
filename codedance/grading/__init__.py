"""Answer grading shared by rewards and evaluation.

- `extract_answer`: the final answer of a response and where it was found.
- `check_answer(prediction, gold, kind, choices=None) -> bool`: rule-based checks for the kinds
  choice, count, number, relaxed, text, math (see `codedance.grading.check`).
- `JudgeClient`: an LLM judge over any OpenAI-compatible server, with a verdict cache.
- `grade_response` / `grade_trajectory`: extraction + rule + optional judge, as one `Grade`.

Nothing here imports torch; the judge calls its server through `codedance.policy`'s HTTP client.
"""

from codedance.grading.cache import JudgeCache, judge_cache_key
from codedance.grading.check import check_answer, normalize_text
from codedance.grading.choice import infer_option
from codedance.grading.extract import ExtractedAnswer, extract_answer
from codedance.grading.grade import Grade, grade_response, grade_trajectory
from codedance.grading.judge import (
    JUDGE_SERVER,
    JudgeClient,
    JudgeError,
    JudgeItem,
    JudgeUnavailableError,
    JudgeVerdictError,
    parse_verdict,
)

__all__ = [
    "JUDGE_SERVER",
    "ExtractedAnswer",
    "Grade",
    "JudgeCache",
    "JudgeClient",
    "JudgeError",
    "JudgeItem",
    "JudgeUnavailableError",
    "JudgeVerdictError",
    "check_answer",
    "extract_answer",
    "grade_response",
    "grade_trajectory",
    "infer_option",
    "judge_cache_key",
    "normalize_text",
    "parse_verdict",
]
