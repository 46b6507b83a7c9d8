"""The offline demo: world tasks → the expert teacher through the real loop and sandbox → grades →
R_BAT rewards → GRPO advantages → a run directory and a summary table.

    from codedance.demo import DemoConfig, run_demo
    result = run_demo(DemoConfig(tasks=18, rollouts=4, seed=0, out="runs/demo"))

Run directory (`codedance.runs.RunDir`): ``run.json`` (kind ``demo`` and the settings; a
different run in the same directory is refused), ``trajectories.jsonl`` + ``images/`` (written as
each episode ends), ``failures.jsonl`` (episodes that raised), ``metrics.json`` (summary rows and
per-trajectory grades, reward terms and advantages) and ``report.html`` (`codedance.demo.report`).
A rerun with the same settings resumes: finished ``task_id#k`` keys are skipped. Every setting is
checked (the task set, the reward profile, the prompt profile) before the folder is written.

Rewards use the ``paper`` profile by default, each task's G rollouts forming one GRPO group;
groups with a missing (failed) rollout are scored over the rollouts they have.
Not handled: several processes writing one run directory at once.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, replace

from codedance.config import bounded, check_bounds, not_resumed
from codedance.demo.summary import DemoRow, score_run, summary_rows
from codedance.rewards import get_profile
from codedance.rollout import EpisodeSettings
from codedance.runs.batch import arun_batch
from codedance.runs.rundir import RunDir, run_settings
from codedance.teacher import ExpertTeacher, TeacherConfig
from codedance.types import Task
from codedance.world import parse_skills, task_set


@dataclass(frozen=True)
class DemoConfig:
    tasks: int = bounded(18, at_least=1)
    rollouts: int = bounded(4, at_least=1)
    seed: int = 0  # of the task set and of the teacher's sampling (it replaces teacher.seed)
    out: str = not_resumed("runs/demo")
    skills: tuple[str, ...] = ()
    reward_profile: str = "paper"
    teacher: TeacherConfig = TeacherConfig()
    episode: EpisodeSettings = EpisodeSettings()
    concurrency: int = not_resumed(2, at_least=1)

    def __post_init__(self) -> None:
        check_bounds(self)
        get_profile(self.reward_profile)  # an unknown profile raises before anything runs


@dataclass(frozen=True)
class DemoResult:
    out_dir: str
    rows: tuple[DemoRow, ...]
    episodes_run: int
    episodes_skipped: int
    failures: tuple[tuple[str, str], ...]
    seconds: float


def demo_tasks(config: DemoConfig) -> tuple[Task, ...]:
    return task_set(config.tasks, config.seed, parse_skills(list(config.skills) or None))


async def _run_episodes(config: DemoConfig, tasks: tuple[Task, ...], run: RunDir, progress: bool):
    from codedance.sandbox.pool import SandboxPool

    teacher = ExpertTeacher(replace(config.teacher, seed=config.seed))
    pool = SandboxPool(max_running=config.concurrency, timeout_s=config.episode.exec_timeout_s)
    try:
        return await arun_batch(
            teacher.policy,
            tasks,
            lambda images: pool.sandbox(images=images),
            run,
            config.episode.episode_config(),
            rollouts=config.rollouts,
            concurrency=config.concurrency,
            progress=progress,
        )
    finally:
        await pool.aclose()


def run_demo(config: DemoConfig, *, progress: bool = True) -> DemoResult:
    """Run (or resume) the demo into ``config.out``; see the module docstring."""
    started = time.monotonic()
    tasks = demo_tasks(config)
    episode = config.episode.episode_config()  # checks the prompt profile before the claim
    run = RunDir(config.out, "demo", run_settings(config))
    run.claim()
    summary = asyncio.run(_run_episodes(config, tasks, run, progress))
    by_id = {t.id: t for t in tasks}
    pairs = [(key, tr) for key, tr in run.trajectories() if tr.task_id in by_id]
    scored = score_run(pairs, by_id, config.reward_profile)
    rows = summary_rows(scored)
    metrics = {
        "settings": run.settings,
        "profile": episode.profile.name,
        "rows": [asdict(r) for r in rows],
        "trajectories": [s.as_json() for s in scored],
        "failures": list(summary.failures),
    }
    (run.path / "metrics.json").write_text(json.dumps(metrics, indent=1))
    from codedance.demo.report import write_report

    write_report(run.path, rows, scored)
    return DemoResult(
        str(run.path),
        tuple(rows),
        summary.finished,
        summary.skipped,
        summary.failures,
        time.monotonic() - started,
    )
