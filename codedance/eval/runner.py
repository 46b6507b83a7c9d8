"""`run_eval`: episodes for every benchmark sample, scored, aggregated and reported.

Layout of ``out_dir``: ``run.json`` (the settings that define the run), ``trajectories.jsonl`` +
``images/`` and ``failures.jsonl`` (`codedance.runs`: written by the batch driver, each finished
sample at once),
``scores.jsonl`` (one `SampleScore` per sample, appended as it is scored), then the report
(``report.json``, ``report.md``, ``report.html``, ``plots/``, ``view/``).

Resuming: rerunning with the same ``out_dir`` and settings skips every sample already in
``trajectories.jsonl`` and every score already in ``scores.jsonl``; samples that failed (in
``failures.jsonl``) are tried again; scores left pending for want of a judge are redone when
``judge`` is given. Other settings (model, turn budget, profile, sampling, no-tools) must match
``run.json``: a mismatch raises instead of mixing two runs. ``limit`` may change between runs.

Images are decoded benchmark chunk by chunk (``4 × concurrency`` samples), so an HR-Bench 8K run
does not hold 800 decoded 8K images at once; the raw rows (compressed bytes) stay in memory. An
image that cannot be decoded fails its row (logged to ``failures.jsonl`` naming the row and file),
never the benchmark.

Settings are checked when `EvalConfig.run_settings` makes the `EvalSettings`; the data is read
before ``run.json`` is written. ``samples`` > 1 runs k samples per item (keys ``<task>#0`` ...
``#k-1``). ``stop_after_connection_failures`` consecutive server failures
(`codedance.runs.batch.server_fault`) stop the episodes early (the report says so; a rerun resumes).
``scoring`` is ``vlmevalkit`` or ``strict`` (`codedance.eval.scoring`); changing it rescores the
saved trajectories.
No-tools mode (`no_tools_config`): one turn, a prompt without the code instruction, no sandbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from codedance.errors import DataError
from codedance.eval.loaders import check_items, prepare_items, to_task
from codedance.eval.options import EvalSettings
from codedance.eval.scoring import score_sample
from codedance.eval.sources import RawItem
from codedance.eval.spec import BenchmarkSpec, SampleScore
from codedance.grading import JudgeClient
from codedance.policy.base import Policy
from codedance.prompts import PromptProfile
from codedance.records import ImageStore, append_jsonl, read_jsonl, trajectory_from_json
from codedance.rollout import EpisodeConfig
from codedance.runs.batch import BatchProgress, RunnerFactory, arun_batch
from codedance.runs.rundir import RunDir, episode_key
from codedance.types import ExecResult, Image, Task, Trajectory

NO_TOOLS = PromptProfile(
    name="no-tools",
    system="You are a helpful assistant.",
    instruction="Think step-by-step within <think></think>, then give your final answer in "
    "<answer></answer>.",
)


def no_tools_config(config: EpisodeConfig) -> EpisodeConfig:
    """One turn, no code instruction, no turn-limit text: the model answers directly."""
    profile = config.profile if config.profile.name.startswith("no-tools") else NO_TOOLS
    return dataclasses.replace(config, max_turns=1, profile=profile, inject_turn_limit=False)


class NoToolRunner:
    """The runner of no-tools mode: never called (one turn never runs code); raises if it is."""

    def run(self, code: str) -> ExecResult:
        raise RuntimeError("no-tools mode runs no code")

    async def arun(self, code: str) -> ExecResult:
        return self.run(code)

    def close(self) -> None:
        pass


class _Dimensions(ImageStore):
    """Reads records without the pixels (scoring and statistics need only the sizes)."""

    def get(self, ref: dict) -> Image:
        return Image(png=b"", origin=ref["origin"], width=ref["width"], height=ref["height"])


def claim_run(out: Path, settings: EvalSettings) -> RunDir:
    """Claim ``out`` for this eval (`codedance.runs.RunDir`, kind ``eval``); the benchmarks run
    so far are kept in ``run.json`` beside the settings. Other settings are refused, naming them."""
    run = RunDir(out, "eval", settings.identity())
    have = run.info().get("benchmarks", []) if run.info().get("kind") == "eval" else []
    run.claim(
        benchmarks=sorted({*have, *(s.name for s in settings.benchmarks)}), limit=settings.limit
    )
    return run


def data_source(spec: BenchmarkSpec, settings: EvalSettings) -> str:
    """The file or folder a benchmark is read from, as messages name it."""
    path = dict(settings.data_paths).get(spec.name)
    if path is not None:
        return str(path)
    return str(Path(settings.lmu_dir or ".") / f"{spec.vlmeval_name}.tsv")


def _task_or_failure(
    spec: BenchmarkSpec, item: RawItem, n: int, source: str = ""
) -> tuple[str, Task | str]:
    """(task id, the task of one row or why its image cannot be used, naming the row and file)."""
    task_id = to_task(spec, item, n, images=False).id
    try:
        return task_id, to_task(spec, item, n)
    except (DataError, ValueError, OSError) as exc:
        image = item.get("image_file") or item.get("image_path")
        named = (
            f" {image}"
            if image and len(image) < 200
            else f" of row {n} of {source}"
            if source
            else ""
        )
        text = str(exc)
        reason = text.split("cannot be decoded: ", 1)[-1]
        return task_id, f"{task_id}: image{named} is not a readable image ({reason[:200]})"


async def _episodes(
    policy: Policy,
    settings: EvalSettings,
    work: Sequence[tuple[BenchmarkSpec, RawItem, int]],
    make_runner: RunnerFactory,
    run: RunDir,
) -> tuple[list[tuple[str, str]], str]:
    """Run the missing samples; (failures of this run, why the run stopped early or "")."""
    from codedance.agents import get_agent

    config = no_tools_config(settings.episode) if settings.no_tools else settings.episode
    agent = get_agent(settings.agent)
    failures: list[tuple[str, str]] = []
    progress = (
        BatchProgress(len(work) * settings.samples, "samples")
        if settings.progress and work
        else None
    )
    chunk = max(16, 4 * settings.concurrency)
    stopped = ""
    try:
        for start in range(0, len(work), chunk):
            tasks = []
            for spec, item, n in work[start : start + chunk]:
                task_id, task = _task_or_failure(spec, item, n, data_source(spec, settings))
                if isinstance(task, Task):
                    tasks.append(task)
                    continue
                for j in range(settings.samples):  # the row fails, never the benchmark
                    key, error = episode_key(task_id, j), f"UnreadableImage: {task}"
                    failures.append((key, error))
                    run.fail(key, error)
                    if progress:
                        progress.failed(key, error)
            summary = await arun_batch(
                policy,
                tasks,
                make_runner,
                run,
                config,
                rollouts=settings.samples,
                concurrency=settings.concurrency,
                progress=False,
                on_trajectory=progress.done if progress else None,
                on_failure=progress.failed if progress else None,
                stop_after=settings.stop_after_connection_failures,
                agent=agent,
            )
            failures += list(summary.failures)
            if summary.stopped:
                stopped = summary.stopped
                break
    finally:
        if progress is not None:
            progress.stop()
    return failures, stopped


def latest_scores(out: Path) -> dict[str, SampleScore]:
    scores: dict[str, SampleScore] = {}
    for r in read_jsonl(out / "scores.jsonl"):
        r["extras"] = tuple(tuple(kv) for kv in r["extras"])
        scores[r["key"]] = SampleScore(**r)
    return scores


def record_digest(record: dict) -> str:
    """A digest of one trajectory record (what its score was computed from)."""
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def load_records(out: Path, digests: dict[str, str] | None = None) -> dict[str, Trajectory]:
    """key -> trajectory (without pixels) of every finished sample; the last record wins.
    ``digests``, when given, is filled with key -> `record_digest`."""
    store = _Dimensions(out / "images")
    records = {}
    for r in read_jsonl(out / "trajectories.jsonl"):
        records[r["key"]] = trajectory_from_json(r, store)
        if digests is not None:
            digests[r["key"]] = record_digest(r)
    return records


def score_all(
    out: Path,
    tasks: dict[str, tuple[BenchmarkSpec, Task]],
    judge: JudgeClient | None,
    workers: int = 16,
    mode: str = "vlmevalkit",
) -> dict[str, SampleScore]:
    """Score every finished trajectory not yet scored under ``mode`` (or pending and a judge is
    now given). A judge that fails on a sample never stops this: see `score_sample`."""
    scores = latest_scores(out)
    digests: dict[str, str] = {}
    records = load_records(out, digests)
    todo = [
        (k, t)
        for k, t in records.items()
        if t.task_id in tasks
        and (
            k not in scores
            or scores[k].trajectory_digest != digests[k]
            or scores[k].scoring != mode
            or (scores[k].correct is None and judge is not None)
        )
    ]

    def one(item: tuple[str, Trajectory]) -> SampleScore:
        key, trajectory = item
        spec, task = tasks[trajectory.task_id]
        score = dataclasses.replace(
            score_sample(key, task, trajectory, judge, spec.scorer, mode),
            trajectory_digest=digests[key],
        )
        append_jsonl(out / "scores.jsonl", dataclasses.asdict(score))
        return score

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for score in pool.map(one, todo):
            scores[score.key] = score
    return scores


def load_data(settings: EvalSettings) -> list[tuple[BenchmarkSpec, list[RawItem]]]:
    """Each benchmark's raw rows, read and checked (`check_items`: rows, required columns,
    images, a readable first row); a `DataError` names the file and what is wrong."""
    paths = dict(settings.data_paths)
    loaded = []
    for spec in settings.benchmarks:
        items = prepare_items(
            spec,
            lmu_dir=settings.lmu_dir,
            path=paths.get(spec.name),
            limit=settings.limit,
            pixmo_cache=settings.pixmo_cache,
            fetch_images=settings.fetch_images,
            split=settings.tasks_split,
        )
        check_items(spec, items, data_source(spec, settings))
        loaded.append((spec, items))
    return loaded


def run_eval(
    policy: Policy,
    settings: EvalSettings,
    out_dir: str | Path,
    *,
    make_runner: RunnerFactory | None = None,
    judge: JudgeClient | None = None,
    on_loaded: Callable[[BenchmarkSpec, int], None] | None = None,
    loaded: list[tuple[BenchmarkSpec, list[RawItem]]] | None = None,
):
    """Run, score and report; returns the `EvalReport` (see ``codedance.eval.report``).

    The data (``loaded``, or `load_data` here) is read and checked before ``run.json`` is
    written, so wrong data leaves no run folder; the command line loads it before it contacts
    the server."""
    from codedance.eval.report import build_report
    from codedance.eval.report_files import write_report

    out = Path(out_dir)
    loaded = load_data(settings) if loaded is None else loaded
    run = claim_run(out, settings)
    done = run.keys()
    work, tasks = [], {}
    for spec, items in loaded:
        if on_loaded is not None:
            on_loaded(spec, len(items))
        for n, item in enumerate(items):
            stub = to_task(spec, item, n, images=False)
            tasks[stub.id] = (spec, stub)
            if any(episode_key(stub.id, j) not in done for j in range(settings.samples)):
                work.append((spec, item, n))
    from codedance.agents import get_agent

    agent = get_agent(settings.agent)
    pool = None
    if make_runner is None:
        if settings.no_tools:
            make_runner = lambda images: NoToolRunner()
        elif agent.uses_sandbox:
            from codedance.sandbox.pool import SandboxPool

            pool = SandboxPool(timeout_s=settings.exec_timeout_s)
            make_runner = lambda images: pool.sandbox(images=images)
    make_runner = functools.partial(
        agent.runner, sandbox=make_runner
    )  # the protocol's tool (or the sandbox)
    if agent.stop and hasattr(policy, "sampling"):  # the protocol's stop strings (an HTTP policy's)
        policy.sampling = dataclasses.replace(policy.sampling, stop=agent.stop)  # type: ignore[attr-defined]
    try:
        _, stopped = asyncio.run(_episodes(policy, settings, work, make_runner, run))
    finally:
        if pool is not None:
            pool.close()
    scores = score_all(out, tasks, judge, mode=settings.scoring)
    records = load_records(out)
    report = build_report(
        out,
        settings,
        tasks,
        scores,
        records,
        run.open_failures(),
        judge=judge.config.model if judge else None,
        stopped=stopped,
    )
    labels = {
        tid: (
            meta.get("category") or meta.get("subject") or meta.get("task", ""),
            meta.get("level", ""),
        )
        for tid, (_, task) in tasks.items()
        for meta in (dict(task.metadata),)
    }
    write_report(report, out, labels=labels)
    return report
