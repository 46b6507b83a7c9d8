"""Agent statistics of a set of trajectories: the one definition every report reads.

Counts follow `codedance.types.CallOutcome` (the rewards read the same per-turn outcomes):
- ``calls``: tool calls (turns whose code ran); ``successful_calls``: calls with outcome ``ok``;
- ``exec_success``: successful calls / calls, **None without calls** (never 0, NaN or "–");
- ``exec_success_per_sample``: each sample's success rate averaged over the samples with at least
  one call (the release's Table 3 definition), None when no sample called the tool;
- ``avg_turns``: assistant turns (model calls) per sample; ``calls_per_sample``;
- ``tool_share``: share of samples with at least one call; ``answered``: share that stopped with
  an answer; ``stop_reasons``: (reason, count) pairs;
- `label_rows`: the same per label (skill, difficulty, category, ...), with accuracy over the
  verdicts given (None while any is pending).

Demo, eval, the teacher's accuracy report, the CPU trainer's metrics and the verl metrics all
build their rows from `AgentStats`. Not here: reward terms (``codedance.rewards``) and benchmark
scoring (``codedance.eval.scoring``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from codedance.types import StopReason, Trajectory


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


@dataclass(frozen=True)
class AgentStats:
    """Counts over ``samples`` trajectories; the rates are properties (None when undefined)."""

    samples: int
    turns: int
    calls: int
    successful_calls: int
    tool_users: int
    answered_samples: int
    stop_reasons: tuple[tuple[str, int], ...]
    per_sample_success: tuple[float, ...]  # success rate of each sample that called the tool

    @classmethod
    def of(cls, trajectories: Sequence[Trajectory]) -> AgentStats:
        """Statistics of ``trajectories``.

        >>> from codedance.types import ExecResult, ExecStatus, StopReason, Trajectory, Turn
        >>> call = Turn("c", result=ExecResult(ExecStatus.OK), feedback_has_turn_limit=True)
        >>> s = AgentStats.of([Trajectory("a", (call, Turn("x")), StopReason.ANSWERED),
        ...                    Trajectory("b", (Turn("y"),), StopReason.ANSWERED)])
        >>> s.calls, s.exec_success, s.tool_share, s.avg_turns
        (1, 1.0, 0.5, 1.5)
        >>> AgentStats.of([Trajectory("b", (Turn("y"),), StopReason.ANSWERED)]).exec_success is None
        True
        """
        rates = []
        calls = successes = users = turns = 0
        for t in trajectories:
            n, ok = t.n_calls, t.n_successful_calls
            calls, successes, turns = calls + n, successes + ok, turns + len(t.turns)
            if n:
                users += 1
                rates.append(ok / n)
        reasons = Counter(t.stop_reason.value for t in trajectories)
        answered = reasons.get(StopReason.ANSWERED.value, 0)
        return cls(
            len(trajectories),
            turns,
            calls,
            successes,
            users,
            answered,
            tuple(sorted(reasons.items())),
            tuple(rates),
        )

    @property
    def exec_success(self) -> float | None:
        return _ratio(self.successful_calls, self.calls)

    @property
    def exec_success_per_sample(self) -> float | None:
        return _ratio(sum(self.per_sample_success), len(self.per_sample_success))

    @property
    def avg_turns(self) -> float | None:
        return _ratio(self.turns, self.samples)

    @property
    def calls_per_sample(self) -> float | None:
        return _ratio(self.calls, self.samples)

    @property
    def tool_share(self) -> float | None:
        return _ratio(self.tool_users, self.samples)

    @property
    def answered(self) -> float | None:
        return _ratio(self.answered_samples, self.samples)


@dataclass(frozen=True)
class LabelRow:
    """`AgentStats` of the samples with one label, and their accuracy (None while pending)."""

    label: str
    stats: AgentStats
    accuracy: float | None


def accuracy_of(verdicts: Sequence[bool | float | None]) -> float | None:
    """Mean of the verdicts; None when there are none or any is pending (None)."""
    if not verdicts or any(v is None for v in verdicts):
        return None
    return sum(float(v) for v in verdicts) / len(verdicts)  # type: ignore[arg-type]


def label_rows(
    trajectories: Sequence[Trajectory],
    label: Callable[[Trajectory], str] | Mapping[str, str],
    verdicts: Sequence[bool | float | None] | None = None,
    order: Callable[[str], object] = str,
) -> tuple[LabelRow, ...]:
    """One `LabelRow` per label, sorted by ``order``. ``label`` maps a trajectory (or its task id)
    to its label; ``verdicts[i]`` is the verdict of ``trajectories[i]``."""
    name = label if callable(label) else (lambda t: label.get(t.task_id, ""))
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(trajectories):
        groups.setdefault(name(t), []).append(i)
    rows = []
    for key in sorted(groups, key=order):
        idx = groups[key]
        acc = accuracy_of([verdicts[i] for i in idx]) if verdicts is not None else None
        rows.append(LabelRow(key, AgentStats.of([trajectories[i] for i in idx]), acc))
    return tuple(rows)
