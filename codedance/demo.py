"""The offline demo: world tasks → the expert teacher through the real loop and sandbox → grades →
R_BAT rewards → GRPO advantages → a run directory and a summary table.

    from codedance.demo import DemoConfig, run_demo
    result = run_demo(DemoConfig(tasks=18, rollouts=4, seed=0, out="runs/demo"))

Run directory: ``run.json`` (the settings; a different run in the same directory is refused),
``trajectories.jsonl`` + ``images/`` (written as each episode ends, `codedance.records`),
``failures.jsonl`` (episodes that raised), ``metrics.json`` (summary rows and per-trajectory
grades, reward terms and advantages) and ``report.html`` (`codedance.demo_report`). A rerun with
the same settings resumes: finished ``task_id#k`` keys are skipped.

Rewards use the ``paper`` profile by default, each task's G rollouts forming one GRPO group;
groups with a missing (failed) rollout are scored over the rollouts they have.
Not handled: several processes writing one run directory at once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from codedance.demo_summary import DemoRow, score_run, summary_rows
from codedance.records import (
    ImageStore,
    append_jsonl,
    load_trajectories,
    read_jsonl,
    trajectory_json,
)
from codedance.rollout import Episode, EpisodeConfig, arun_episode
from codedance.teacher import ExpertTeacher, TeacherConfig
from codedance.types import Task
from codedance.world import parse_skills, task_set

RUN_FILE = "run.json"


class DemoError(ValueError):
    """Settings the demo cannot run with (the text says what to change)."""


@dataclass(frozen=True)
class DemoConfig:
    tasks: int = 18
    rollouts: int = 4
    seed: int = 0
    out: str = "runs/demo"
    skills: tuple[str, ...] = ()
    temperature: float = 1.0
    mistake_rate: float = 0.5
    max_turns: int = 6
    reward_profile: str = "paper"
    concurrency: int = 2
    exec_timeout_s: float = 15.0

    def identity(self) -> dict[str, object]:
        """The settings that define the run (what a resumed run must share)."""
        d = asdict(self)
        for key in ("out", "concurrency", "exec_timeout_s"):
            d.pop(key)
        d["skills"] = list(self.skills)
        return d


@dataclass(frozen=True)
class DemoResult:
    out_dir: str
    rows: tuple[DemoRow, ...]
    episodes_run: int
    episodes_skipped: int
    failures: tuple[tuple[str, str], ...]
    seconds: float


def _claim(out: Path, config: DemoConfig) -> None:
    out.mkdir(parents=True, exist_ok=True)
    path = out / RUN_FILE
    want = config.identity()
    if path.exists():
        have = json.loads(path.read_text())
        if have != want:
            diff = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
            raise DemoError(f"{out} holds a different run (settings differ: {', '.join(diff)}); "
                            "choose another --out or delete it")
    elif any(out.iterdir()):
        raise DemoError(f"{out} is not empty and holds no demo run; choose another --out")
    else:
        path.write_text(json.dumps(want, indent=1))


def demo_tasks(config: DemoConfig) -> tuple[Task, ...]:
    if config.tasks < 1 or config.rollouts < 1:
        raise DemoError("--tasks and --rollouts must be at least 1")
    return task_set(config.tasks, config.seed, parse_skills(list(config.skills) or None))


async def _run_episodes(config: DemoConfig, tasks: tuple[Task, ...], out: Path,
                        advance: Callable[[], None]) -> tuple[int, list[tuple[str, str]]]:
    from codedance.sandbox.pool import SandboxPool

    episode_config = EpisodeConfig(max_turns=config.max_turns)
    teacher = ExpertTeacher(TeacherConfig(config.temperature, config.mistake_rate, config.seed))
    done = {str(r.get("key")) for r in read_jsonl(out / "trajectories.jsonl")}
    todo = [(f"{t.id}#{k}", t, k) for t in tasks for k in range(config.rollouts)
            if f"{t.id}#{k}" not in done]
    store = ImageStore(out / "images")
    failures: list[tuple[str, str]] = []
    semaphore = asyncio.Semaphore(config.concurrency)
    ran = 0
    pool = SandboxPool(max_running=config.concurrency)

    async def one(key: str, task: Task, k: int) -> None:
        nonlocal ran
        async with semaphore:
            sandbox = None
            try:
                images = Episode(task, episode_config).images
                sandbox = await pool.asandbox(images=images, timeout_s=config.exec_timeout_s)
                trajectory = await arun_episode(teacher.policy(task, k), task, sandbox, episode_config)
                append_jsonl(out / "trajectories.jsonl", trajectory_json(trajectory, store, key))
                ran += 1
            except Exception as exc:  # one episode's failure never ends the run
                failures.append((key, f"{type(exc).__name__}: {exc}"))
                append_jsonl(out / "failures.jsonl", {"key": key, "error": failures[-1][1]})
            finally:
                if sandbox is not None:
                    await asyncio.to_thread(sandbox.close)
                advance()

    try:
        await asyncio.gather(*(one(*job) for job in todo))
    finally:
        await pool.aclose()
    return ran, failures


def run_demo(config: DemoConfig, *, progress: bool = True) -> DemoResult:
    """Run (or resume) the demo into ``config.out``; see the module docstring."""
    started = time.monotonic()
    tasks = demo_tasks(config)
    out = Path(config.out)
    _claim(out, config)
    total = len(tasks) * config.rollouts
    skipped = len({str(r.get("key")) for r in read_jsonl(out / "trajectories.jsonl")})
    bar = None
    if progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        bar = Progress("[bold]episodes", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        bar.start()
        handle = bar.add_task("episodes", total=total, completed=min(skipped, total))
    try:
        ran, failures = asyncio.run(_run_episodes(
            config, tasks, out, (lambda: bar.advance(handle)) if bar else (lambda: None)))
    finally:
        if bar is not None:
            bar.stop()
    by_id = {t.id: t for t in tasks}
    pairs = [(key, tr) for key, tr in load_trajectories(out) if tr.task_id in by_id]
    scored = score_run(pairs, by_id, config.reward_profile)
    rows = summary_rows(scored)
    metrics = {"settings": config.identity(), "rows": [asdict(r) for r in rows],
               "trajectories": [s.as_json() for s in scored], "failures": failures}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    from codedance.demo_report import write_report

    write_report(out, rows, scored)
    return DemoResult(str(out), tuple(rows), ran, total - ran - len(failures), tuple(failures),
                      time.monotonic() - started)
