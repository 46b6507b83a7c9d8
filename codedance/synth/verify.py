"""Verifying one teacher trajectory before it becomes SFT data.

`averify(task, trajectory, pool, config)` accepts a trajectory only when, in this order:

1. it ended with an answer (``not_answered`` otherwise) and every turn follows the format
   (``bad_format``);
2. the answer is graded correct against the task's gold answer (``wrong_answer``);
3. re-running every snippet that ran, in order, in a fresh sandbox holding the same input
   images reproduces each recorded result exactly: status, stdout, stderr, error type, message
   and frames, output images (by content hash), the sandbox's notes (``output_mismatch``);
4. an instrumented copy of the snippets, run in another fresh sandbox, shows every crop of an
   input image inside that image and non-degenerate (``box_outside``, ``box_degenerate``;
   `codedance.synth.boxes`).

A sandbox that fails itself during a check gives ``replay_error``. The first failed check is the
reason. Not handled: judging whether a snippet's *idea* is sound (a crop in the wrong place that
is inside the image passes; the teacher's later turns say why it was wrong).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from codedance.grading import grade_trajectory
from codedance.rollout import EXEC_TIMEOUT_S, EpisodeConfig
from codedance.synth.boxes import box_problem, instrument, parse_boxes, prelude
from codedance.types import ExecResult, StopReason, Task, Trajectory

if TYPE_CHECKING:  # pragma: no cover
    from codedance.sandbox.pool import SandboxPool

REASONS = (
    "not_answered",
    "bad_format",
    "wrong_answer",
    "output_mismatch",
    "box_outside",
    "box_degenerate",
    "replay_error",
)


@dataclass(frozen=True)
class Verdict:
    """``reason`` is '' for an accepted trajectory, else one of `REASONS`; ``crops`` counts the
    distinct crop boxes checked."""

    reason: str = ""
    detail: str = ""
    crops: int = 0

    @property
    def accepted(self) -> bool:
        return not self.reason


def observable(r: ExecResult) -> tuple[object, ...]:
    """What a re-run must reproduce of a result (everything but its duration)."""
    error = None if r.error is None else (r.error.type, r.error.message, r.error.frames)
    return (
        r.status,
        r.stdout,
        r.stderr,
        error,
        tuple(i.sha256 for i in r.images),
        r.notes,
        r.rolled_back,
        r.executed_nothing,
    )


FIELDS = (
    "status",
    "stdout",
    "stderr",
    "error",
    "images",
    "notes",
    "rolled_back",
    "executed_nothing",
)


def _mismatch(index: int, now: ExecResult, then: ExecResult) -> str:
    fields = [f for f, a, b in zip(FIELDS, observable(now), observable(then)) if a != b]
    return f"turn {index}: {', '.join(fields)} differ on re-run"


def static_problem(task: Task, trajectory: Trajectory) -> Verdict | None:
    """Checks 1 and 2 (no sandbox)."""
    if trajectory.stop_reason is not StopReason.ANSWERED:
        return Verdict("not_answered", f"stopped: {trajectory.stop_reason.value}")
    for i, turn in enumerate(trajectory.turns):
        if not turn.verdict.ok:
            return Verdict("bad_format", f"turn {i}: {', '.join(turn.verdict.reasons)}")
    grade = grade_trajectory(trajectory=trajectory, task=task)
    if not grade.correct:
        return Verdict("wrong_answer", f"answered {trajectory.answer!r}, gold {task.answer!r}")
    return None


def recorded_steps(trajectory: Trajectory) -> list[tuple[int, str, ExecResult]]:
    """(turn index, code, recorded result) of every turn whose code ran."""
    return [
        (i, t.code, t.result)
        for i, t in enumerate(trajectory.turns)
        if t.code is not None and t.result is not None
    ]


async def replay_mismatch(pool: SandboxPool, images, steps, exec_timeout_s: float) -> str | None:
    """Re-run ``steps`` in a fresh sandbox on ``images``; the first difference from what was
    recorded, described, or None when every result is reproduced."""
    sandbox = await pool.asandbox(images=images, timeout_s=exec_timeout_s)
    try:
        for i, code, recorded in steps:
            now = await sandbox.arun(code)
            if observable(now) != observable(recorded):
                return _mismatch(i, now, recorded)
    finally:
        await asyncio.to_thread(sandbox.close)
    return None


async def averify(
    task: Task,
    trajectory: Trajectory,
    pool: SandboxPool,
    config: EpisodeConfig,
    exec_timeout_s: float = EXEC_TIMEOUT_S,
) -> Verdict:
    """The verdict on `trajectory` (see the module docstring)."""
    problem = static_problem(task, trajectory)
    if problem is not None:
        return problem
    images = config.images_of(task)
    steps = recorded_steps(trajectory)
    sizes = tuple(i.size for i in images)
    try:
        mismatch = await replay_mismatch(pool, images, steps, exec_timeout_s)
        if mismatch is not None:
            return Verdict("output_mismatch", mismatch)
        sandbox = await pool.asandbox(images=images, timeout_s=exec_timeout_s)
        try:
            setup = await sandbox.arun(prelude(sizes))
            if not setup.ok:
                return Verdict("replay_error", f"box recorder did not start: {setup.status.value}")
            boxes = [
                b
                for _, code, _ in steps
                for b in parse_boxes((await sandbox.arun(instrument(code))).stderr)
            ]
        finally:
            await asyncio.to_thread(sandbox.close)
    except Exception as exc:  # noqa: BLE001  (the sandbox's own failure, not the snippet's)
        return Verdict("replay_error", f"{type(exc).__name__}: {exc}")
    distinct = sorted(set(boxes), key=lambda b: (b.x0, b.y0, b.x1, b.y1, b.width, b.height))
    for box in distinct:
        bad = box_problem(box)
        if bad is not None:
            return Verdict(bad[0], bad[1], len(distinct))
    return Verdict(crops=len(distinct))
