"""Agent statistics of a set of trajectories (paper Table 3 and Figure 10).

- ``avg_turns``: model calls per sample (assistant turns).
- ``exec_success_per_call``: successful calls / all calls. A call is a turn whose code ran (the
  injected turn-limit text is not a call); success is the sandbox status ``ok`` and not a snippet
  that executed nothing (the Figure 11 hack), as ``codedance.rewards`` counts it.
- ``exec_success_per_sample``: the release's definition: each sample's success rate, averaged
  over the samples with at least one call (None when no sample called the tool).
- ``tool_use_share``: share of samples with at least one call.
- ``by_difficulty``: (difficulty, samples, average turns, accuracy) for each difficulty label
  in the tasks' metadata (accuracy over the samples with a produced score).
- `group_rows`: accuracy, turns and tool use per category (any label); `tool_use_split`:
  accuracy of the samples that ran code against those that did not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from codedance.types import ExecResult, Trajectory


@dataclass(frozen=True)
class AgentStats:
    samples: int
    avg_turns: float | None
    calls: int
    exec_success_per_call: float | None
    exec_success_per_sample: float | None
    tool_use_share: float | None
    stop_reasons: tuple[tuple[str, int], ...]
    by_difficulty: tuple[tuple[str, int, float, float | None], ...]


def call_succeeded(result: ExecResult) -> bool:
    return result.ok and not result.executed_nothing


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def agent_stats(trajectories: Sequence[Trajectory], difficulty: Mapping[str, str] | None = None,
                correct: Mapping[str, bool | None] | None = None) -> AgentStats:
    """Statistics of `trajectories`; `difficulty` and `correct` map task ids to labels / verdicts.

    >>> from codedance.types import StopReason, Turn
    >>> agent_stats([Trajectory("t", (Turn("a"),), StopReason.ANSWERED)]).avg_turns
    1.0
    """
    difficulty = difficulty or {}
    correct = correct or {}
    calls = [r for t in trajectories for r in t.tool_calls]
    per_sample = [sum(map(call_succeeded, t.tool_calls)) / len(t.tool_calls) for t in trajectories if t.tool_calls]
    reasons: dict[str, int] = defaultdict(int)
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        reasons[t.stop_reason.value] += 1
        groups[difficulty.get(t.task_id, "all")].append(t)
    rows = []
    for label in sorted(groups):
        ts = groups[label]
        verdicts = [float(v) for t in ts if (v := correct.get(t.task_id)) is not None]
        rows.append((label, len(ts), sum(len(t.turns) for t in ts) / len(ts), _mean(verdicts)))
    n = len(trajectories)
    return AgentStats(
        samples=n,
        avg_turns=_mean([float(len(t.turns)) for t in trajectories]),
        calls=len(calls),
        exec_success_per_call=_mean([float(call_succeeded(r)) for r in calls]),
        exec_success_per_sample=_mean(per_sample),
        tool_use_share=(sum(1 for t in trajectories if t.tool_calls) / n) if n else None,
        stop_reasons=tuple(sorted(reasons.items())),
        by_difficulty=tuple(rows),
    )


def group_rows(trajectories: Sequence[Trajectory], labels: Mapping[str, str],
               values: Mapping[int, float | None]) -> tuple[tuple[str, int, float | None, float, float], ...]:
    """(label, samples, accuracy, average turns, share using code) per label.

    ``labels`` maps task ids to a group label; ``values`` maps ``id(trajectory)`` to its verdict
    (None while pending; accuracy is None for a group with a pending verdict)."""
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[labels.get(t.task_id, "") or "(none)"].append(t)
    rows = []
    for label in sorted(groups):
        ts = groups[label]
        verdicts = [values.get(id(t)) for t in ts]
        accuracy = None if any(v is None for v in verdicts) else _mean([v for v in verdicts if v is not None])
        rows.append((label, len(ts), accuracy, sum(len(t.turns) for t in ts) / len(ts),
                     sum(1 for t in ts if t.tool_calls) / len(ts)))
    return tuple(rows)


def tool_use_split(trajectories: Sequence[Trajectory], values: Mapping[int, float | None]
                   ) -> tuple[tuple[str, int, float | None], ...]:
    """(``ran code`` / ``no code``, samples, accuracy over the produced verdicts) of a benchmark."""
    out = []
    for label, used in (("ran code", True), ("no code", False)):
        ts = [t for t in trajectories if bool(t.tool_calls) is used]
        verdicts = [v for t in ts if (v := values.get(id(t))) is not None]
        out.append((label, len(ts), _mean(verdicts)))
    return tuple(out)
