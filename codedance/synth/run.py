"""`run_synth`: verified teacher trajectories of the task world, as SFT data in a run directory.

    from codedance.synth import SynthConfig, run_synth
    result = run_synth(SynthConfig(n=50, skills=("counting", "search"), out="runs/synth"))

Task ``i`` is ``generate(skill, difficulty, seed + i)`` cycling over skills × difficulties
(`codedance.world.task_cycle`: skills round-robin, so a small ``n`` still covers every skill). The
expert teacher (temperature and first-mistake rate as in the demo, so hard items carry
noticed-and-corrected mistakes) solves each task once through the real loop and sandbox;
`codedance.synth.verify` accepts or rejects it. Tasks are tried in order, in windows of as many
tasks as records are still missing, until ``n`` are accepted or ``max_tasks`` were tried.

Run directory:
- ``run.json``: kind ``synth`` and the settings (`codedance.runs.RunDir`); a directory holding
  another run (or anything else) is refused.
- ``verdicts.jsonl``: one line per tried task (``key`` ``task_id#0``, ``reason`` — '' when accepted
  —, ``detail``, ``crops``); a rerun skips these keys, so an interrupted run continues.
- ``failures.jsonl``: episodes that raised (retried by the next run).
- ``trajectories.jsonl`` + ``images/``: the accepted trajectories, appended as each is verified
  (`codedance.records`; what ``codedance sft --data`` reads).
- ``sft.jsonl``: their canonical SFT records (`codedance.sft_records`, with ``key`` and the task
  id, skill and difficulty under ``meta``), and ``swift.jsonl`` / ``trl.jsonl``: the same records
  in ms-swift's and TRL's formats; all three hold at most ``n`` records in task order, rewritten
  at the end of every run, images named relative to the run directory (``images/<sha256>.png``).
- ``summary.json``: accepted, tried, rejected counts by reason, failures, ``mix`` (skill,
  difficulty, records).

Not handled: several processes writing one run directory at once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from codedance.config import check_bounds, not_resumed
from codedance.errors import SettingsError
from codedance.records import ImageStore, append_jsonl, load_trajectories, read_jsonl
from codedance.rollout import EpisodeSettings
from codedance.runs.batch import BatchProgress, arun_batch
from codedance.runs.rundir import RunDir, episode_key, run_settings
from codedance.sft_records import canonical_record, record_json, write_records
from codedance.synth.verify import Verdict, averify
from codedance.teacher import ExpertTeacher, TeacherConfig
from codedance.types import Task, Trajectory
from codedance.world import (
    DIFFICULTIES,
    Difficulty,
    generate,
    parse_task_id,
    task_cycle,
)
from codedance.world.base import task_id

if TYPE_CHECKING:  # pragma: no cover
    from codedance.sandbox.pool import SandboxPool

KIND = "synth"


class SynthError(SettingsError):
    """Settings synth cannot run with (the text says what to change)."""


@dataclass(frozen=True)
class SynthConfig:
    n: int = not_resumed(36, at_least=1)  # records wanted
    out: str = not_resumed("runs/synth")
    skills: tuple[str, ...] = ()  # () = every skill
    difficulties: tuple[str, ...] = tuple(d.value for d in DIFFICULTIES)
    seed: int = 0
    max_tasks: int = not_resumed(0, at_least=0)  # 0 = 2·n + 10
    teacher: TeacherConfig = TeacherConfig()  # its seed is replaced by ``seed``
    episode: EpisodeSettings = EpisodeSettings()
    concurrency: int = not_resumed(2, at_least=1)

    @property
    def task_limit(self) -> int:
        return self.max_tasks or 2 * self.n + 10


@dataclass(frozen=True)
class SynthResult:
    out_dir: str
    accepted: int
    tried: int
    rejected: tuple[tuple[str, int], ...]  # (reason, count), most frequent first
    failures: int
    ran: int  # tasks tried by this call (the rest were resumed)
    seconds: float
    mix: tuple[tuple[str, str, int], ...] = ()  # (skill, difficulty, records) in task order

    def mix_line(self) -> str:
        """``charts 2 (easy 1, hard 1), counting 2 (...)``: the records by skill and difficulty."""
        skills: dict[str, list[tuple[str, int]]] = {}
        for skill, difficulty, count in self.mix:
            skills.setdefault(skill, []).append((difficulty, count))
        return ", ".join(
            f"{skill} {sum(c for _, c in parts)} ({', '.join(f'{d} {c}' for d, c in parts)})"
            for skill, parts in skills.items()
        )


def check(config: SynthConfig) -> tuple[tuple[str, str], ...]:
    """The (skill, difficulty) cycle; raises `SynthError` / `WorldError` on impossible settings."""
    check_bounds(config)
    if config.task_limit < config.n:
        raise SynthError(
            f"--max-tasks {config.task_limit} cannot give {config.n} records "
            "(each task gives at most one); raise --max-tasks or lower --n"
        )
    # an unknown prompt profile raises here, before the run folder is written
    config.episode.episode_config()
    if not config.difficulties:
        raise SynthError("no difficulty selected")
    return tuple(
        (s, d.value) for s, d in task_cycle(list(config.skills) or None, config.difficulties)
    )


def task_at(combos: tuple[tuple[str, str], ...], seed: int, i: int) -> Task:
    """Task ``i`` of the run (the order of `codedance.world.task_set`)."""
    return generate(*combos[i % len(combos)], seed + i)


def key_at(combos: tuple[tuple[str, str], ...], seed: int, i: int) -> str:
    """The episode key of `task_at` without generating it."""
    skill, difficulty = combos[i % len(combos)]
    return episode_key(task_id(skill, Difficulty(difficulty), seed + i), 0)


async def _window(
    config: SynthConfig,
    tasks: list[Task],
    run: RunDir,
    pool: SandboxPool,
    advance: Callable[[bool], None],
) -> None:
    """Run the teacher on `tasks` (`codedance.runs.batch`); each trajectory is verified by
    re-execution before it is kept (the ``after`` hook), and its verdict logged."""
    episode_config = config.episode.episode_config()
    teacher = ExpertTeacher(replace(config.teacher, seed=config.seed))
    timeout = config.episode.exec_timeout_s

    async def verify(key: str, task: Task, trajectory: Trajectory) -> bool:
        verdict = await averify(task, trajectory, pool, episode_config, timeout)
        append_jsonl(run.path / "verdicts.jsonl", {"key": key, **asdict(verdict)})
        advance(verdict.accepted)
        return verdict.accepted

    await arun_batch(
        lambda task, k: teacher.policy(task, k),
        tasks,
        lambda images: pool.sandbox(images=images, timeout_s=timeout),
        run,
        episode_config,
        concurrency=config.concurrency,
        progress=False,
        after=verify,
        done=set(_verdicts(run.path)),
    )


def _verdicts(out: Path) -> dict[str, Verdict]:
    return {
        str(r["key"]): Verdict(r["reason"], r["detail"], r["crops"])
        for r in read_jsonl(out / "verdicts.jsonl")
    }


async def _run(
    config: SynthConfig,
    combos: tuple[tuple[str, str], ...],
    run: RunDir,
    advance: Callable[[bool], None],
) -> int:
    from codedance.sandbox.pool import SandboxPool

    pool = SandboxPool(max_running=config.concurrency)
    ran, attempted = 0, set(_verdicts(run.path))
    try:
        while True:
            done = _verdicts(run.path)
            missing = config.n - sum(v.accepted for v in done.values())
            seen = set(done) | attempted
            todo = [
                i for i in range(config.task_limit) if key_at(combos, config.seed, i) not in seen
            ]
            if missing <= 0 or not todo:
                return ran
            window = [task_at(combos, config.seed, i) for i in todo[:missing]]
            attempted |= {
                episode_key(t.id, 0) for t in window
            }  # a failed episode waits for the next run
            await _window(config, window, run, pool, advance)
            ran += len(window)
    finally:
        await pool.aclose()


def run_synth(config: SynthConfig, *, progress: bool = True) -> SynthResult:
    """Run (or resume) synth into ``config.out``; see the module docstring."""
    started = time.monotonic()
    combos = check(config)
    run = RunDir(config.out, KIND, run_settings(config))
    run.claim()
    bar = None
    if progress:
        have = sum(v.accepted for v in _verdicts(run.path).values())
        bar = BatchProgress(config.n, "accepted", done=min(have, config.n))
    try:
        ran = asyncio.run(
            _run(
                config,
                combos,
                run,
                (lambda ok: bar.done() if ok else None) if bar else (lambda ok: None),
            )
        )
    finally:
        if bar is not None:
            bar.stop()
    return _finish(config, combos, run.path, ran, time.monotonic() - started)


def _combo_rank(combos: tuple[tuple[str, str], ...], combo: tuple[str, str]) -> tuple[int, int]:
    skills = list(dict.fromkeys(s for s, _ in combos))
    levels = [d.value for d in DIFFICULTIES]
    return (
        skills.index(combo[0]) if combo[0] in skills else len(skills),
        levels.index(combo[1]) if combo[1] in levels else len(levels),
    )


def _finish(
    config: SynthConfig, combos: tuple[tuple[str, str], ...], out: Path, ran: int, seconds: float
) -> SynthResult:
    verdicts = _verdicts(out)
    accepted = {k for k, v in verdicts.items() if v.accepted}
    order = {key_at(combos, config.seed, i): i for i in range(config.task_limit)}
    pairs = {}
    for key, trajectory in load_trajectories(out):
        if key in accepted and key not in pairs:
            pairs[key] = trajectory
    keep = sorted(pairs, key=lambda k: order.get(k, len(order)))[: config.n]
    records = [canonical_record(pairs[k]) for k in keep]
    store = ImageStore(out / "images")
    mix: Counter[tuple[str, str]] = Counter()
    with open(out / "sft.jsonl", "w", encoding="utf-8") as f:
        for key, record in zip(keep, records):
            tid = pairs[key].task_id
            skill, difficulty, _ = parse_task_id(tid)
            mix[(skill, difficulty.value)] += 1
            meta = {"task_id": tid, "skill": skill, "difficulty": difficulty.value}
            f.write(
                json.dumps(
                    {"key": key, "meta": meta, **record_json(record, store, out)},
                    ensure_ascii=False,
                )
                + "\n"
            )
    write_records(records, out / "swift.jsonl", "swift")
    write_records(records, out / "trl.jsonl", "trl")
    rejected = Counter(v.reason for v in verdicts.values() if not v.accepted).most_common()
    failed = {str(r["key"]) for r in read_jsonl(out / "failures.jsonl")} - set(verdicts)
    result = SynthResult(
        str(out),
        len(keep),
        len(verdicts),
        tuple(rejected),
        len(failed),
        ran,
        seconds,
        tuple(
            (s, d, n)
            for (s, d), n in sorted(mix.items(), key=lambda kv: _combo_rank(combos, kv[0]))
        ),
    )
    (out / "summary.json").write_text(
        json.dumps({**asdict(result), "rejected": dict(rejected)}, indent=1)
    )
    return result
