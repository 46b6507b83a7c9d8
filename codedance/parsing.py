"""Read one model message: its think, its first code snippet, its answer, and a format verdict.

What is handled:

- think: ``<think>…</think>`` (the first block; an unclosed ``<think>`` keeps the rest of the text
  as think and is flagged).
- code, in three forms, and the *earliest* snippet in the text is the one that runs
  (one snippet per turn, the first, as the paper's §3.2 protocol and the release run it):
  ``<code>`` + a ```` ```python ```` fence + ``</code>`` (the paper's and the release's form; a
  missing ``</code>`` at the very end is accepted, since a ``</code>`` stop string may cut it);
  the hermes tool call ``<tool_call>{"name": "execute_python_code", "arguments": {"code": …}}
  </tool_call>`` the release trains with (``arguments`` may also be a JSON string, as OpenAI
  servers send it); a bare ```` ```python ```` fence (the release's eval fallback).
- answer: ``<answer>…</answer>`` (`ANSWER_RE`, the one answer pattern: case-sensitive, as the
  prompt asks and the release reads); with several, the last one is the answer (and it is
  flagged). ``\\boxed{…}`` / ``\\fbox{…}`` outside answer tags (`extract_boxed`, the one boxed
  extractor; ``codedance.grading`` uses it too) is kept as `ParsedMessage.boxed`, a scoring
  fallback for evaluation only, and flagged as a format error.

The verdict lists reasons (`FormatReason` values, the one reason vocabulary). Two rules use it:
the stricter per-turn rule of the CodeDance format (`message_verdict`) and the release's rule over
a whole episode (`format_errors`, which the rewards' R_format applies). `tagged_answer` is the
answer the training rewards grade: an answer outside ``<answer>`` tags earns no accuracy reward
(the rollout protocol requires the tags, as the release's reward does).

Not handled: ``<code>`` blocks without a fence run as-is but are flagged; fences in languages other
than python are ignored; several tool calls in one message run only the first (flagged).
Departure from the release: it prefers a ``<code>`` block over an earlier bare fence; we take
whichever comes first.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum

from codedance.types import FormatVerdict

TOOL_NAME = "execute_python_code"
MAX_ANSWER_CHARS = 1000


class FormatReason(str, Enum):
    """Why a message breaks the format; `FormatVerdict.reasons` holds these values."""

    EMPTY = "empty message"
    UNBALANCED_THINK = "unbalanced think tags"
    NO_THINK = "no think block"
    NO_ANSWER = "no answer"
    SEVERAL_ANSWERS = "several answers"
    UNCLOSED_ANSWER = "unclosed answer tag"
    LONG_ANSWER = "answer of 1000 characters or more"
    TOOL_CALL_AFTER_THINK = "tool call after the last think block"
    NO_ANSWER_AFTER_THINK = "no answer after the last think block"
    EMPTY_ANSWER = "empty answer"
    BOXED_ONLY = "boxed answer without answer tags"
    CODE_AND_ANSWER = "code and answer in one turn"
    SEVERAL_CODES = "several code snippets; only the first runs"
    UNCLOSED_CODE = "unclosed code block"
    UNFENCED_CODE = "code tag without a python fence"
    BAD_TOOL_CALL = "tool call is not valid JSON with arguments.code"
    UNKNOWN_TOOL = "tool call names an unknown tool"
    NO_ACTION = "neither code nor answer"


class CodeForm(str, Enum):
    CODE_TAG = "code_tag"
    TOOL_CALL = "tool_call"
    FENCE = "fence"


@dataclass(frozen=True)
class ParsedMessage:
    """The parts of one assistant message; ``verdict`` is `message_verdict` of the text."""

    text: str
    think: str | None
    code: str | None
    code_form: CodeForm | None
    answer: str | None
    boxed: str | None
    verdict: FormatVerdict

    @property
    def scoring_answer(self) -> str | None:
        """The answer to score: the ``<answer>`` content, else the ``\\boxed{}`` fallback."""
        return self.answer if self.answer is not None else self.boxed


_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
DOMAINS = ("general", "math")
_CODE_TAG = re.compile(
    r"<code>\s*```(?:python|py|Python)?[ \t]*\n(.*?)```[ \t]*\n?\s*(?:</code>|\Z)", re.DOTALL
)
_CODE_TAG_UNFENCED = re.compile(r"<code>(.*?)</code>", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_FENCE = re.compile(r"```(?:python|py|Python)[ \t]*\n(.*?)```", re.DOTALL)
_UNCLOSED_FENCE = re.compile(
    r"(?:<code>\s*)?```(?:python|py|Python)[ \t]*\n(?:(?!```).)*\Z", re.DOTALL
)


def extract_think(text: str) -> str | None:
    """The first think block, stripped; an unclosed one keeps the rest of the text.

    >>> extract_think("<think> look closer </think><answer>3</answer>")
    'look closer'
    >>> extract_think("<think>cut off") is None
    False
    """
    match = _THINK.search(text)
    if match:
        return match.group(1).strip()
    start = text.find("<think>")
    return text[start + len("<think>") :].strip() if start >= 0 else None


def _tool_call_code(body: str) -> tuple[str | None, FormatReason | None]:
    try:
        call = json.loads(body.strip())
    except json.JSONDecodeError:
        return None, FormatReason.BAD_TOOL_CALL
    if not isinstance(call, dict):
        return None, FormatReason.BAD_TOOL_CALL
    arguments = call.get("arguments", call.get("parameters"))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None, FormatReason.BAD_TOOL_CALL
    if call.get("name") != TOOL_NAME:
        return None, FormatReason.UNKNOWN_TOOL
    if not isinstance(arguments, dict) or not isinstance(arguments.get("code"), str):
        return None, FormatReason.BAD_TOOL_CALL
    return arguments["code"], None


@dataclass(frozen=True)
class _Snippet:
    start: int
    code: str | None
    form: CodeForm
    problem: FormatReason | None


def _snippets(text: str) -> list[_Snippet]:
    found: list[_Snippet] = []
    tagged_spans: list[tuple[int, int]] = []
    for m in _CODE_TAG.finditer(text):
        found.append(_Snippet(m.start(), m.group(1), CodeForm.CODE_TAG, None))
        tagged_spans.append(m.span())
    for m in _CODE_TAG_UNFENCED.finditer(text):
        if not any(a <= m.start() < b for a, b in tagged_spans):
            found.append(
                _Snippet(m.start(), m.group(1), CodeForm.CODE_TAG, FormatReason.UNFENCED_CODE)
            )
            tagged_spans.append(m.span())
    for m in _TOOL_CALL.finditer(text):
        code, problem = _tool_call_code(m.group(1))
        found.append(_Snippet(m.start(), code, CodeForm.TOOL_CALL, problem))
        tagged_spans.append(m.span())
    for m in _FENCE.finditer(text):
        if not any(a <= m.start() < b for a, b in tagged_spans):
            found.append(_Snippet(m.start(), m.group(1), CodeForm.FENCE, None))
    return sorted(found, key=lambda s: s.start)


def extract_code(text: str) -> tuple[str | None, CodeForm | None]:
    """The first runnable snippet and its form, or ``(None, None)``.

    >>> extract_code("<think>crop</think><code>\\n```python\\nprint(1)\\n```\\n</code>")
    ('print(1)\\n', <CodeForm.CODE_TAG: 'code_tag'>)
    >>> call = '{"name": "execute_python_code", "arguments": {"code": "x=1"}}'
    >>> extract_code(f"<tool_call>{call}</tool_call>")[0]
    'x=1'
    """
    for snippet in _snippets(text):
        if snippet.code is not None:
            return snippet.code, snippet.form
    return None, None


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{…}`` or ``\\fbox{…}`` whose braces balance, or None.

    >>> extract_boxed(r"so \\boxed{1} or rather \\boxed{\\frac{1}{2}} it is")
    '\\\\frac{1}{2}'
    >>> extract_boxed(r"\\fbox {7} then \\boxed{unclosed")
    '7'
    >>> extract_boxed("no box") is None
    True
    """
    starts = [m.end() for m in _BOXED.finditer(text)]
    for start in reversed(starts):
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start : i - 1].strip()
    return None


