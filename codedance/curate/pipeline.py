"""`run_curate(config)`: the data engine's stages over every item, resumable, into a run directory.

Stages, in this order for each item: ``inspect`` (`codedance.curate.inspectors`), ``filter``
(`codedance.curate.filtering`), ``atomic`` (`codedance.curate.atomic`: easy items kept as
direct-answer examples from the weak model's own correct reply; medium/hard items of a ``crop``
source: boxes, rule filter, the trajectory through the loop and sandbox; of a ``draw`` source:
`codedance.curate.drawing`'s operations; of a ``math`` source: `codedance.curate.math_recipe`),
``verify`` (`codedance.curate.verification`); then the export and the report always run. An item
dropped by a stage (its record's ``reason``) goes no further.

The sources are streamed (`codedance.curate.sources.iter_items`, read in a worker thread so the
event loop keeps serving replies): each item is taken through every stage as soon as it is read,
at most ``max_in_flight`` (the largest endpoint's) + ``sandboxes`` items at once, so memory holds
the items in flight, not the dataset; what is kept per item after it is done is its key, source
and task id (`ItemRef`, for the export) and, for a few, the task (the report's samples). A stage
left out of ``stages`` passes an item on only through a record an earlier run wrote (``inspect``:
always), so stages can still be run one at a time.

Run directory (``out``, a `codedance.runs.RunDir` of kind ``curate``): ``run.json`` holds the
settings that define the run (`codedance.curate.config.run_settings_of`); a rerun with other
values of those is refused (naming them), so records are never mixed across settings; choose
another ``out`` to start a new run.
- ``<stage>.jsonl``: one record per item with ``key``, ``task_id`` and ``reason`` ('' = kept),
  written as each item finishes the stage; a rerun reuses the records already there (resume by
  item key; they are read at the start and dropped from memory as their items pass).
  ``atomic.jsonl`` records hold the trajectory (`codedance.records` format; images under
  ``images/``).
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
from collections.abc import Awaitable, Callable, Iterator
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
from codedance.curate.drawing import OpsUnparseable, draw_trajectory, op_problems, parse_ops
from codedance.curate.drawing import propose_messages as draw_messages
from codedance.curate.endpoints import Counted, Endpoint, EndpointDown, endpoints_from, error_text
from codedance.curate.filtering import UNDECIDED_KINDS, classify
from codedance.curate.inspectors import inspect_item
from codedance.curate.math_recipe import ProgramUnparseable, math_trajectory
from codedance.curate.report import write_report
from codedance.curate.sources import Item, check_first_rows, check_sources, iter_items
from codedance.curate.verification import verify
from codedance.policy.base import PolicyError
from codedance.progress import clock
from codedance.records import (
    ImageStore,
    append_jsonl,
    read_jsonl,
    trajectory_from_json,
    trajectory_json,
)
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
    """One line on `stream` about every 5 % of the items read so far and at the end: items read
    and finished, then ``stage done/total`` for each stage (``done`` items with a record of the
    stage, of ``total`` that reached it; the totals grow while the sources are still being read),
    and the elapsed time."""

    def __init__(self, stages: tuple[str, ...], stream: TextIO | None) -> None:
        self.stages, self.stream = stages, stream
        self.done = dict.fromkeys(stages, 0)
        self.total = dict.fromkeys(stages, 0)
        self.read = self.finished = 0
        self.began = time.monotonic()

    def reached(self, stage: str) -> None:
        self.total[stage] += 1

    def recorded(self, stage: str) -> None:
        self.done[stage] += 1

    def item_finished(self) -> None:
        self.finished += 1
        if self.finished % max(1, self.read // 20) == 0:
            self.show()

    def show(self) -> None:
        if self.stream is not None:
            stages = ", ".join(
                f"{stage} {self.done[stage]}/{self.total[stage]}" for stage in self.stages
            )
            print(
                f"curate: {self.finished}/{self.read} items finished; {stages} "
                f"(elapsed {clock(time.monotonic() - self.began)})",
                file=self.stream,
                flush=True,
            )


def stage_path(out: Path, stage: str) -> Path:
    return out / f"{stage}.jsonl"


def kept_keys(out: Path, stage: str) -> dict[str, dict[str, Any]]:
    """The records of `stage` whose reason is '' (kept), by key."""
    return {r["key"]: r for r in read_jsonl(stage_path(out, stage)) if not r.get("reason")}


@dataclass(frozen=True)
class ItemRef:
    """What the export and the report keep of an item once it has passed (no images)."""

    key: str
    source: str
    task_id: str


class _Stages:
    """The per-item functions of each stage, sharing endpoints, sandbox pool and image store."""

    def __init__(
        self, config: CurateConfig, endpoints: dict[str, Endpoint], pool: Any, store: ImageStore
    ) -> None:
        self.config, self.endpoints, self.pool, self.store = config, endpoints, pool, store
        self.episode = config.episode.episode_config()

    async def inspect(self, item: Item) -> dict[str, Any]:
        return await inspect_item(
            item, self.endpoints["strong"], self.config.inspect, self.config.prompts
        )

    async def filter(self, item: Item) -> dict[str, Any]:
        judge = Counted(self.endpoints["judge"]) if self.config.filter.judge != "never" else None
        record = await classify(
            item,
            self.endpoints["weak"],
            self.endpoints["strong"],
            self.config.filter,
            self.config.prompts,
            judge,
        )
        record["calls"] = (
            len(record["weak"]) + len(record.get("strong", ())) + (judge.calls if judge else 0)
        )
        return record

    async def atomic(self, item: Item, filtered: dict[str, Any]) -> dict[str, Any]:
        difficulty = filtered["difficulty"]
        record: dict[str, Any] = {
            "key": item.key,
            "source": item.source,
            "difficulty": difficulty,
            "reason": "",
            "calls": 0,
        }
        if difficulty == "easy":
            solved = [s for s in filtered["weak"] if s.get("correct")]
            reply = min(solved, key=lambda s: s.get("graded_by") != "rule")[
                "text"
            ]  # a rule-graded one first
            trajectory = direct_trajectory(item.task, reply, self.episode)
            return {
                **record,
                "kind": "direct",
                "trajectory": trajectory_json(trajectory, self.store, item.key),
            }
        if item.recipe == "math":
            return await self._math(item, record)
        if item.recipe not in ("crop", "annotate", "draw"):
            return {**record, "reason": "no_recipe"}
        return await self._visual(item, record, difficulty)

    async def _visual(self, item: Item, record: dict[str, Any], difficulty: str) -> dict[str, Any]:
        """The crop, annotate and draw recipes: a proposal, rule checks, the trajectory."""
        strong = Counted(self.endpoints["strong"])
        record["kind"] = item.recipe
        images = self.episode.images_of(
            item.task
        )  # sized for the model once (costly for big images)
        size, question, rules = images[0].size, item.task.question, self.config.atomic
        draws = item.recipe == "draw"
        try:
            messages = (draw_messages if draws else propose_messages)(
                item.task, images[0], self.config.prompts
            )
            reply = (await strong.ask(messages)).text
            proposed: list[Any] = parse_ops(reply) if draws else parse_boxes(reply)
        except PolicyError as exc:
            return {
                **record,
                "reason": "proposal_error",
                "detail": error_text(exc),
                "calls": strong.calls,
            }
        except (BoxesUnparseable, OpsUnparseable) as exc:
            return {
                **record,
                "reason": "ops_unparseable" if draws else "boxes_unparseable",
                "detail": str(exc),
                "calls": strong.calls,
            }
        problems = (
            op_problems(proposed, size, question, rules)
            if draws
            else [box_problem(b, size, question, rules) for b in proposed]
        )
        record["ops" if draws else "boxes"] = [
            {**p.as_dict(), "problem": why or ""} for p, why in zip(proposed, problems, strict=True)
        ]
        kept = [p for p, why in zip(proposed, problems, strict=True) if why is None]
        if not kept:
            return {
                **record,
                "reason": "no_plausible_op" if draws else "no_plausible_box",
                "calls": strong.calls,
            }
        sandbox = await self.pool.asandbox(
            images=images, timeout_s=self.config.episode.exec_timeout_s
        )
        try:
            if draws:
                trajectory = await draw_trajectory(
                    item.task, kept, difficulty, strong, sandbox, self.episode, rules
                )
            else:
                trajectory = await crop_trajectory(
                    item.task,
                    kept,
                    difficulty,
                    strong,
                    sandbox,
                    self.episode,
                    rules,
                    annotate=item.recipe == "annotate",
                )
        except PolicyError as exc:
            return {
                **record,
                "reason": "trajectory_error",
                "detail": error_text(exc),
                "calls": strong.calls,
            }
        finally:
            await asyncio.to_thread(sandbox.close)
        return {
            **record,
            "calls": strong.calls,
            "trajectory": trajectory_json(trajectory, self.store, item.key),
        }

    async def _math(self, item: Item, record: dict[str, Any]) -> dict[str, Any]:
        strong = Counted(self.endpoints["strong"])
        record["kind"] = "math"
        sandbox = await self.pool.asandbox(
            images=self.episode.images_of(item.task), timeout_s=self.config.episode.exec_timeout_s
        )
        try:
            trajectory, cot, revision = await math_trajectory(
                item.task, strong, sandbox, self.episode, self.config.prompts
            )
        except PolicyError as exc:
            return {
                **record,
                "reason": "trajectory_error",
                "detail": error_text(exc),
                "calls": strong.calls,
            }
        except ProgramUnparseable as exc:
            return {
                **record,
                "reason": "program_unparseable",
                "detail": str(exc),
                "calls": strong.calls,
            }
        finally:
            await asyncio.to_thread(sandbox.close)
        return {
            **record,
            "cot": cot,
            "revision": revision,
            "calls": strong.calls,
            "trajectory": trajectory_json(trajectory, self.store, item.key),
        }

    async def verify(self, item: Item, atomic: dict[str, Any]) -> dict[str, Any]:
        trajectory = trajectory_from_json(atomic["trajectory"], self.store)
        settings = self.config.verify
        judge = Counted(self.endpoints["judge"]) if "judge" in self.endpoints else None
        verdict = await verify(
            item.task,
            trajectory,
            self.pool,
            self.episode,
            judge if settings.judge else None,
            self.config.episode.exec_timeout_s,
            cross_checker=judge if settings.cross_check else None,
            prompts=self.config.prompts,
        )
        calls = judge.calls if judge is not None else 0
        return {
            "key": item.key,
            "source": item.source,
            "difficulty": atomic["difficulty"],
            "reason": verdict.reason,
            "detail": verdict.detail,
            "graded_by": verdict.graded_by,
            "calls": calls,
        }


def _relative(record: dict[str, Any], out: Path) -> dict[str, Any]:
    record["images"] = [os.path.relpath(p, out) for p in record["images"]]
    return record


def export(config: CurateConfig, items: list[ItemRef], store: ImageStore) -> int:
    """Write the accepted items' SFT records (canonical, ms-swift, TRL) in item order."""
    out = config.out
    accepted = kept_keys(out, "verify")
    atomic = {r["key"]: r for r in read_jsonl(stage_path(out, "atomic")) if "trajectory" in r}
    rows = []
    for item in items:
        if item.key in accepted and item.key in atomic:
            trajectory = trajectory_from_json(atomic[item.key]["trajectory"], store)
            meta = {
                "key": item.key,
                "source": item.source,
                "task_id": item.task_id,
                "difficulty": atomic[item.key]["difficulty"],
                "kind": atomic[item.key].get("kind", ""),
            }
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


