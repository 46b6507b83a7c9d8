"""The one batch driver: G rollouts per task, bounded concurrency, each saved as it ends.

`arun_batch` runs ``rollouts`` episodes of every task on one asyncio loop, at most
``concurrency`` at a time, each with its own runner from `make_runner` (given the task's images
as the model sees them; for example ``lambda images: pool.sandbox(images=images)``) and its own
policy (one `Policy` for all, or ``policy(task, k)`` for a per-episode policy such as the
teacher's). Each finished trajectory is appended to the run directory (`RunDir`: a path works
too) under its key `episode_key` (``task_id#k``), unless ``after`` says otherwise: ``after(key,
task, trajectory)`` is awaited first (synth verifies there) and the trajectory is kept only when
it returns True. A rerun skips every key already saved (or every key in ``done``, when given:
synth counts a task done once it has a verdict). An episode that raises
(unreachable server, a runner that cannot start, ...) is logged to ``failures.jsonl`` and the
batch goes on; a rerun tries it again. With ``stop_after`` set, that many consecutive server
faults (`server_fault`: a `PolicyConnectionError`, HTTP 429 / 5xx, each already retried by the
policy, so the server is gone or overloaded; or 401 / 403 / 404, a key or model name that every
request would meet) stop the batch:
episodes not yet started are not run, ``BatchSummary.stopped`` says why, and a rerun resumes.
``on_trajectory`` / ``on_failure`` see each episode as it ends; `BatchProgress` is the progress
bar every command shows (done/total, failures, elapsed and remaining time).

Not handled: several processes writing one run directory at once; retrying a failed episode within
the same run (the policy already retries transient HTTP errors).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from codedance.messages import shorten
from codedance.policy.base import Policy, PolicyConnectionError, PolicyHTTPError
from codedance.rollout import CodeRunner, Episode, EpisodeConfig, EpisodeFactory, adrive_episode
from codedance.runs.rundir import RunDir, episode_key
from codedance.types import Image, Task, Trajectory


class ClosableRunner(CodeRunner, Protocol):
    def close(self) -> None: ...


RunnerFactory = Callable[[tuple[Image, ...]], ClosableRunner]
PolicyFor = Callable[[Task, int], Policy]
After = Callable[[str, Task, Trajectory], Awaitable[bool]]


@dataclass(frozen=True)
class BatchSummary:
    """What one `arun_batch` call did; ``failures`` holds (key, error) pairs."""

    out_dir: str
    finished: int
    skipped: int
    failures: tuple[tuple[str, str], ...]
    seconds: float
    stopped: str = ""


class BatchProgress:
    """A progress bar: ``label``, done/total, failures so far, elapsed and remaining time."""

    def __init__(self, total: int, label: str = "episodes", done: int = 0) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        self.task = self.bar.add_task(label, total=total, completed=done, failed=0)
        self.failures = 0
        self.bar.start()

    def done(self, *_: object) -> None:
        self.bar.advance(self.task)

    def set(self, done: int) -> None:
        """Show ``done`` finished (for loops that learn the count, not each episode)."""
        self.bar.update(self.task, completed=done)

    def failed(self, *_: object) -> None:
        self.failures += 1
        self.bar.update(self.task, advance=1, failed=self.failures)

    def stop(self) -> None:
        self.bar.stop()


def finished_keys(out_dir: str | Path) -> set[str]:
    """Keys already in ``out_dir/trajectories.jsonl``."""
    return RunDir(out_dir).keys()


SETTINGS_FAULTS = (401, 403, 404)
"""A key the server refuses, a model it does not serve, a URL that is not a chat endpoint: every
later request meets the same answer, whatever its sample."""


def server_fault(exc: BaseException) -> bool:
    """Whether an episode failed because of the server, not the sample: unreachable, an
    overload / server error still there after the policy's retries (a 503-answering server
    would otherwise be retried sample after sample to the end), or a `SETTINGS_FAULTS` answer."""
    return isinstance(exc, PolicyConnectionError) or (
        isinstance(exc, PolicyHTTPError)
        and (exc.status == 429 or exc.status >= 500 or exc.status in SETTINGS_FAULTS)
    )


async def arun_batch(
    policy: Policy | PolicyFor,
    tasks: Sequence[Task],
    make_runner: RunnerFactory,
    run: RunDir | str | Path,
    config: EpisodeConfig = EpisodeConfig(),
    *,
    rollouts: int = 1,
    concurrency: int = 16,
    progress: bool = True,
    on_trajectory: Callable[[str, Trajectory], None] | None = None,
    on_failure: Callable[[str, str], None] | None = None,
    stop_after: int | None = None,
    after: After | None = None,
    done: Collection[str] | None = None,
    agent: EpisodeFactory | None = None,
) -> BatchSummary:
    """Run and save every (task, rollout) not yet in the run; see the module docstring.
    ``agent`` starts the episodes of another protocol (``codedance.agents``); None: `Episode`."""
    run = run if isinstance(run, RunDir) else RunDir(run)
    run.path.mkdir(parents=True, exist_ok=True)
    policy_for: PolicyFor = (lambda t, k: policy) if hasattr(policy, "acomplete") else policy  # type: ignore[assignment,return-value]
    done = run.keys() if done is None else set(done)
    jobs = [(episode_key(t.id, k), t, k) for t in tasks for k in range(rollouts)]
    todo = [job for job in jobs if job[0] not in done]
    semaphore = asyncio.Semaphore(concurrency)
    failures: list[tuple[str, str]] = []
    finished = 0
    down = 0  # consecutive server faults
    stopped = ""
    started = time.monotonic()
    bar = BatchProgress(len(todo)) if progress and todo else None

    async def one(key: str, task: Task, k: int) -> None:
        nonlocal finished, down, stopped
        async with semaphore:
            if stopped:
                return
            runner = None
            try:
                images = (
                    agent.images_of(task, config) if agent is not None else config.images_of(task)
                )
                runner = await asyncio.to_thread(make_runner, images)
                episode = agent.start(task, config) if agent is not None else Episode(task, config)
                trajectory = await adrive_episode(episode, policy_for(task, k), runner)
                await asyncio.to_thread(runner.close)
                runner = None
                if after is None or await after(key, task, trajectory):
                    run.append(key, trajectory)
                finished += 1
                down = 0
                if on_trajectory is not None:
                    on_trajectory(key, trajectory)
                if bar is not None:
                    bar.done()
            except Exception as exc:  # noqa: BLE001 - one episode's failure never ends the batch
                message = f"{type(exc).__name__}: {exc}"
                failures.append((key, message))
                run.fail(key, message)
                down = down + 1 if server_fault(exc) else 0
                if stop_after is not None and down >= stop_after and not stopped:
                    stopped = f"{down} consecutive server failures (last: {shorten(message, 200)})"
                if on_failure is not None:
                    on_failure(key, message)
                if bar is not None:
                    bar.failed()
            finally:
                if runner is not None:
                    await asyncio.to_thread(runner.close)

    try:
        await asyncio.gather(*(one(*job) for job in todo))
    finally:
        if bar is not None:
            bar.stop()
    return BatchSummary(
        str(run.path),
        finished,
        len(jobs) - len(todo),
        tuple(failures),
        time.monotonic() - started,
        stopped,
    )


def run_batch(
    policy: Policy | PolicyFor,
    tasks: Sequence[Task],
    make_runner: RunnerFactory,
    run: RunDir | str | Path,
    config: EpisodeConfig = EpisodeConfig(),
    **kwargs: object,
) -> BatchSummary:
    """`arun_batch` from blocking code (starts its own event loop)."""
    return asyncio.run(arun_batch(policy, tasks, make_runner, run, config, **kwargs))  # type: ignore[arg-type]
