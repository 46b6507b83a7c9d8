"""What the rewards read from a `Trajectory`: tool-call outcomes per turn and format errors.

Tool calls are `codedance.types.CallOutcome` (the one definition: a turn is a call when its code
ran, the turn whose feedback carries the turn-limit note included; success is the sandbox status
``ok`` and a snippet that executed something). Format errors are `codedance.parsing.format_errors`
(the release's rule) on the assistant texts, feedback excluded; optionally (``use_turn_verdicts``)
any turn whose parser verdict is not ok is a format error too. The answer the accuracy term
grades is `codedance.parsing.tagged_answer`: an untagged answer earns no R_acc.

``limit_note`` readers (the ``release`` profile): the release sends the turn-limit note as one
more tool response, so its scorer reads the note's own ``<think></think><answer></answer>`` among
the response's tags and counts the note as one more successful tool response.
"""

from __future__ import annotations

from dataclasses import dataclass

from codedance.parsing import format_errors, tagged_answer
from codedance.prompts.profiles import TURN_LIMIT
from codedance.types import CallOutcome, Trajectory

CALL_NONE, CALL_OK, CALL_FAILED, CALL_EMPTY = (o.value for o in CallOutcome)


@dataclass(frozen=True)
class CallStats:
    """Per-turn call outcomes of one trajectory (`CallOutcome` values) and their counts."""

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


def call_stats(trajectory: Trajectory, *, limit_note: bool = False) -> CallStats:
    """Call outcomes of every assistant turn (`Turn.call_outcome`). With ``limit_note`` the turn
    after the turn-limit note is a successful call too: the release counts the note as one more
    tool response without an error, and gives that turn the note's step value
    (``tests/test_reward_verdicts.py``).

    >>> from codedance.types import ExecResult, ExecStatus, StopReason, Trajectory, Turn
    >>> ok, err = ExecResult(ExecStatus.OK), ExecResult(ExecStatus.TIMEOUT)
    >>> empty = ExecResult(ExecStatus.OK, executed_nothing=True)
    >>> turns = (Turn("a", result=ok), Turn("b", result=err), Turn("c", result=empty),
    ...          Turn("d", result=ok, feedback_has_turn_limit=True), Turn("<answer>1</answer>"))
    >>> s = call_stats(Trajectory("t", turns, StopReason.ANSWERED))
    >>> s.outcomes, s.n_success, s.n_total
    (('ok', 'failed', 'empty', 'ok', 'none'), 2, 4)
    >>> call_stats(Trajectory("t", turns, StopReason.ANSWERED), limit_note=True).outcomes[-1]
    'ok'
    """
    outcomes = [t.call_outcome.value for t in trajectory.turns]
    if limit_note:
        noted = [m for m, t in enumerate(trajectory.turns) if t.feedback_has_turn_limit]
        if noted and noted[0] + 1 < len(outcomes):
            outcomes[noted[0] + 1] = CALL_OK
    return CallStats(tuple(outcomes))


def assistant_texts(trajectory: Trajectory, *, limit_note: bool = False) -> tuple[str, ...]:
    """The assistant turns' texts; with ``limit_note`` the turn-limit note follows the turn whose
    feedback carried it, as the release's scorer reads the response."""
    texts: list[str] = []
    for turn in trajectory.turns:
        texts.append(turn.text)
        if limit_note and turn.feedback_has_turn_limit:
            texts.append(TURN_LIMIT)
    return tuple(texts)


def images_returned(trajectory: Trajectory) -> int:
    """How many images came back to the model in the feedback (DeepEyes' tool-bonus condition)."""
    return sum(len(turn.feedback_images) for turn in trajectory.turns)


def trajectory_format_errors(
    trajectory: Trajectory,
    *,
    domain: str = "general",
    use_turn_verdicts: bool = False,
    limit_note: bool = False,
) -> tuple[str, ...]:
    """`format_errors` of the trajectory's assistant texts (and the turn-limit note with
    ``limit_note``), plus the parser's verdict reasons (prefixed ``turn<m>:``) when
    ``use_turn_verdicts``."""
    errors = list(format_errors(assistant_texts(trajectory, limit_note=limit_note), domain=domain))
    if use_turn_verdicts:
        for m, turn in enumerate(trajectory.turns):
            if not turn.verdict.ok:
                errors.extend(f"turn{m}:{r}" for r in (turn.verdict.reasons or ("not_ok",)))
    return tuple(errors)


def has_tagged_answer(trajectory: Trajectory, *, domain: str = "general") -> bool:
    """Whether the assistant texts hold the ``<answer>`` the training rewards grade."""
    return tagged_answer(assistant_texts(trajectory), domain=domain) is not None


def hit_turn_limit(trajectory: Trajectory) -> bool:
    """Whether any feedback of the trajectory carried the turn-limit note."""
    return any(turn.feedback_has_turn_limit for turn in trajectory.turns)
