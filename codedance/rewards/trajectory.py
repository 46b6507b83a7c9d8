"""What the rewards read from a `Trajectory`: tool-call outcomes per turn and format errors.

Tool calls (spec §4): a turn is a call when its code ran (``Turn.result`` is set) and it is not
the injected turn-limit message (``injected_turn_limit`` turns are never calls, whatever they
carry). A call succeeds only when the sandbox status is ``ok`` *and* the snippet executed
something (``executed_nothing`` — empty, comments only, ``pass`` only — is the reward hack of
the paper's Figure 11: it counts as a call, never as a success). Output text is never inspected
(the release's substring test for "Error" is exactly what we do not do).

Format (the release's rules, on the assistant texts joined by newlines; feedback is excluded):
- general: ``<think>``/``</think>`` counts differ; ``<answer>`` or ``</answer>`` not present
  exactly once; the answer is 1000 characters or longer (the release then also zeroes accuracy).
- math: ``<think>``/``</think>`` counts differ; ``tool_call`` after the last ``</think>``; no
  ``<answer>…</answer>`` after the last ``</think>``.
Optionally (``use_turn_verdicts``) any turn whose parser verdict is not ok is a format error too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from codedance.types import Trajectory, Turn

CALL_NONE, CALL_OK, CALL_FAILED, CALL_EMPTY = "none", "ok", "failed", "empty"
DOMAINS = ("general", "math")
LONG_ANSWER = "answer_too_long"
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def call_outcome(turn: Turn) -> str:
    """``none`` (not a call), ``ok``, ``failed`` (status not ok) or ``empty`` (ran nothing)."""
    if turn.injected_turn_limit or turn.result is None:
        return CALL_NONE
    if not turn.result.ok:
        return CALL_FAILED
    return CALL_EMPTY if turn.result.executed_nothing else CALL_OK


@dataclass(frozen=True)
class CallStats:
    """Per-turn call outcomes of one trajectory and their counts."""

    outcomes: tuple[str, ...]

    @property
    def n_total(self) -> int:
        return sum(o != CALL_NONE for o in self.outcomes)

    @property
    def n_success(self) -> int:
        return sum(o == CALL_OK for o in self.outcomes)

    def failed(self, *, empty_is_failure: bool = True) -> tuple[bool, ...]:
        """Per turn: did its call fail (for the turn penalty)? Empty calls count as failed
        unless ``empty_is_failure`` is False."""
        bad = {CALL_FAILED, CALL_EMPTY} if empty_is_failure else {CALL_FAILED}
        return tuple(o in bad for o in self.outcomes)

    @property
    def is_call(self) -> tuple[bool, ...]:
        return tuple(o != CALL_NONE for o in self.outcomes)


def call_stats(trajectory: Trajectory) -> CallStats:
    """Call outcomes of every assistant turn.

    >>> from codedance.types import ExecResult, ExecStatus, StopReason, Trajectory, Turn
    >>> ok, err = ExecResult(ExecStatus.OK), ExecResult(ExecStatus.TIMEOUT)
    >>> empty = ExecResult(ExecStatus.OK, executed_nothing=True)
    >>> turns = (Turn("a", result=ok), Turn("b", result=err), Turn("c", result=empty),
    ...          Turn("d", result=ok, injected_turn_limit=True), Turn("<answer>1</answer>"))
    >>> s = call_stats(Trajectory("t", turns, StopReason.ANSWERED))
    >>> s.outcomes, s.n_success, s.n_total
    (('ok', 'failed', 'empty', 'none', 'none'), 1, 3)
    """
    return CallStats(tuple(call_outcome(t) for t in trajectory.turns))


def assistant_text(trajectory: Trajectory) -> str:
    return "\n".join(turn.text for turn in trajectory.turns)


def format_errors(text: str, *, domain: str = "general") -> tuple[str, ...]:
    """The release's format rules; an empty tuple means the format is fine.

    >>> format_errors("<think>x</think><answer>3</answer>")
    ()
    >>> format_errors("<think>x<answer>3</answer><answer>4</answer>")
    ('think_tags_unbalanced', 'answer_not_exactly_once')
    >>> format_errors("<answer>" + "x" * 1000 + "</answer>")
    ('answer_too_long',)
    >>> format_errors("<answer>1</answer><think>y</think>", domain="math")
    ('no_answer_after_think',)
    """
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    errors: list[str] = []
    if text.count("<think>") != text.count("</think>"):
        errors.append("think_tags_unbalanced")
    if domain == "math":
        tail = text.split("</think>")[-1]
        if "tool_call" in tail:
            errors.append("tool_call_after_think")
        if not _ANSWER_RE.search(tail):
            errors.append("no_answer_after_think")
        return tuple(errors)
    if text.count("<answer>") != 1 or text.count("</answer>") != 1:
        errors.append("answer_not_exactly_once")
    match = _ANSWER_RE.search(text)
    if match is None:
        if "answer_not_exactly_once" not in errors:
            errors.append("no_answer")
    elif len(match.group(1).strip()) >= 1000:
        errors.append(LONG_ANSWER)
    return tuple(errors)


def trajectory_format_errors(trajectory: Trajectory, *, domain: str = "general",
                             use_turn_verdicts: bool = False) -> tuple[str, ...]:
    """`format_errors` of the trajectory's assistant text, plus the parser's verdict reasons
    (prefixed ``turn<m>:``) when ``use_turn_verdicts``."""
    errors = list(format_errors(assistant_text(trajectory), domain=domain))
    if use_turn_verdicts:
        for m, turn in enumerate(trajectory.turns):
            if not turn.verdict.ok:
                errors.extend(f"turn{m}:{r}" for r in (turn.verdict.reasons or ("not_ok",)))
    return tuple(errors)
