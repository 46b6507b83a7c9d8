"""`run_synth`: verified teacher trajectories of the task world, as SFT data in a run directory.

    from codedance.synth import SynthConfig, run_synth
    result = run_synth(SynthConfig(n=50, skills=("counting", "search"), out="runs/synth"))

Task ``i`` is ``generate(skill, difficulty, seed + i)`` cycling over skills × difficulties
(`codedance.world.task_set`'s order). The expert teacher (temperature and first-mistake rate as
in the demo, so hard items carry noticed-and-corrected mistakes) solves each task once through
the real loop and sandbox; `codedance.synth.verify` accepts or rejects it. Tasks are tried in
order, in windows of as many tasks as records are still missing, until ``n`` are accepted or
``max_tasks`` were tried.

Run directory:
- ``run.json``: the settings; a directory holding another run (or anything else) is refused.
- ``verdicts.jsonl``: one line per tried task (``key``, ``reason`` — '' when accepted —,
  ``detail``, ``crops``); a rerun skips these keys, so an interrupted run continues.
- ``failures.jsonl``: episodes that raised (retried by the next run).
- ``trajectories.jsonl`` + ``images/``: the accepted trajectories, appended as each is verified
  (`codedance.records`; what ``codedance sft --data`` reads).
- ``sft.jsonl``: their canonical SFT records (`codedance.sft_records`, with ``key`` and the task
  id, skill and difficulty under ``meta``), and ``swift.jsonl`` / ``trl.jsonl``: the same records
  in ms-swift's and TRL's formats; all three hold at most ``n`` records in task order, rewritten
  at the end of every run.
- ``summary.json``: accepted, tried, rejected counts by reason, failures.

Not handled: several processes writing one run directory at once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from codedance.errors import SettingsError
from codedance.records import (
    ImageStore,
    append_jsonl,
    load_trajectories,
    read_jsonl,
    trajectory_json,
)
from codedance.rollout import Episode, EpisodeConfig, arun_episode
from codedance.sft_records import canonical_record, record_json, write_records
from codedance.synth.verify import Verdict, averify
from codedance.teacher import ExpertTeacher, TeacherConfig
from codedance.types import Task
from codedance.world import (
    DIFFICULTIES,
    Difficulty,
    generate,
    parse_difficulty,
    parse_skills,
    parse_task_id,
)
from codedance.world.base import task_id

if TYPE_CHECKING:  # pragma: no cover
    from codedance.sandbox.pool import SandboxPool

KIND = "codedance synth"


class SynthError(SettingsError):
    """Settings synth cannot run with (the text says what to change)."""


@dataclass(frozen=True)
class SynthConfig:
    n: int = 36
    out: str = "runs/synth"
    skills: tuple[str, ...] = ()  # () = every skill
    difficulties: tuple[str, ...] = tuple(d.value for d in DIFFICULTIES)
    seed: int = 0
    max_tasks: int = 0  # 0 = 2·n + 10
    temperature: float = 1.0
    mistake_rate: float = 0.5
    max_turns: int = 6
    concurrency: int = 2
    exec_timeout_s: float = 15.0

    @property
    def task_limit(self) -> int:
        return self.max_tasks or 2 * self.n + 10

    def identity(self) -> dict[str, object]:
        """The settings that define the run (what a resumed run must share)."""
        d = asdict(self)
        for key in ("out", "concurrency", "exec_timeout_s", "max_tasks", "n"):
            d.pop(key)
        return {"kind": KIND, **d, "skills": list(self.skills), "difficulties": list(self.difficulties)}


@dataclass(frozen=True)
class SynthResult:
    out_dir: str
    accepted: int
    tried: int
    rejected: tuple[tuple[str, int], ...]  # (reason, count), most frequent first
    failures: int
    ran: int  # tasks tried by this call (the rest were resumed)
    seconds: float


def _claim(out: Path, config: SynthConfig) -> None:
    """Write ``run.json``, or check that the directory holds this very run."""
    path = out / "run.json"
    want = config.identity()
    if path.exists():
        have = json.loads(path.read_text())
        if have.get("kind") != KIND:
            raise SynthError(f"{out} holds another kind of run ({have.get('kind', 'a demo')}); choose another --out")
        if have != want:
            diff = ", ".join(sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k)))
            raise SynthError(f"{out} holds a different synth run (settings differ: {diff}); "
                             "choose another --out or delete it")
        return
    if out.exists() and any(out.iterdir()):
        raise SynthError(f"{out} is not empty and holds no synth run; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(want, indent=1))


def check(config: SynthConfig) -> tuple[tuple[str, str], ...]:
    """The (skill, difficulty) cycle; raises `SynthError` / `WorldError` on impossible settings."""
    if config.n < 1:
        raise SynthError(f"--n must be at least 1 (records wanted), got {config.n}")
    if config.task_limit < config.n:
        raise SynthError(f"--max-tasks {config.task_limit} cannot give {config.n} records "
                         "(each task gives at most one); raise --max-tasks or lower --n")
    if config.concurrency < 1 or config.max_turns < 1:
        raise SynthError("--concurrency and --max-turns must be at least 1")
    names = parse_skills(list(config.skills) or None)
    diffs = [parse_difficulty(d).value for d in config.difficulties]
    if not diffs:
        raise SynthError("no difficulty selected")
    return tuple((s, d) for s in names for d in diffs)


def task_at(combos: tuple[tuple[str, str], ...], seed: int, i: int) -> Task:
    """Task ``i`` of the run (the order of `codedance.world.task_set`)."""
    return generate(*combos[i % len(combos)], seed + i)


def key_at(combos: tuple[tuple[str, str], ...], seed: int, i: int) -> str:
    """The id of `task_at` without generating it."""
    skill, difficulty = combos[i % len(combos)]
    return task_id(skill, Difficulty(difficulty), seed + i)


async def _window(config: SynthConfig, tasks: list[Task], out: Path, pool: SandboxPool,
                  advance: Callable[[bool], None]) -> None:
    episode_config = EpisodeConfig(max_turns=config.max_turns)
    teacher = ExpertTeacher(TeacherConfig(config.temperature, config.mistake_rate, config.seed))
    store = ImageStore(out / "images")
    semaphore = asyncio.Semaphore(config.concurrency)

    async def one(task: Task) -> None:
        async with semaphore:
            try:
                sandbox = await pool.asandbox(images=Episode(task, episode_config).images,
                                              timeout_s=config.exec_timeout_s)
                try:
                    trajectory = await arun_episode(teacher.policy(task, 0), task, sandbox, episode_config)
                finally:
                    await asyncio.to_thread(sandbox.close)
                verdict = await averify(task, trajectory, pool, episode_config, config.exec_timeout_s)
                if verdict.accepted:
                    append_jsonl(out / "trajectories.jsonl", trajectory_json(trajectory, store, task.id))
                append_jsonl(out / "verdicts.jsonl", {"key": task.id, **asdict(verdict)})
                advance(verdict.accepted)
            except Exception as exc:  # noqa: BLE001  (one episode's failure never ends the run)
                append_jsonl(out / "failures.jsonl", {"key": task.id, "error": f"{type(exc).__name__}: {exc}"})

    await asyncio.gather(*(one(t) for t in tasks))


def _verdicts(out: Path) -> dict[str, Verdict]:
    return {str(r["key"]): Verdict(r["reason"], r["detail"], r["crops"]) for r in read_jsonl(out / "verdicts.jsonl")}


async def _run(config: SynthConfig, combos: tuple[tuple[str, str], ...], out: Path,
               advance: Callable[[bool], None]) -> int:
    from codedance.sandbox.pool import SandboxPool

    pool = SandboxPool(max_running=config.concurrency)
    ran, attempted = 0, set(_verdicts(out))
    try:
        while True:
            done = _verdicts(out)
            missing = config.n - sum(v.accepted for v in done.values())
            seen = set(done) | attempted
            todo = [i for i in range(config.task_limit) if key_at(combos, config.seed, i) not in seen]
            if missing <= 0 or not todo:
                return ran
            window = [task_at(combos, config.seed, i) for i in todo[:missing]]
            attempted |= {t.id for t in window}  # a failed episode waits for the next run
            await _window(config, window, out, pool, advance)
            ran += len(window)
    finally:
        await pool.aclose()


def run_synth(config: SynthConfig, *, progress: bool = True) -> SynthResult:
    """Run (or resume) synth into ``config.out``; see the module docstring."""
    started = time.monotonic()
    combos = check(config)
    out = Path(config.out)
    _claim(out, config)
    bar = None
    if progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        bar = Progress("[bold]accepted", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        bar.start()
        have = sum(v.accepted for v in _verdicts(out).values())
        handle = bar.add_task("accepted", total=config.n, completed=min(have, config.n))
    try:
        ran = asyncio.run(_run(config, combos, out,
                               (lambda ok: bar.advance(handle, int(ok))) if bar else (lambda ok: None)))
    finally:
        if bar is not None:
            bar.stop()
    return _finish(config, combos, out, ran, time.monotonic() - started)


def _finish(config: SynthConfig, combos: tuple[tuple[str, str], ...], out: Path, ran: int,
            seconds: float) -> SynthResult:
    verdicts = _verdicts(out)
    accepted = {k for k, v in verdicts.items() if v.accepted}
    order = {key_at(combos, config.seed, i): i for i in range(config.task_limit)}
    pairs = {}
    for key, trajectory in load_trajectories(out):
        if key in accepted and key not in pairs:
            pairs[key] = trajectory
    keep = sorted(pairs, key=lambda k: order.get(k, len(order)))[:config.n]
    records = [canonical_record(pairs[k]) for k in keep]
    store = ImageStore(out / "images")
    with open(out / "sft.jsonl", "w", encoding="utf-8") as f:
        for key, record in zip(keep, records):
            skill, difficulty, _ = parse_task_id(key)
            meta = {"task_id": key, "skill": skill, "difficulty": difficulty.value}
            f.write(json.dumps({"key": key, "meta": meta, **record_json(record, store)}, ensure_ascii=False) + "\n")
    write_records(records, out / "swift.jsonl", "swift")
    write_records(records, out / "trl.jsonl", "trl")
    rejected = Counter(v.reason for v in verdicts.values() if not v.accepted).most_common()
    failed = {str(r["key"]) for r in read_jsonl(out / "failures.jsonl")} - set(verdicts)
    result = SynthResult(str(out), len(keep), len(verdicts), tuple(rejected), len(failed), ran, seconds)
    (out / "summary.json").write_text(json.dumps({**asdict(result), "rejected": dict(rejected)}, indent=1))
    return result
