"""`run_curate(config)`: the data engine's stages over every item, resumable, into a run directory.

Stages (in this order; each reads the one before from disk, so a stage can be rerun alone):
``inspect`` (`codedance.curate.inspectors`), ``filter`` (`codedance.curate.filtering`),
``atomic`` (`codedance.curate.atomic`: easy items kept as direct-answer examples from the weak
model's own correct reply; medium/hard items of a ``crop`` source: boxes, rule filter, the
trajectory through the loop and sandbox; of a ``math`` source: `codedance.curate.math_recipe`),
``verify`` (`codedance.curate.verification`); then the export and the report always run.

Run directory (``out``, a `codedance.runs.RunDir` of kind ``curate``): ``run.json`` holds the
settings that define the run (`codedance.curate.config.run_settings_of`); a rerun with other
values of those is refused (naming them), so records are never mixed across settings; choose
another ``out`` to start a new run.
- ``<stage>.jsonl``: one record per item with ``key``, ``task_id`` and ``reason`` ('' = kept),
  written as each item finishes; a rerun skips keys already there (resume by item key). ``atomic.jsonl`` records
  hold the trajectory (`codedance.records` format; images under ``images/``).
- ``sft.jsonl`` (canonical), ``swift.jsonl``, ``trl.jsonl``: the accepted items' SFT records with
  image paths relative to ``out`` (so the folder can be moved), and ``meta`` (key, source,
  difficulty).
- ``report.json`` and ``report.html`` (`codedance.curate.report`).

An endpoint whose breaker opens (`EndpointDown`) stops the run after the items in flight: what
finished is kept, the run returns ``down`` set, and a rerun resumes. Items run concurrently: at
most ``max_in_flight`` requests per endpoint, at most ``sandboxes`` sandboxes at once.
Not handled: several processes writing one run directory at once; run directories written
before ``run.json`` existed (refused as holding no curate run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from codedance.curate.atomic import (
    BoxesUnparseable,
    box_problem,
    crop_trajectory,
    direct_trajectory,
    parse_boxes,
    propose_messages,
)
from codedance.curate.config import CurateConfig, run_settings_of
from codedance.curate.endpoints import Counted, Endpoint, EndpointDown, endpoints_from
from codedance.curate.filtering import UNDECIDED_KINDS, classify
from codedance.curate.inspectors import inspect_item
from codedance.curate.math_recipe import ProgramUnparseable, math_trajectory
from codedance.curate.report import write_report
from codedance.curate.sources import Item, load_items
from codedance.curate.verification import verify
from codedance.policy.base import PolicyError
from codedance.records import (
    ImageStore,
    append_jsonl,
    read_jsonl,
    trajectory_from_json,
    trajectory_json,
)
from codedance.rollout import Episode, EpisodeConfig
from codedance.runs import RunDir
from codedance.sft_records import FORMATS, canonical_record

STAGE_ORDER = ("inspect", "filter", "atomic", "verify")


@dataclass
class CurateResult:
    items: int
    accepted: int
    seconds: float
    down: str = ""
    stage_counts: dict[str, dict[str, int]] = field(default_factory=dict)


class Progress:
    """``stage: done/total`` lines on `stream`, about every 5 % and at the end."""

    def __init__(self, stage: str, total: int, already: int, stream: TextIO | None) -> None:
        self.stage, self.total, self.done, self.stream = stage, total, already, stream
        self.every = max(1, total // 20)

    def step(self) -> None:
        self.done += 1
        if self.stream is not None and (self.done % self.every == 0 or self.done == self.total):
            print(f"{self.stage}: {self.done}/{self.total}", file=self.stream, flush=True)


def stage_path(out: Path, stage: str) -> Path:
    return out / f"{stage}.jsonl"


def kept_keys(out: Path, stage: str) -> dict[str, dict[str, Any]]:
    """The records of `stage` whose reason is '' (kept), by key."""
    return {r["key"]: r for r in read_jsonl(stage_path(out, stage)) if not r.get("reason")}


async def _run_stage(stage: str, items: list[Item], fn: Callable[[Item], Awaitable[dict[str, Any]]],
                     out: Path, concurrency: int, stream: TextIO | None) -> str:
    """Run `fn` on the items not yet in the stage file; return the breaker message ('' if none)."""
    path = stage_path(out, stage)
    done = {r["key"] for r in read_jsonl(path)}
    todo = [i for i in items if i.key not in done]
    progress = Progress(stage, len(items), len(items) - len(todo), stream)
    semaphore = asyncio.Semaphore(concurrency)
    writing = asyncio.Lock()  # one writer; the fsync runs off the event loop (~3 ms a record)
    down: list[str] = []

    async def one(item: Item) -> None:
        async with semaphore:
            if down:
                return
            try:
                record = await fn(item)
            except EndpointDown as exc:
                down.append(str(exc))
                return
        async with writing:
            await asyncio.to_thread(append_jsonl, path, {"key": item.key, "task_id": item.task.id, **record})
        progress.step()

    await asyncio.gather(*(one(i) for i in todo))
    return down[0] if down else ""


class _Stages:
    """The per-item functions of each stage, sharing endpoints, sandbox pool and image store."""

    def __init__(self, config: CurateConfig, endpoints: dict[str, Endpoint], pool: Any, store: ImageStore,
                 filter_records: dict[str, dict[str, Any]]) -> None:
        self.config, self.endpoints, self.pool, self.store = config, endpoints, pool, store
        self.filter_records = filter_records
        self.episode = EpisodeConfig(max_turns=config.atomic.max_turns)

    async def inspect(self, item: Item) -> dict[str, Any]:
        return await inspect_item(item, self.endpoints["strong"], self.config.inspect, self.config.prompts)

    async def filter(self, item: Item) -> dict[str, Any]:
        judge = Counted(self.endpoints["judge"]) if self.config.filter.judge != "never" else None
        record = await classify(item, self.endpoints["weak"], self.endpoints["strong"], self.config.filter,
                                self.config.prompts, judge)
        record["calls"] = len(record["weak"]) + len(record.get("strong", ())) + (judge.calls if judge else 0)
        return record

    async def atomic(self, item: Item) -> dict[str, Any]:
        difficulty = self.filter_records[item.key]["difficulty"]
        record: dict[str, Any] = {"key": item.key, "source": item.source, "difficulty": difficulty,
                                  "reason": "", "calls": 0}
        if difficulty == "easy":
            solved = [s for s in self.filter_records[item.key]["weak"] if s.get("correct")]
            reply = min(solved, key=lambda s: s.get("graded_by") != "rule")["text"]  # a rule-graded one first
            trajectory = direct_trajectory(item.task, reply, self.episode)
            return {**record, "kind": "direct", "trajectory": trajectory_json(trajectory, self.store, item.key)}
        if item.recipe == "math":
            return await self._math(item, record)
        if item.recipe not in ("crop", "annotate"):
            return {**record, "reason": "no_recipe"}
        strong = Counted(self.endpoints["strong"])
        record["kind"] = item.recipe
        images = Episode(item.task, self.episode).images  # sized for the model once (costly for big images)
        try:
            reply = (await strong.ask(propose_messages(item.task, images[0], self.config.prompts))).text
            boxes = parse_boxes(reply)
        except PolicyError as exc:
            return {**record, "reason": "proposal_error", "detail": f"{type(exc).__name__}: {str(exc)[:200]}",
                    "calls": strong.calls}
        except BoxesUnparseable as exc:
            return {**record, "reason": "boxes_unparseable", "detail": str(exc), "calls": strong.calls}
        judged = [(b, box_problem(b, images[0].size, item.task.question, self.config.atomic)) for b in boxes]
        record["boxes"] = [{**b.as_dict(), "problem": p or ""} for b, p in judged]
        kept = [b for b, p in judged if p is None]
        if not kept:
            return {**record, "reason": "no_plausible_box", "calls": strong.calls}
        sandbox = await self.pool.asandbox(images=images, timeout_s=self.config.verify.exec_timeout_s)
        try:
            trajectory = await crop_trajectory(item.task, kept, difficulty, strong, sandbox, self.episode,
                                               self.config.atomic, annotate=item.recipe == "annotate")
        except PolicyError as exc:
            return {**record, "reason": "trajectory_error", "detail": f"{type(exc).__name__}: {str(exc)[:200]}",
                    "calls": strong.calls}
        finally:
            await asyncio.to_thread(sandbox.close)
        return {**record, "calls": strong.calls, "trajectory": trajectory_json(trajectory, self.store, item.key)}

    async def _math(self, item: Item, record: dict[str, Any]) -> dict[str, Any]:
        strong = Counted(self.endpoints["strong"])
        record["kind"] = "math"
        sandbox = await self.pool.asandbox(images=Episode(item.task, self.episode).images,
                                           timeout_s=self.config.verify.exec_timeout_s)
        try:
            trajectory, cot, revision = await math_trajectory(item.task, strong, sandbox, self.episode,
                                                             self.config.prompts)
        except PolicyError as exc:
            return {**record, "reason": "trajectory_error", "detail": f"{type(exc).__name__}: {str(exc)[:200]}",
                    "calls": strong.calls}
        except ProgramUnparseable as exc:
            return {**record, "reason": "program_unparseable", "detail": str(exc), "calls": strong.calls}
        finally:
            await asyncio.to_thread(sandbox.close)
        return {**record, "cot": cot, "revision": revision, "calls": strong.calls,
                "trajectory": trajectory_json(trajectory, self.store, item.key)}

    async def verify(self, item: Item, atomic: dict[str, Any]) -> dict[str, Any]:
        trajectory = trajectory_from_json(atomic["trajectory"], self.store)
        settings = self.config.verify
        judge = Counted(self.endpoints["judge"]) if "judge" in self.endpoints else None
        verdict = await verify(item.task, trajectory, self.pool, self.episode, judge if settings.judge else None,
                               settings.exec_timeout_s, cross_checker=judge if settings.cross_check else None,
                               prompts=self.config.prompts)
        calls = judge.calls if judge is not None else 0
        return {"key": item.key, "source": item.source, "difficulty": atomic["difficulty"],
                "reason": verdict.reason, "detail": verdict.detail, "graded_by": verdict.graded_by, "calls": calls}


def _relative(record: dict[str, Any], out: Path) -> dict[str, Any]:
    record["images"] = [os.path.relpath(p, out) for p in record["images"]]
    return record


def export(config: CurateConfig, items: list[Item], store: ImageStore) -> int:
    """Write the accepted items' SFT records (canonical, ms-swift, TRL) in item order."""
    out = config.out
    accepted = kept_keys(out, "verify")
    atomic = {r["key"]: r for r in read_jsonl(stage_path(out, "atomic")) if "trajectory" in r}
    rows = []
    for item in items:
        if item.key in accepted and item.key in atomic:
            trajectory = trajectory_from_json(atomic[item.key]["trajectory"], store)
            meta = {"key": item.key, "source": item.source, "task_id": item.task.id,
                    "difficulty": atomic[item.key]["difficulty"], "kind": atomic[item.key].get("kind", "")}
            rows.append((canonical_record(trajectory), meta))
    for name, fmt in (("sft", "canonical"), ("swift", "swift"), ("trl", "trl")):
        tmp = out / f"{name}.jsonl.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for record, meta in rows:
                data = _relative(FORMATS[fmt](record, store), out)
                if fmt == "canonical":
                    data["meta"] = meta
                f.write(json.dumps(data, ensure_ascii=False) + "\n")
        tmp.replace(out / f"{name}.jsonl")
    return len(rows)


