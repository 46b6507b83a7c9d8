"""The agent statistics of one benchmark as the eval report shows them (paper Table 3, Fig. 10).

Every count comes from `codedance.runs.stats.AgentStats` (the one definition of a call and its
success); this module only shapes them for ``report.json``/``report.md``:
- `AgentSummary`: average turns (model calls per sample), calls, execution success per call
  (None without calls) and per sample (the release's definition), tool-use share, stop reasons,
  and ``by_difficulty``: (difficulty, samples, average turns, accuracy over the produced verdicts)
  per difficulty label of the tasks' metadata;
- `group_rows`: accuracy, turns and tool use per category (any label); `tool_use_split`:
  accuracy of the samples that ran code against those that did not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from codedance.runs.stats import AgentStats, accuracy_of, label_rows
from codedance.types import Trajectory


@dataclass(frozen=True)
class AgentSummary:
    samples: int
    avg_turns: float | None
    calls: int
    exec_success_per_call: float | None
    exec_success_per_sample: float | None
    tool_use_share: float | None
    stop_reasons: tuple[tuple[str, int], ...]
    by_difficulty: tuple[tuple[str, int, float, float | None], ...]


def _produced(verdicts: Sequence[bool | float | None]) -> float | None:
    return accuracy_of([v for v in verdicts if v is not None])


def agent_stats(
    trajectories: Sequence[Trajectory],
    difficulty: Mapping[str, str] | None = None,
    correct: Mapping[str, bool | None] | None = None,
) -> AgentSummary:
    """`AgentSummary` of `trajectories`; `difficulty` and `correct` map task ids to labels /
    verdicts.

    >>> from codedance.types import StopReason, Turn
    >>> agent_stats([Trajectory("t", (Turn("a"),), StopReason.ANSWERED)]).avg_turns
    1.0
    """
    difficulty = difficulty or {}
    correct = correct or {}
    stats = AgentStats.of(trajectories)
    rows = []
    for row in label_rows(trajectories, lambda t: difficulty.get(t.task_id, "all")):
        ts = [t for t in trajectories if difficulty.get(t.task_id, "all") == row.label]
        rows.append(
            (
                row.label,
                row.stats.samples,
                row.stats.avg_turns or 0.0,
                _produced([correct.get(t.task_id) for t in ts]),
            )
        )
    return AgentSummary(
        samples=stats.samples,
        avg_turns=stats.avg_turns,
        calls=stats.calls,
        exec_success_per_call=stats.exec_success,
        exec_success_per_sample=stats.exec_success_per_sample,
        tool_use_share=stats.tool_share,
        stop_reasons=stats.stop_reasons,
        by_difficulty=tuple(rows),
    )


def group_rows(
    trajectories: Sequence[Trajectory],
    labels: Mapping[str, str],
    values: Mapping[int, float | None],
) -> tuple[tuple[str, int, float | None, float, float], ...]:
    """(label, samples, accuracy, average turns, share using code) per label.

    ``labels`` maps task ids to a group label; ``values`` maps ``id(trajectory)`` to its verdict
    (None while pending; accuracy is None for a group with a pending verdict)."""
    name = lambda t: labels.get(t.task_id, "") or "(none)"
    rows = label_rows(trajectories, name, [values.get(id(t)) for t in trajectories])
    return tuple(
        (r.label, r.stats.samples, r.accuracy, r.stats.avg_turns or 0.0, r.stats.tool_share or 0.0)
        for r in rows
    )


def tool_use_split(
    trajectories: Sequence[Trajectory], values: Mapping[int, float | None]
) -> tuple[tuple[str, int, float | None], ...]:
    """(``ran code`` / ``no code``, samples, accuracy over the produced verdicts) of a benchmark."""
    out = []
    for label, used in (("ran code", True), ("no code", False)):
        ts = [t for t in trajectories if (t.n_calls > 0) is used]
        out.append((label, len(ts), _produced([values.get(id(t)) for t in ts])))
    return tuple(out)
