"""Per-step and held-out metrics of rollouts: the quantities of the paper's Figures 4 and 9.

`rollout_metrics(trajectories, tasks, correct, breakdowns=None)` returns a flat
``{name: float | None}``: ``accuracy``, ``calls`` (tool calls per trajectory), ``turns``,
``exec_success`` (successful calls / calls, None without calls), ``answered`` (share that
stopped with an answer), ``used_tool``, all from `codedance.runs.stats.AgentStats` (the one
definition of a call and its success), ``accuracy_with_tool`` (accuracy of the trajectories that
called the tool; None without any: whether the tool helps), and all but ``turns`` and
``answered`` per difficulty label (``accuracy/easy``, ``calls/hard``, ...; from the task's
``difficulty`` metadata, skipped when absent). With reward breakdowns also ``reward/total``, ``reward/accuracy``, ``reward/format``,
``reward/tool``, ``d`` and ``mu`` (means over trajectories; d and μ are per group).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from codedance.runs.stats import AgentStats, accuracy_of
from codedance.types import RewardBreakdown, Task, Trajectory

PER_LEVEL = ("accuracy", "calls", "exec_success", "used_tool", "accuracy_with_tool")


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else math.nan


def _summary(
    trajectories: Sequence[Trajectory], correct: Sequence[bool]
) -> dict[str, float | None]:
    stats = AgentStats.of(trajectories)
    with_tool = [ok for t, ok in zip(trajectories, correct, strict=True) if t.n_calls]
    return {
        "accuracy": accuracy_of(correct),
        "calls": stats.calls_per_sample,
        "turns": stats.avg_turns,
        "exec_success": stats.exec_success,
        "answered": stats.answered,
        "used_tool": stats.tool_share,
        "accuracy_with_tool": accuracy_of(with_tool),
    }


def rollout_metrics(
    trajectories: Sequence[Trajectory],
    tasks: Sequence[Task],
    correct: Sequence[bool],
    breakdowns: Sequence[RewardBreakdown] | None = None,
) -> dict[str, float | None]:
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
        out.update({f"{k}/{level}": part[k] for k in PER_LEVEL})
    if breakdowns is not None:
        out["reward/total"] = _mean([b.total for b in breakdowns])
        out["reward/accuracy"] = _mean([b.accuracy for b in breakdowns])
        out["reward/format"] = _mean([b.format for b in breakdowns])
        out["reward/tool"] = _mean([b.sequence_tool for b in breakdowns])
        for key in ("d", "mu"):
            out[key] = _mean([dict(b.metrics).get(key, math.nan) for b in breakdowns])
    return out
