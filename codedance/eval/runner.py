"""`run_eval`: episodes for every benchmark sample, scored, aggregated and reported.

Layout of ``out_dir``: ``run.json`` (the settings that define the run), ``trajectories.jsonl`` +
``images/`` and ``failures.jsonl`` (written by `codedance.batch`, each finished sample at once),
``scores.jsonl`` (one `SampleScore` per sample, appended as it is scored), then the report
(``report.json``, ``report.md``, ``report.html``, ``plots/``, ``view/``).

Resuming: rerunning with the same ``out_dir`` and settings skips every sample already in
``trajectories.jsonl`` and every score already in ``scores.jsonl``; samples that failed (in
``failures.jsonl``) are tried again; scores left pending for want of a judge are redone when
``judge`` is given. Other settings (model, turn budget, profile, sampling, no-tools) must match
``run.json``: a mismatch raises instead of mixing two runs. ``limit`` may change between runs.

Images are decoded benchmark chunk by chunk (``4 × concurrency`` samples), so an HR-Bench 8K run
does not hold 800 decoded 8K images at once; the raw rows (compressed bytes) stay in memory.
No-tools mode (`no_tools_config`): one turn, a prompt without the code instruction, no sandbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from codedance.batch import RunnerFactory, arun_batch, finished_keys
from codedance.eval.loaders import prepare_items, to_task
from codedance.eval.scoring import score_sample
from codedance.eval.spec import BenchmarkSpec, SampleScore
from codedance.grading import JudgeClient
from codedance.policy.base import Policy
from codedance.prompts import PromptProfile
from codedance.records import ImageStore, append_jsonl, read_jsonl, trajectory_from_json
from codedance.rollout import EpisodeConfig
from codedance.types import ExecResult, Image, Task, Trajectory

NO_TOOLS = PromptProfile(
    name="no-tools", system="You are a helpful assistant.",
    instruction="Think step-by-step within <think></think>, then give your final answer in <answer></answer>.",
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


@dataclass(frozen=True)
class EvalSettings:
    """Everything that defines a run. ``data_paths`` maps benchmark names to files/folders."""

    benchmarks: tuple[BenchmarkSpec, ...]
    episode: EpisodeConfig = EpisodeConfig()
    model: str = ""
    sampling: str = ""
    no_tools: bool = False
    limit: int | None = None
    concurrency: int = 64
    exec_timeout_s: float = 15.0
    lmu_dir: str | None = None
    data_paths: tuple[tuple[str, str], ...] = ()
    pixmo_cache: str | None = None
    fetch_images: bool = False
    progress: bool = True

    def identity(self) -> dict[str, object]:
        """The settings a resumed run must share with the first one."""
        return {"model": self.model, "sampling": self.sampling, "no_tools": self.no_tools,
                "max_turns": self.episode.max_turns, "profile": self.episode.profile.name,
                "profile_fields": dataclasses.asdict(self.episode.profile)}


class _Dimensions(ImageStore):
    """Reads records without the pixels (scoring and statistics need only the sizes)."""

    def get(self, ref: dict) -> Image:
        return Image(png=b"", origin=ref["origin"], width=ref["width"], height=ref["height"])


def check_run_file(out: Path, settings: EvalSettings) -> None:
    path = out / "run.json"
    identity = settings.identity()
    if path.exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        diff = [k for k in identity if old.get("identity", {}).get(k) != identity[k]]
        if diff:
            raise ValueError(f"{out} holds a run with other settings ({', '.join(diff)} differ); "
                             f"use another --out, or repeat the first run's settings to resume it")
    benchmarks = sorted({*json.loads(path.read_text())["benchmarks"], *(s.name for s in settings.benchmarks)}) \
        if path.exists() else [s.name for s in settings.benchmarks]
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"identity": identity, "benchmarks": benchmarks, "limit": settings.limit},
                               indent=1), encoding="utf-8")


async def _episodes(policy: Policy, settings: EvalSettings, work: Sequence[tuple[BenchmarkSpec, object, int]],
                    make_runner: RunnerFactory, out: Path) -> list[tuple[str, str]]:
    config = no_tools_config(settings.episode) if settings.no_tools else settings.episode
    failures: list[tuple[str, str]] = []
    bar = None
    if settings.progress and work:
        from rich.progress import Progress

        bar = Progress()
        bar.start()
        bar_task = bar.add_task("samples", total=len(work))
    chunk = max(16, 4 * settings.concurrency)
    try:
        for start in range(0, len(work), chunk):
            tasks = [to_task(spec, item, n) for spec, item, n in work[start:start + chunk]]  # type: ignore[arg-type]
            summary = await arun_batch(
                policy, tasks, make_runner, out, config, rollouts=1, concurrency=settings.concurrency,
                progress=False, on_trajectory=(lambda *_: bar.advance(bar_task)) if bar else None)
            failures += list(summary.failures)
            if bar is not None:
                bar.advance(bar_task, len(summary.failures))
    finally:
        if bar is not None:
            bar.stop()
    return failures


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


def score_all(out: Path, tasks: dict[str, tuple[BenchmarkSpec, Task]], judge: JudgeClient | None,
              workers: int = 16) -> dict[str, SampleScore]:
    """Score every finished trajectory not yet scored (or pending and a judge is now given)."""
    scores = latest_scores(out)
    digests: dict[str, str] = {}
    records = load_records(out, digests)
    todo = [(k, t) for k, t in records.items() if t.task_id in tasks
            and (k not in scores or scores[k].trajectory_digest != digests[k]
                 or (scores[k].correct is None and judge is not None))]

    def one(item: tuple[str, Trajectory]) -> SampleScore:
        key, trajectory = item
        spec, task = tasks[trajectory.task_id]
        score = dataclasses.replace(score_sample(key, task, trajectory, judge, spec.scorer),
                                    trajectory_digest=digests[key])
        append_jsonl(out / "scores.jsonl", dataclasses.asdict(score))
        return score

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for score in pool.map(one, todo):
            scores[score.key] = score
    return scores


def run_eval(policy: Policy, settings: EvalSettings, out_dir: str | Path, *,
             make_runner: RunnerFactory | None = None, judge: JudgeClient | None = None,
             on_loaded: Callable[[BenchmarkSpec, int], None] | None = None):
    """Run, score and report; returns the `EvalReport` (see ``codedance.eval.report``)."""
    from codedance.eval.report import build_report, write_report

    out = Path(out_dir)
    check_run_file(out, settings)
    paths = dict(settings.data_paths)
    done = finished_keys(out)
    work, tasks = [], {}
    for spec in settings.benchmarks:
        items = prepare_items(spec, lmu_dir=settings.lmu_dir, path=paths.get(spec.name), limit=settings.limit,
                              pixmo_cache=settings.pixmo_cache, fetch_images=settings.fetch_images)
        if on_loaded is not None:
            on_loaded(spec, len(items))
        for n, item in enumerate(items):
            stub = to_task(spec, item, n, images=False)
            tasks[stub.id] = (spec, stub)
            if f"{stub.id}#0" not in done:
                work.append((spec, item, n))
    pool = None
    if make_runner is None:
        if settings.no_tools:
            make_runner = lambda images: NoToolRunner()
        else:
            from codedance.sandbox.pool import SandboxPool

            pool = SandboxPool(timeout_s=settings.exec_timeout_s)
            make_runner = lambda images: pool.sandbox(images=images)
    try:
        failures = asyncio.run(_episodes(policy, settings, work, make_runner, out))
    finally:
        if pool is not None:
            pool.close()
    scores = score_all(out, tasks, judge)
    report = build_report(out, settings, tasks, scores, load_records(out), failures,
                          judge=judge.config.name if judge else None)
    write_report(report, out)
    return report