def _think_reasons(text: str) -> list[FormatReason]:
    opens, closes = text.count("<think>"), text.count("</think>")
    if opens != closes:
        return [FormatReason.UNBALANCED_THINK]
    return [FormatReason.NO_THINK] if opens == 0 else []


def _answer_reasons(text: str, answers: list[str]) -> list[FormatReason]:
    reasons = []
    if text.count("<answer>") > len(answers):
        reasons.append(FormatReason.UNCLOSED_ANSWER)
    if len(answers) > 1:
        reasons.append(FormatReason.SEVERAL_ANSWERS)
    if answers and len(answers[-1].strip()) >= MAX_ANSWER_CHARS:
        reasons.append(FormatReason.LONG_ANSWER)
    if answers and not answers[-1].strip():
        reasons.append(FormatReason.EMPTY_ANSWER)
    return reasons


def parse_message(text: str) -> ParsedMessage:
    """Split one assistant message into its parts and judge its format (`message_verdict`).

    >>> m = parse_message("<think>easy</think><answer>B</answer>")
    >>> (m.think, m.code, m.answer, m.verdict.ok)
    ('easy', None, 'B', True)
    """
    answers = ANSWER_RE.findall(text)
    answer = answers[-1].strip() if answers else None
    snippets = _snippets(text)
    code, form = extract_code(text)
    reasons: list[FormatReason] = []
    if not text.strip():
        reasons.append(FormatReason.EMPTY)
    reasons += _think_reasons(text)
    reasons += _answer_reasons(text, answers)
    reasons += [s.problem for s in snippets[:1] if s.problem is not None]
    if len(snippets) > 1:
        reasons.append(FormatReason.SEVERAL_CODES)
    if code is None and _UNCLOSED_FENCE.search(text):
        reasons.append(FormatReason.UNCLOSED_CODE)
    boxed = None
    if answer is None:
        boxed = extract_boxed(text)
        if boxed is not None:
            reasons.append(FormatReason.BOXED_ONLY)
    if code is not None and answer is not None:
        reasons.append(FormatReason.CODE_AND_ANSWER)
    if code is None and answer is None and text.strip():
        reasons.append(FormatReason.NO_ACTION)
    verdict = FormatVerdict(ok=not reasons, reasons=tuple(r.value for r in dict.fromkeys(reasons)))
    return ParsedMessage(text, extract_think(text), code, form, answer, boxed, verdict)