async def arun_curate(config: CurateConfig, stream: TextIO | None = sys.stderr) -> CurateResult:
    from codedance.sandbox import SandboxPool

    start = time.perf_counter()
    out = config.out
    items, source_counts = load_items(config.sources, config.base)  # a bad source is refused before the claim
    run_dir(config).claim()
    store = ImageStore(out / "images")
    endpoints = endpoints_from(config.endpoints)
    width = max([e.max_in_flight for e in config.endpoints.values()] + [1])
    down = ""
    needs_sandbox = "atomic" in config.stages or "verify" in config.stages  # starting one costs ~1 s
    async with SandboxPool(max_running=config.sandboxes) if needs_sandbox else contextlib.nullcontext() as pool:
        stages = _Stages(config, endpoints, pool, store, {})
        try:
            eligible = items
            if "inspect" in config.stages:
                down = await _run_stage("inspect", items, stages.inspect, out, width, stream)
                kept = kept_keys(out, "inspect")
                eligible = [i for i in items if i.key in kept]
            if "filter" in config.stages and not down:
                down = await _run_stage("filter", eligible, stages.filter, out, width, stream)
            stages.filter_records = kept_keys(out, "filter")
            if "atomic" in config.stages and not down:
                todo = [i for i in items if i.key in stages.filter_records]
                down = await _run_stage("atomic", todo, stages.atomic, out, width + config.sandboxes, stream)
            atomic = kept_keys(out, "atomic")
            if "verify" in config.stages and not down:
                todo = [i for i in items if i.key in atomic]
                down = await _run_stage("verify", todo, lambda i: stages.verify(i, atomic[i.key]), out,
                                        width + config.sandboxes, stream)
        finally:
            for endpoint in endpoints.values():
                await endpoint.aclose()
    accepted = export(config, items, store)
    seconds = time.perf_counter() - start
    report = write_report(config, items, source_counts, endpoints, seconds, store)
    return CurateResult(len(items), accepted, seconds, down, report["stages"])