class _Flow:
    """One pass over the streamed items, each taken through the stages in order (see the module
    docstring). Records written earlier are reused (resume by key); a stage not configured for
    this run passes on an item only through its earlier record (``inspect``: always passes)."""

    SAMPLES = 4

    def __init__(self, config: CurateConfig, stages: _Stages, progress: Progress) -> None:
        self.config, self.stages, self.progress = config, stages, progress
        out = config.out
        self.records = {
            s: {r["key"]: r for r in read_jsonl(stage_path(out, s))} for s in STAGE_ORDER
        }
        self.writing = (
            asyncio.Lock()
        )  # one writer; the fsync runs off the event loop (~3 ms a record)
        self.down = ""
        self.samples: dict[bool, list[Item]] = {True: [], False: []}

    async def _record(
        self, stage: str, item: Item, fn: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        record = {"key": item.key, "task_id": item.task.id, **(await fn())}
        async with self.writing:
            await asyncio.to_thread(append_jsonl, stage_path(self.config.out, stage), record)
        return record

    async def _stage(
        self, stage: str, item: Item, fn: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any] | None:
        """The item's record of `stage` (kept in memory only until the item is done), or None."""
        have = self.records[stage].pop(item.key, None)
        if stage not in self.config.stages:
            return have if have is not None or stage != "inspect" else {"reason": ""}
        self.progress.reached(stage)
        record = have if have is not None else await self._record(stage, item, fn)
        self.progress.recorded(stage)
        return record

    async def item(self, item: Item) -> None:
        s = self.stages
        try:
            inspected = await self._stage("inspect", item, lambda: s.inspect(item))
            if inspected is None or inspected.get("reason"):
                return self._done(item, inspected)
            filtered = await self._stage("filter", item, lambda: s.filter(item))
            if filtered is None or filtered.get("reason"):
                return self._done(item, filtered)
            atomic = await self._stage("atomic", item, lambda: s.atomic(item, filtered))
            if atomic is None or atomic.get("reason"):
                return self._done(item, atomic)
            return self._done(
                item, await self._stage("verify", item, lambda: s.verify(item, atomic)), final=True
            )
        except EndpointDown as exc:
            self.down = self.down or str(exc)

    def _done(self, item: Item, record: dict[str, Any] | None, final: bool = False) -> None:
        self.progress.item_finished()
        if record is None:
            return
        accepted = final and not record.get("reason")
        if len(self.samples[accepted]) < self.SAMPLES:
            self.samples[accepted].append(item)

    async def run(self, items: Iterator[Item], width: int) -> list[ItemRef]:
        """Take every item through the stages, at most `width` items at once; the refs in order."""
        refs: list[ItemRef] = []
        slots = asyncio.Semaphore(width)
        running: set[asyncio.Task[None]] = set()

        async def one(item: Item) -> None:
            try:
                await self.item(item)
            finally:
                slots.release()

        try:
            while not self.down:
                await slots.acquire()
                item = await asyncio.to_thread(next, items, None)  # reading a source is CPU work
                if item is None or self.down:
                    slots.release()
                    break
                refs.append(ItemRef(item.key, item.source, item.task.id))
                self.progress.read += 1
                task = asyncio.create_task(one(item))
                running.add(task)
                task.add_done_callback(running.discard)
        finally:
            await asyncio.gather(*running)
        return refs


async def arun_curate(config: CurateConfig, stream: TextIO | None = sys.stderr) -> CurateResult:
    from codedance.sandbox import SandboxPool

    start = time.perf_counter()
    out = config.out
    check_sources(config.sources)
    check_first_rows(config.sources, config.base)
    run_dir(config).claim()
    store = ImageStore(out / "images")
    endpoints = endpoints_from(config.endpoints)
    width = max([e.max_in_flight for e in config.endpoints.values()] + [1]) + config.sandboxes
    source_counts: dict[str, int] = {}
    progress = Progress(config.stages, stream)
    needs_sandbox = (
        "atomic" in config.stages or "verify" in config.stages
    )  # starting one costs ~1 s
    async with (
        SandboxPool(max_running=config.sandboxes)
        if needs_sandbox
        else contextlib.nullcontext() as pool
    ):
        flow = _Flow(config, _Stages(config, endpoints, pool, store), progress)
        try:
            refs = await flow.run(iter_items(config.sources, config.base, source_counts), width)
        finally:
            for endpoint in endpoints.values():
                await endpoint.aclose()
    progress.show()
    accepted = export(config, refs, store)
    seconds = time.perf_counter() - start
    samples = flow.samples[True] + flow.samples[False]
    report = write_report(config, len(refs), samples, source_counts, endpoints, seconds, store)
    return CurateResult(len(refs), accepted, seconds, flow.down, report["stages"])


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
    check_sources(config.sources)
    records = {
        s: {
            r["key"]: (bool(r.get("reason")), r.get("difficulty"))
            for r in read_jsonl(stage_path(config.out, s))
        }
        for s in STAGE_ORDER
    }  # (dropped, difficulty) by key: no replies or trajectories
    pending = dict.fromkeys(STAGE_ORDER, 0)
    judged = atomic_requests = items = 0
    cost = {"crop": 2, "annotate": 2, "draw": 2, "math": 2 + config.episode.max_turns, "none": 0}
    source_counts: dict[str, int] = {}
    for item in iter_items(
        config.sources, config.base, source_counts
    ):  # streamed: only counts kept
        items += 1
        for stage in STAGE_ORDER:
            record = records[stage].get(item.key)
            if record is not None and record[0]:
                break  # dropped there: no later stage sees it
            if record is None:
                pending[stage] += 1
                if stage == "filter":
                    judged += config.filter.judge == "fallback" or (
                        config.filter.judge == "undecided" and item.task.kind in UNDECIDED_KINDS
                    )
                if (
                    stage == "atomic"
                    and records["filter"].get(item.key, (False, None))[1] != "easy"
                ):
                    atomic_requests += cost[item.recipe]
    k = config.filter.k
    budget = {"weak": 0, "strong": 0, "judge": 0}
    if "inspect" in config.stages:
        budget["strong"] += (int(config.inspect.image) + int(config.inspect.question)) * pending[
            "inspect"
        ]
    if "filter" in config.stages:
        budget["weak"] += k * pending["filter"]
        budget["strong"] += k * pending["filter"]
        budget["judge"] += 2 * k * judged  # at most one per distinct rejected answer
    if "atomic" in config.stages:  # crop: boxes + the final turn; math: CoT + revision (+ the turns
        budget["strong"] += (
            atomic_requests  # the strong model writes once the claims fail: <= max_turns)
        )
    if "verify" in config.stages:  # grading only when the rules reject; the cross-check always
        budget["judge"] += (int(config.verify.judge) + int(config.verify.cross_check)) * pending[
            "verify"
        ]
    return {
        "items": items,
        "sources": source_counts,
        "stages": list(config.stages),
        "done": {s: len(r) for s, r in records.items()},
        "request_budget": budget,
        "out": str(config.out),
    }
