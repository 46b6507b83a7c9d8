"""Per-step and held-out metrics of rollouts: the quantities of the paper's Figures 4 and 9.

`rollout_metrics(trajectories, tasks, correct, breakdowns=None)` returns a flat
``{name: float}``: ``accuracy``, ``calls`` (tool calls per trajectory), ``turns``,
``exec_success`` (successful calls / calls, NaN without calls; success is the sandbox status
via `codedance.rewards.call_stats`, an empty snippet is no success), ``answered`` (share that
stopped with an answer), and each of these per difficulty label (``accuracy/easy``,
``calls/hard``, ...; from the task's ``difficulty`` metadata, skipped when absent). With reward
breakdowns also ``reward/total``, ``reward/accuracy``, ``reward/format``, ``reward/tool``,
``d`` and ``mu`` (means over trajectories; d and μ are per group).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from codedance.rewards import call_stats
from codedance.types import RewardBreakdown, StopReason, Task, Trajectory


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else math.nan


def _summary(trajectories: Sequence[Trajectory], correct: Sequence[bool]) -> dict[str, float]:
    stats = [call_stats(t) for t in trajectories]
    calls = sum(s.n_total for s in stats)
    return {
        "accuracy": _mean([float(c) for c in correct]),
        "calls": _mean([float(s.n_total) for s in stats]),
        "turns": _mean([float(len(t.turns)) for t in trajectories]),
        "exec_success": (sum(s.n_success for s in stats) / calls) if calls else math.nan,
        "answered": _mean([float(t.stop_reason is StopReason.ANSWERED) for t in trajectories]),
        "used_tool": _mean([float(s.n_total > 0) for s in stats]),
    }


def rollout_metrics(trajectories: Sequence[Trajectory], tasks: Sequence[Task], correct: Sequence[bool],
                    breakdowns: Sequence[RewardBreakdown] | None = None) -> dict[str, float]:
    """See the module docstring. ``tasks[i]`` is the task of ``trajectories[i]``."""
    if not (len(trajectories) == len(tasks) == len(correct)):
        raise ValueError("trajectories, tasks and correct must have the same length")
    out = _summary(trajectories, correct)
    levels: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        level = dict(task.metadata).get("difficulty", "")
        if level:
            levels.setdefault(level, []).append(i)
    for level, idx in sorted(levels.items()):
        part = _summary([trajectories[i] for i in idx], [correct[i] for i in idx])
        out.update({f"{k}/{level}": v for k, v in part.items() if k in ("accuracy", "calls", "exec_success", "used_tool")})
    if breakdowns is not None:
        out["reward/total"] = _mean([b.total for b in breakdowns])
        out["reward/accuracy"] = _mean([b.accuracy for b in breakdowns])
        out["reward/format"] = _mean([b.format for b in breakdowns])
        out["reward/tool"] = _mean([b.sequence_tool for b in breakdowns])
        for key in ("d", "mu"):
            out[key] = _mean([dict(b.metrics).get(key, math.nan) for b in breakdowns])
    return out
