"""Measuring the teacher: run it through the real loop and sandbox on world tasks, grade, and count
per (skill, difficulty): accuracy, mean turns, mistakes made and episodes recovered after one.

    report = measure(task_set(36, seed=1000), TeacherConfig(), rollouts=2)
    print(report.cells)
    report = measure_config(AccuracyConfig(n=36, rollouts=2))   # ``codedance world accuracy``

Nothing here is assumed: every number comes from graded trajectories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from codedance.grading import grade_trajectory
from codedance.rollout import EpisodeSettings, run_episode
from codedance.teacher.policy import ExpertTeacher, TeacherConfig
from codedance.types import Task


@dataclass(frozen=True)
class Cell:
    skill: str
    difficulty: str
    n: int
    correct: int
    turns: float
    mistakes: int
    recovered: int  # episodes with a first mistake that still ended correct

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0


@dataclass(frozen=True)
class AccuracyReport:
    cells: tuple[Cell, ...]

    def table(self):
        from rich.table import Table

        table = Table(title="teacher accuracy (measured through the sandbox)")
        for col in ("skill", "difficulty", "n", "accuracy", "mean turns", "mistakes", "recovered"):
            table.add_column(col)
        for c in self.cells:
            table.add_row(c.skill, c.difficulty, str(c.n), f"{c.accuracy:.0%}", f"{c.turns:.2f}",
                          str(c.mistakes), str(c.recovered))
        return table


@dataclass(frozen=True)
class AccuracyConfig:
    """The settings of ``codedance world accuracy`` (the one loader: YAML files, ``key=value``):
    ``n`` tasks from ``seed`` cycling over ``skills`` (() = all) × difficulties, ``rollouts`` per
    task; the teacher's seed is replaced by ``seed``."""

    n: int = 36
    seed: int = 1000
    rollouts: int = 2
    skills: tuple[str, ...] = ()
    teacher: TeacherConfig = TeacherConfig()
    episode: EpisodeSettings = EpisodeSettings()

    def __post_init__(self) -> None:
        from codedance.errors import SettingsError

        if self.n < 1 or self.rollouts < 1:
            raise SettingsError(f"n and rollouts must be at least 1, got {self.n} and {self.rollouts}")


DEFAULT = TeacherConfig()


def measure_config(config: AccuracyConfig) -> AccuracyReport:
    """`measure` on the tasks and teacher of `config` (an unknown skill is a `WorldError`)."""
    from dataclasses import replace

    from codedance.world import parse_skills, task_set

    tasks = task_set(config.n, config.seed, parse_skills(config.skills or None))
    return measure(tasks, replace(config.teacher, seed=config.seed), rollouts=config.rollouts,
                   episode=config.episode)


def measure(tasks: Sequence[Task], config: TeacherConfig = DEFAULT, *, rollouts: int = 1,
            episode: EpisodeSettings = EpisodeSettings(), max_running: int = 2) -> AccuracyReport:
    """Run ``rollouts`` episodes per task sequentially on one sandbox pool and count per cell."""
    from codedance.sandbox.pool import SandboxPool

    teacher = ExpertTeacher(config)
    episode_config = episode.episode_config()
    acc: dict[tuple[str, str], list[tuple[bool, int, bool]]] = {}
    with SandboxPool(max_running=max_running, timeout_s=episode.exec_timeout_s) as pool:
        for task in tasks:
            for k in range(rollouts):
                policy = teacher.policy(task, k)
                sandbox = pool.sandbox(images=episode_config.images_of(task))
                try:
                    trajectory = run_episode(policy, task, sandbox, episode_config)
                finally:
                    sandbox.close()
                ok = grade_trajectory(trajectory=trajectory, task=task).correct
                made = policy.mistake is not None and policy.view.difficulty == "hard"
                acc.setdefault((policy.view.skill, policy.view.difficulty), []).append(
                    (ok, len(trajectory.turns), made))
    order = {"easy": 0, "medium": 1, "hard": 2}
    cells = []
    for (skill, diff), rows in sorted(acc.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 9))):
        cells.append(Cell(skill, diff, len(rows), sum(r[0] for r in rows),
                          sum(r[1] for r in rows) / len(rows), sum(r[2] for r in rows),
                          sum(r[0] and r[2] for r in rows)))
    return AccuracyReport(tuple(cells))
