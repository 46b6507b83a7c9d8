"""Measuring the teacher: run it through the real loop and sandbox on world tasks, grade, and count
per (skill, difficulty): accuracy, mean turns, mistakes made and episodes recovered after one.

    report = measure(task_set(36, seed=1000), TeacherConfig(), run="runs/acc", rollouts=2)
    print(report.cells)
    report = measure_config(AccuracyConfig(n=36, rollouts=2))   # ``codedance world accuracy``

The episodes run on the shared batch driver into a run folder (`codedance.runs`: ``run.json``,
``trajectories.jsonl``, ``failures.jsonl``), so a rerun with the same settings runs only what is
missing and another setting is refused, as in eval. Accuracy and mean turns are `AgentStats`
rows per cell (`label_rows`); the mistakes are the teacher's own draw, which depends only on its
settings, the task and the rollout, so they are recounted from the saved episodes' keys. Nothing
here is assumed: every number comes from graded trajectories.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from codedance.config import bounded, not_resumed
from codedance.grading import grade_trajectory
from codedance.rollout import EpisodeSettings
from codedance.runs.batch import arun_batch
from codedance.runs.rundir import RunDir, run_settings, split_episode_key
from codedance.runs.stats import label_rows
from codedance.teacher.policy import ExpertTeacher, TeacherConfig
from codedance.types import Task

KIND = "teacher-accuracy"
DIFFICULTY_ORDER = {"easy": 0, "medium": 1, "hard": 2}


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
    out_dir: str = ""
    failures: tuple[
        tuple[str, str], ...
    ] = ()  # (key, error) of episodes that raised; a rerun retries them

    def table(self):
        from rich.table import Table

        table = Table(title="teacher accuracy (measured through the sandbox)")
        for col in ("skill", "difficulty", "n", "accuracy", "mean turns", "mistakes", "recovered"):
            table.add_column(col)
        for c in self.cells:
            table.add_row(
                c.skill,
                c.difficulty,
                str(c.n),
                f"{c.accuracy:.0%}",
                f"{c.turns:.2f}",
                str(c.mistakes),
                str(c.recovered),
            )
        return table


@dataclass(frozen=True)
class AccuracyConfig:
    """The settings of ``codedance world accuracy`` (the one loader: YAML files, ``key=value``):
    ``n`` tasks from ``seed`` cycling over ``skills`` (() = all) × difficulties, ``rollouts`` per
    task; the teacher's seed is replaced by ``seed``. ``out`` is the run folder (resumed)."""

    n: int = bounded(36, at_least=1)
    seed: int = 1000
    rollouts: int = bounded(2, at_least=1)
    skills: tuple[str, ...] = ()
    teacher: TeacherConfig = TeacherConfig()
    episode: EpisodeSettings = EpisodeSettings()
    out: str = not_resumed("runs/teacher-accuracy")
    concurrency: int = not_resumed(2, at_least=1)  # episodes (and sandbox steps) at once


DEFAULT = TeacherConfig()


def measure_config(config: AccuracyConfig, *, progress: bool = True) -> AccuracyReport:
    """`measure` on the tasks and teacher of `config` into ``config.out`` (an unknown skill is a
    `WorldError`, a folder of another run a `SettingsError`, both before any episode)."""
    from codedance.world import parse_skills, task_set

    tasks = task_set(config.n, config.seed, parse_skills(config.skills or None))
    config.episode.episode_config()  # an unknown prompt profile is refused before the claim
    run = RunDir(config.out, KIND, run_settings(config))
    run.claim()
    return measure(
        tasks,
        replace(config.teacher, seed=config.seed),
        run=run,
        rollouts=config.rollouts,
        episode=config.episode,
        concurrency=config.concurrency,
        progress=progress,
    )


def measure(
    tasks: Sequence[Task],
    config: TeacherConfig = DEFAULT,
    *,
    run: RunDir | str | Path,
    rollouts: int = 1,
    episode: EpisodeSettings = EpisodeSettings(),
    concurrency: int = 2,
    progress: bool = False,
) -> AccuracyReport:
    """Run the ``rollouts`` episodes per task not yet in ``run`` (`arun_batch` on one sandbox
    pool), then count every finished one per cell; ``report.json`` in the folder holds the cells."""
    run = run if isinstance(run, RunDir) else RunDir(run)
    teacher = ExpertTeacher(config)
    summary = asyncio.run(_episodes(teacher, tasks, run, rollouts, episode, concurrency, progress))
    report = AccuracyReport(
        cells_of(tasks, teacher, run), str(run.path), tuple(run.open_failures().items())
    )
    (run.path / "report.json").write_text(
        json.dumps(
            {
                "cells": [asdict(c) | {"accuracy": c.accuracy} for c in report.cells],
                "failures": [list(f) for f in report.failures],
                "episodes_run": summary.finished,
            },
            indent=1,
        )
    )
    return report


async def _episodes(
    teacher: ExpertTeacher,
    tasks: Sequence[Task],
    run: RunDir,
    rollouts: int,
    episode: EpisodeSettings,
    concurrency: int,
    progress: bool,
):
    from codedance.sandbox.pool import SandboxPool

    pool = SandboxPool(max_running=concurrency, timeout_s=episode.exec_timeout_s)
    try:
        return await arun_batch(
            teacher.policy,
            tasks,
            lambda images: pool.sandbox(images=images),
            run,
            episode.episode_config(),
            rollouts=rollouts,
            concurrency=concurrency,
            progress=progress,
        )
    finally:
        await pool.aclose()


def cells_of(tasks: Sequence[Task], teacher: ExpertTeacher, run: RunDir) -> tuple[Cell, ...]:
    """The cells of every finished episode of ``tasks`` in ``run`` (episodes of other tasks are
    left out: a smaller ``n`` reads a subset of a larger run)."""
    by_id = {t.id: t for t in tasks}
    pairs = [(key, t) for key, t in run.trajectories() if t.task_id in by_id]
    labels: dict[int, str] = {}
    verdicts: list[bool] = []
    mistakes: dict[str, tuple[int, int]] = {}
    for key, trajectory in pairs:
        task_id, k = split_episode_key(key)
        policy = teacher.policy(by_id[task_id], k)
        label = f"{policy.view.skill}/{policy.view.difficulty}"
        labels[id(trajectory)] = label  # the trajectory's cell, as `label_rows` asks for it
        correct = grade_trajectory(trajectory=trajectory, task=by_id[task_id]).correct
        verdicts.append(correct)
        if policy.mistake is not None and policy.view.difficulty == "hard":
            made, recovered = mistakes.get(label, (0, 0))
            mistakes[label] = (made + 1, recovered + bool(correct))
    order = lambda label: (label.split("/")[0], DIFFICULTY_ORDER.get(label.split("/")[1], 9))
    rows = label_rows([t for _, t in pairs], lambda t: labels[id(t)], verdicts, order=order)
    cells = []
    for row in rows:
        skill, difficulty = row.label.split("/")
        made, recovered = mistakes.get(row.label, (0, 0))
        cells.append(
            Cell(
                skill,
                difficulty,
                row.stats.samples,
                round((row.accuracy or 0.0) * row.stats.samples),
                row.stats.avg_turns or 0.0,
                made,
                recovered,
            )
        )
    return tuple(cells)