def run_curate(config: CurateConfig, stream: TextIO | None = sys.stderr) -> CurateResult:
    """Run the configured stages (see the module docstring); resumes from ``config.out``."""
    return asyncio.run(arun_curate(config, stream))


def run_dir(config: CurateConfig) -> RunDir:
    """The run directory of `config` (kind ``curate``, its defining settings)."""
    return RunDir(config.out, "curate", run_settings_of(config))


def plan(config: CurateConfig) -> dict[str, Any]:
    """What a run would do: items per source, stages, and the request budget per endpoint: an
    upper bound over the items not yet done and not already dropped by an earlier stage (an easy
    item costs no atomic request; the judge is asked only when the rules reject). Sends nothing,
    writes nothing; a run directory holding another run is refused as the run would refuse it."""
    run_dir(config).check()
    items, source_counts = load_items(config.sources, config.base)
    records = {s: {r["key"]: r for r in read_jsonl(stage_path(config.out, s))} for s in STAGE_ORDER}
    pending: dict[str, list[Item]] = {}
    dropped: set[str] = set()
    for stage in STAGE_ORDER:
        pending[stage] = [i for i in items if i.key not in dropped and i.key not in records[stage]]
        dropped |= {k for k, r in records[stage].items() if r.get("reason")}
    k = config.filter.k
    budget = {"weak": 0, "strong": 0, "judge": 0}
    if "inspect" in config.stages:
        budget["strong"] += (int(config.inspect.image) + int(config.inspect.question)) * len(pending["inspect"])
    if "filter" in config.stages:
        budget["weak"] += k * len(pending["filter"])
        budget["strong"] += k * len(pending["filter"])
        judged = [i for i in pending["filter"] if config.filter.judge == "fallback"
                  or (config.filter.judge == "undecided" and i.task.kind in UNDECIDED_KINDS)]
        budget["judge"] += 2 * k * len(judged)  # at most one per distinct rejected answer
    if "atomic" in config.stages:  # crop: boxes + the final turn; math: CoT + revision (+ the turns
        # the strong model writes once the revision's claims fail: at most max_turns)
        cost = {"crop": 2, "annotate": 2, "math": 2 + config.atomic.max_turns, "none": 0}
        budget["strong"] += sum(cost[i.recipe] for i in pending["atomic"]
                                if records["filter"].get(i.key, {}).get("difficulty") != "easy")
    if "verify" in config.stages:  # grading only when the rules reject; the cross-check always
        budget["judge"] += (int(config.verify.judge) + int(config.verify.cross_check)) * len(pending["verify"])
    return {"items": len(items), "sources": source_counts, "stages": list(config.stages),
            "done": {s: len(r) for s, r in records.items()}, "request_budget": budget, "out": str(config.out)}