def message_verdict(text: str) -> FormatVerdict:
    """The CodeDance per-turn format: a think block, and exactly one of code or answer."""
    return parse_message(text).verdict


def format_errors(
    texts: tuple[str, ...] | list[str], *, domain: str = "general"
) -> tuple[str, ...]:
    """The release's format rule over a whole episode's assistant texts (joined by newlines;
    feedback excluded); an empty tuple means the format is fine. Reasons are `FormatReason` values.

    - general: ``<think>``/``</think>`` counts differ; ``<answer>`` or ``</answer>`` not present
      exactly once; the answer is 1000 characters or longer (`MAX_ANSWER_CHARS`).
    - math: ``<think>``/``</think>`` counts differ; ``tool_call`` after the last ``</think>``; no
      ``<answer>…</answer>`` after the last ``</think>``.

    >>> format_errors(("<think>a</think><code>```python\\nx=1\\n```</code>",
    ...                "<think>b</think><answer>2</answer>"))
    ()
    >>> format_errors(("<think>a<answer>2</answer>",))
    ('unbalanced think tags',)
    >>> format_errors(("<answer>1</answer><think>y</think>",), domain="math")
    ('no answer after the last think block',)
    """
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    joined = "\n".join(texts)
    reasons: list[FormatReason] = []
    if joined.count("<think>") != joined.count("</think>"):
        reasons.append(FormatReason.UNBALANCED_THINK)
    if domain == "math":
        tail = joined.split("</think>")[-1]
        if "tool_call" in tail:
            reasons.append(FormatReason.TOOL_CALL_AFTER_THINK)
        if not ANSWER_RE.search(tail):
            reasons.append(FormatReason.NO_ANSWER_AFTER_THINK)
        return tuple(r.value for r in reasons)
    opens, closes = joined.count("<answer>"), joined.count("</answer>")
    first = ANSWER_RE.search(joined)
    if opens == 0 or (opens == closes == 1 and first is None):  # none, or "</answer><answer>"
        reasons.append(FormatReason.NO_ANSWER)
    elif opens > 1 or closes > 1:
        reasons.append(FormatReason.SEVERAL_ANSWERS)
    elif closes == 0:
        reasons.append(FormatReason.UNCLOSED_ANSWER)
    if first is not None and len(first.group(1).strip()) >= MAX_ANSWER_CHARS:
        reasons.append(FormatReason.LONG_ANSWER)
    return tuple(r.value for r in reasons)


def tagged_answer(texts: tuple[str, ...] | list[str], *, domain: str = "general") -> str | None:
    """The answer the training rewards grade: the first ``<answer>…</answer>`` of the assistant
    texts (general data, as the release's scorer takes it), the last one after the last
    ``</think>`` (math); None without tags, whatever ``\\boxed{}`` or "the answer is" says.

    >>> tagged_answer(["<think>a</think>", "<answer> 7 </answer>"]), tagged_answer([r"\\boxed{7}"])
    ('7', None)
    """
    joined = "\n".join(texts)
    if domain == "math":
        found = ANSWER_RE.findall(joined.split("</think>")[-1])
        return found[-1].strip() if found else None
    first = ANSWER_RE.search(joined)
    return first.group(1).strip() if first else None
