"""Many episodes at once: G rollouts per task, bounded concurrency, resumable JSONL output.

`arun_batch` runs ``rollouts`` episodes of every task on one asyncio loop, at most
``concurrency`` at a time, each with its own runner from `make_runner` (given the task's images
as the model sees them; for example ``lambda images: pool.sandbox(images=images)``). Each
finished trajectory is appended to ``out_dir/trajectories.jsonl`` (images once by hash under
``out_dir/images``, see `codedance.records`) under the key ``task_id#k``. A rerun with the same
``out_dir`` skips every key already there. An episode that raises (unreachable server, a runner
that cannot start, ...) is logged to ``out_dir/failures.jsonl`` and the batch goes on; a rerun
tries it again. With ``stop_after`` set, that many consecutive `PolicyConnectionError`s (the
server is gone; each already retried by the policy) stop the batch: episodes not yet started are
not run, ``BatchSummary.stopped`` says why, and a rerun resumes. ``on_failure`` sees each failure
as it happens (for progress displays).

Not handled: several processes writing one ``out_dir`` at once; retrying a failed episode within
the same run (the policy already retries transient HTTP errors).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from codedance.policy.base import Policy, PolicyConnectionError
from codedance.records import ImageStore, append_jsonl, read_jsonl, trajectory_json
from codedance.rollout import CodeRunner, Episode, EpisodeConfig, arun_episode
from codedance.types import Image, Task, Trajectory


class ClosableRunner(CodeRunner, Protocol):
    def close(self) -> None: ...


RunnerFactory = Callable[[tuple[Image, ...]], ClosableRunner]


@dataclass(frozen=True)
class BatchSummary:
    """What one `arun_batch` call did; ``failures`` holds (key, error) pairs."""

    out_dir: str
    finished: int
    skipped: int
    failures: tuple[tuple[str, str], ...]
    seconds: float
    stopped: str = ""


def finished_keys(out_dir: str | Path) -> set[str]:
    """Keys already in ``out_dir/trajectories.jsonl``."""
    return {str(r.get("key")) for r in read_jsonl(Path(out_dir) / "trajectories.jsonl")}


async def arun_batch(
    policy: Policy,
    tasks: Sequence[Task],
    make_runner: RunnerFactory,
    out_dir: str | Path,
    config: EpisodeConfig = EpisodeConfig(),
    *,
    rollouts: int = 1,
    concurrency: int = 16,
    progress: bool = True,
    on_trajectory: Callable[[str, Trajectory], None] | None = None,
    on_failure: Callable[[str, str], None] | None = None,
    stop_after: int | None = None,
) -> BatchSummary:
    """Run and save every (task, rollout) not yet in `out_dir`; see the module docstring."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    store = ImageStore(out / "images")
    done = finished_keys(out)
    jobs = [(f"{t.id}#{k}", t) for t in tasks for k in range(rollouts)]
    todo = [(key, task) for key, task in jobs if key not in done]
    semaphore = asyncio.Semaphore(concurrency)
    failures: list[tuple[str, str]] = []
    finished = 0
    down = 0  # consecutive connection failures
    stopped = ""
    started = time.monotonic()

    bar = None
    if progress:
        from rich.progress import Progress

        bar = Progress(transient=False)
        bar.start()
        bar_task = bar.add_task("episodes", total=len(todo))

    async def one(key: str, task: Task) -> None:
        nonlocal finished, down, stopped
        async with semaphore:
            if stopped:
                return
            runner = None
            try:
                images = Episode(task, config).images
                runner = await asyncio.to_thread(make_runner, images)
                trajectory = await arun_episode(policy, task, runner, config)
                append_jsonl(out / "trajectories.jsonl", trajectory_json(trajectory, store, key))
                finished += 1
                down = 0
                if on_trajectory is not None:
                    on_trajectory(key, trajectory)
            except Exception as exc:  # noqa: BLE001 - one episode's failure never ends the batch
                message = f"{type(exc).__name__}: {exc}"
                failures.append((key, message))
                append_jsonl(out / "failures.jsonl", {"key": key, "error": message, "time": time.time()})
                down = down + 1 if isinstance(exc, PolicyConnectionError) else 0
                if stop_after is not None and down >= stop_after and not stopped:
                    stopped = f"{down} consecutive connection failures (last: {message[:200]})"
                if on_failure is not None:
                    on_failure(key, message)
            finally:
                if runner is not None:
                    await asyncio.to_thread(runner.close)
                if bar is not None:
                    bar.advance(bar_task)

    try:
        await asyncio.gather(*(one(key, task) for key, task in todo))
    finally:
        if bar is not None:
            bar.stop()
    return BatchSummary(str(out), finished, len(jobs) - len(todo), tuple(failures), time.monotonic() - started,
                        stopped)


def run_batch(
    policy: Policy,
    tasks: Sequence[Task],
    make_runner: RunnerFactory,
    out_dir: str | Path,
    config: EpisodeConfig = EpisodeConfig(),
    **kwargs: object,
) -> BatchSummary:
    """`arun_batch` from blocking code (starts its own event loop)."""
    return asyncio.run(arun_batch(policy, tasks, make_runner, out_dir, config, **kwargs))  # type: ignore[arg-type]
