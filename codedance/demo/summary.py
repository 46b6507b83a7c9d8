"""Scoring a demo run: grade every trajectory, R_BAT rewards per GRPO group, advantages, and the
summary rows per (skill, difficulty).

Columns: accuracy, average assistant turns, execution success rate and tool-use share (all from
`codedance.runs.stats.AgentStats`), and the mean reward
terms (R_acc, R_format, R_seq, total). Rows are sorted by skill, then easy → hard; an ``all`` row
closes each difficulty and the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from codedance.advantages import grpo_advantages
from codedance.grading import grade_trajectory
from codedance.rewards import compute_batch_rewards
from codedance.runs.stats import AgentStats
from codedance.types import RewardBreakdown, Task, Trajectory

ORDER = {"easy": 0, "medium": 1, "hard": 2}


@dataclass(frozen=True)
class Scored:
    key: str
    task: Task
    trajectory: Trajectory
    correct: bool
    reward: RewardBreakdown
    advantage: float
    n_calls: int
    n_success: int

    @property
    def skill(self) -> str:
        return dict(self.task.metadata).get("skill", "")

    @property
    def difficulty(self) -> str:
        return dict(self.task.metadata).get("difficulty", "")

    def as_json(self) -> dict[str, object]:
        r = self.reward
        return {
            "key": self.key,
            "skill": self.skill,
            "difficulty": self.difficulty,
            "gold": self.task.answer,
            "answer": self.trajectory.answer,
            "correct": self.correct,
            "turns": len(self.trajectory.turns),
            "calls": self.n_calls,
            "successful_calls": self.n_success,
            "stop_reason": self.trajectory.stop_reason.value,
            "reward": {
                "accuracy": r.accuracy,
                "format": r.format,
                "sequence_tool": r.sequence_tool,
                "total": r.total,
                "turn_returns": list(r.turn_returns),
            },
            "advantage": self.advantage,
        }


@dataclass(frozen=True)
class DemoRow:
    skill: str
    difficulty: str
    n: int
    accuracy: float
    avg_turns: float
    exec_success: float | None  # None: no call was made
    tool_share: float
    r_acc: float
    r_format: float
    r_seq: float
    r_total: float


def score_run(
    pairs: Sequence[tuple[str, Trajectory]], tasks: Mapping[str, Task], profile: str = "paper"
) -> list[Scored]:
    """Grade, reward (one group per task) and GRPO advantages of (key, trajectory) pairs."""
    if not pairs:
        return []
    trajs = [t for _k, t in pairs]
    correct = [grade_trajectory(trajectory=t, task=tasks[t.task_id]).correct for t in trajs]
    groups = [t.task_id for t in trajs]
    batch = compute_batch_rewards(
        trajectories=trajs, correct=correct, group_ids=groups, profile=profile
    )
    adv = grpo_advantages(batch.rewards, groups)
    out = []
    for (key, t), ok, b, a in zip(pairs, correct, batch.breakdowns, adv, strict=True):
        out.append(
            Scored(key, tasks[t.task_id], t, ok, b, float(a), t.n_calls, t.n_successful_calls)
        )
    return out


def _row(skill: str, difficulty: str, items: Sequence[Scored]) -> DemoRow:
    stats = AgentStats.of([s.trajectory for s in items])
    mean = lambda xs: float(np.mean(xs)) if len(xs) else 0.0
    return DemoRow(
        skill,
        difficulty,
        len(items),
        mean([s.correct for s in items]),
        stats.avg_turns or 0.0,
        stats.exec_success,
        stats.tool_share or 0.0,
        mean([s.reward.accuracy for s in items]),
        mean([s.reward.format for s in items]),
        mean([s.reward.sequence_tool for s in items]),
        mean([s.reward.total for s in items]),
    )


def summary_rows(scored: Sequence[Scored]) -> list[DemoRow]:
    cells: dict[tuple[str, str], list[Scored]] = {}
    for s in scored:
        cells.setdefault((s.skill, s.difficulty), []).append(s)
    rows = [
        _row(k[0], k[1], v)
        for k, v in sorted(cells.items(), key=lambda kv: (kv[0][0], ORDER.get(kv[0][1], 9)))
    ]
    for diff in sorted({s.difficulty for s in scored}, key=lambda d: ORDER.get(d, 9)):
        rows.append(_row("all", diff, [s for s in scored if s.difficulty == diff]))
    if scored:
        rows.append(_row("all", "all", list(scored)))
    return rows


def render_table(rows: Sequence[DemoRow]):
    """A rich Table of the rows."""
    from rich.table import Table

    table = Table(title="codedance demo: the expert teacher on the task world")
    for col in (
        "skill",
        "difficulty",
        "n",
        "accuracy",
        "avg turns",
        "exec success",
        "tool use",
        "R_acc",
        "R_format",
        "R_seq",
        "reward",
    ):
        table.add_column(col, justify="left" if col in ("skill", "difficulty") else "right")
    for r in rows:
        es = "–" if r.exec_success is None else f"{r.exec_success:.0%}"
        table.add_row(
            r.skill,
            r.difficulty,
            str(r.n),
            f"{r.accuracy:.0%}",
            f"{r.avg_turns:.2f}",
            es,
            f"{r.tool_share:.0%}",
            f"{r.r_acc:.2f}",
            f"{r.r_format:.2f}",
            f"{r.r_seq:+.3f}",
            f"{r.r_total:.3f}",
            style="bold" if r.skill == "all" else None,
        )
    return table
