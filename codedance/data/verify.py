"""Re-execute imported trajectories in the real sandbox and compare with what they recorded.

    from codedance.data.verify import verify_dir
    result = verify_dir("data/codedance-sft", concurrency=8)

For every trajectory of an import folder (``trajectories.jsonl``), one fresh sandbox from a
`SandboxPool` gets the trajectory's input images (the prompt's images, in order: the first is
``input_image`` / ``input_image.jpg``, as in the release) and runs each turn's code in order (a
last turn's code that got no feedback is not run: nothing was recorded to compare with). Each step's
result is compared with the feedback the trajectory recorded after that turn, read in the release
tool's wording (`recorded`):

- ``text_equal``: both succeeded, stdout equal (line ends and surrounding blank space ignored),
  no images on either side;
- ``images_equal``: as above, and the same number of images, each within ``tolerance`` (mean
  absolute difference per channel, 0-1; ours is resized to the recorded size when the aspect
  ratios agree within 2 %, since the release upscales tiny images before recording them);
- ``both_fail``: both failed (the error types are named in the detail, not compared);
- ``diverged``: one failed and the other did not, or stdout, image count or pixels differ;
- ``unreadable``: the recorded feedback is in no wording we know and its text is not our stdout.

A trajectory is ``faithful`` when every step is one of the first three, ``diverged`` at its
first diverged step (the later steps still run and are reported), ``unreadable``, ``no_code``,
or ``replay_error`` when the sandbox itself failed. Verdicts go to ``verify.jsonl`` as each
trajectory finishes (a rerun skips those keys) and the totals to ``verify_summary.json``.

Compared: success or failure, stdout, images. Not compared: stderr (library warnings differ by
version), error messages (tracebacks name different paths), durations. Input images are the
imported pixels (PNG); the release's RL tool saved its input as a resized JPEG, so code that
depends on exact input pixels can differ slightly there. Comparison of results with each other
follows `codedance.synth.verify`, which checks our own synthetic data field by field; released
data records only rendered text, hence this reading.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from codedance.data import ledger
from codedance.errors import DataError, SettingsError
from codedance.prompts.profiles import NO_OUTPUT_HINT, RELEASE_REMINDER
from codedance.records import ImageStore, trajectory_from_json
from codedance.rollout import EXEC_TIMEOUT_S
from codedance.types import SCHEMA_VERSION, ExecResult, Image, Trajectory

VERDICTS = "verify.jsonl"
SUMMARY = "verify_summary.json"
STEP_VERDICTS = ("text_equal", "images_equal", "both_fail", "diverged", "unreadable")
ROW_VERDICTS = ("faithful", "diverged", "unreadable", "no_code", "replay_error")
_MATCHES = {"text_equal", "images_equal", "both_fail"}
_ERROR = re.compile(r"--- Execution Error \(([^)]*)\) ---\n?(.*)", re.DOTALL)
_TYPE = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\b")
_SUCCESS_HEADERS = ("Code execution successful, output:\n", "Output:\n")
_LABEL = re.compile(r"Output image:\s*<image>")


@dataclass(frozen=True)
class Recorded:
    """A recorded tool response: ``ok`` (None when the wording is unknown), stdout, the error
    type when it failed, and its images."""

    ok: bool | None
    stdout: str
    error_type: str | None
    images: tuple[Image, ...]


def _body(text: str) -> str:
    for open_tag, close_tag in (
        ("<tool_response>", "</tool_response>"),
        ("<interpreter>", "</interpreter>"),
    ):
        if open_tag in text:
            inner = text.split(open_tag, 1)[1]
            return inner.split(close_tag, 1)[0]
    return text


def recorded(feedback: str, images: tuple[Image, ...]) -> Recorded:
    """Read one recorded feedback in the release tool's wording (module docstring).

    >>> error = "--- Execution Error (Error) ---\\nValueError: x"
    >>> recorded(f"<tool_response>\\n{error}\\n</tool_response>", ()).error_type
    'ValueError'
    """
    body = _body(feedback).replace(RELEASE_REMINDER.strip(), "")
    body = _LABEL.sub("", body).replace("<image>", "").strip()
    error = _ERROR.search(body)
    if error:
        kind, message = error.group(1).strip(), error.group(2)
        found = _TYPE.match(message.strip())
        if kind in ("", "Error") and found:
            kind = found.group(1)
        before = body[: error.start()].strip()
        stdout = (
            before.split("Output before error:\n", 1)[1]
            if "Output before error:\n" in before
            else ""
        )
        return Recorded(False, stdout.strip(), kind or "Error", images)
    if body.startswith("Code execution timed out"):
        return Recorded(False, "", "TimeoutError", images)
    if body.startswith(NO_OUTPUT_HINT[:40]) or (not body and images):
        return Recorded(True, "", None, images)
    for header in _SUCCESS_HEADERS:
        if body.startswith(header):
            stdout = body[len(header) :].split("\nStderr output:", 1)[0]
            return Recorded(True, stdout.strip(), None, images)
    if body.startswith("Stderr output:"):
        return Recorded(True, "", None, images)
    return Recorded(None, body, None, images)


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").strip().split("\n"))


def image_difference(ours: Image, theirs: Image) -> float | None:
    """Mean absolute difference (0-1) of the RGB pixels, ours resized to theirs when the aspect
    ratios agree within 2 %; None when they do not."""
    import numpy as np
    from PIL import Image as PILImage

    a, b = ours.to_pil().convert("RGB"), theirs.to_pil().convert("RGB")
    if a.size != b.size:
        if abs(a.width * b.height - b.width * a.height) > 0.02 * a.height * b.width:
            return None
        a = a.resize(b.size, PILImage.Resampling.BILINEAR)
    return float(np.abs(np.asarray(a, np.int16) - np.asarray(b, np.int16)).mean() / 255.0)


def _clip(text: str, n: int = 80) -> str:
    return repr(text if len(text) <= n else text[:n] + "…")


def compare(ours: ExecResult, rec: Recorded, tolerance: float) -> tuple[str, str]:
    """(step verdict, detail) for one re-executed step against its recorded feedback."""
    if rec.ok is False and not ours.ok:
        theirs = rec.error_type or "error"
        mine = ours.error.type if ours.error else ours.status.value
        return "both_fail", f"recorded {theirs}, here {mine}"
    if rec.ok is not None and rec.ok != ours.ok:
        if rec.ok:
            why = f"{ours.error.type}: {ours.error.message}" if ours.error else ours.status.value
            return "diverged", f"status: recorded success, here {why[:160]}"
        return "diverged", f"status: recorded {rec.error_type}, here success"
    if _norm(ours.stdout) != _norm(rec.stdout):
        if rec.ok is None:
            return "unreadable", f"unknown wording {_clip(rec.stdout)}"
        return (
            "diverged",
            f"stdout: recorded {_clip(_norm(rec.stdout))}, here {_clip(_norm(ours.stdout))}",
        )
    if len(ours.images) != len(rec.images):
        return "diverged", f"image count: recorded {len(rec.images)}, here {len(ours.images)}"
    worst = 0.0
    for k, (mine, theirs) in enumerate(zip(ours.images, rec.images, strict=True)):
        diff = image_difference(mine, theirs)
        if diff is None:
            return "diverged", f"image size: image {k} recorded {theirs.size}, here {mine.size}"
        if diff > tolerance:
            return (
                "diverged",
                f"image pixels: image {k} differs by {diff:.3f} (tolerance {tolerance})",
            )
        worst = max(worst, diff)
    if ours.images:
        return "images_equal", f"largest difference {worst:.4f}"
    return "text_equal", ""


@dataclass(frozen=True)
class VerifyResult:
    """Totals over every run (``ran``: trajectories verified by this run)."""

    rows: dict[str, int]
    steps: dict[str, int]
    divergence: dict[str, int]
    ran: int
    seconds: float


def _row_verdict(steps: list[dict]) -> tuple[str, int | None, str]:
    if not steps:
        return "no_code", None, ""
    for step in steps:
        if step["verdict"] == "diverged":
            return "diverged", step["turn"], step["detail"]
    if any(s["verdict"] == "unreadable" for s in steps):
        return "unreadable", None, ""
    return "faithful", None, ""


async def averify_trajectory(
    trajectory: Trajectory, pool, *, tolerance: float = 0.02, timeout_s: float = EXEC_TIMEOUT_S
) -> dict:
    """The verdict record of one trajectory (module docstring); `pool` is a `SandboxPool`."""
    inputs = [image for message in trajectory.prompt for image in message.images]
    code_turns = [
        (i, t)
        for i, t in enumerate(trajectory.turns)
        if t.code is not None and (t.feedback_text or t.feedback_images)
    ]
    steps: list[dict] = []
    if code_turns:
        try:
            sandbox = await pool.asandbox(images=inputs, timeout_s=timeout_s)
            try:
                for i, turn in code_turns:
                    result = await sandbox.arun(turn.code)
                    verdict, detail = compare(
                        result, recorded(turn.feedback_text, turn.feedback_images), tolerance
                    )
                    steps.append({"turn": i, "verdict": verdict, "detail": detail})
            finally:
                await asyncio.to_thread(sandbox.close)
        except Exception as exc:  # noqa: BLE001 - the sandbox's own failure, not the snippet's
            return {
                "verdict": "replay_error",
                "turn": None,
                "detail": f"{type(exc).__name__}: {exc}",
                "steps": steps,
            }
    verdict, turn, detail = _row_verdict(steps)
    return {"verdict": verdict, "turn": turn, "detail": detail, "steps": steps}


def summarize(out: Path) -> VerifyResult:
    """Totals of ``out/verify.jsonl``, also written to ``verify_summary.json``."""
    latest = {r["key"]: r for r in ledger.iter_jsonl(out / VERDICTS)}
    rows: Counter[str] = Counter(r["verdict"] for r in latest.values())
    steps: Counter[str] = Counter(s["verdict"] for r in latest.values() for s in r["steps"])
    divergence: Counter[str] = Counter(
        s["detail"].split(":", 1)[0]
        for r in latest.values()
        for s in r["steps"]
        if s["verdict"] == "diverged"
    )
    summary = {
        "rows": dict(rows.most_common()),
        "steps": dict(steps.most_common()),
        "divergence": dict(divergence.most_common()),
    }
    (out / SUMMARY).write_text(json.dumps(summary, indent=1) + "\n")
    return VerifyResult(summary["rows"], summary["steps"], summary["divergence"], 0, 0.0)


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def check_options(
    *,
    concurrency: int = 2,
    tolerance: float = 0.02,
    timeout_s: float = 15.0,
    limit: int | None = None,
) -> None:
    """Refuse settings that cannot work (`SettingsError` naming the option) before a sandbox
    starts: no concurrency would wait forever for a free slot, a negative one cannot make one."""
    problems = []
    if concurrency < 1:
        problems.append(f"--concurrency must be at least 1, got {concurrency}")
    if not 0 <= tolerance <= 1:
        problems.append(f"--tolerance must be between 0 and 1, got {tolerance}")
    if timeout_s <= 0:
        problems.append(f"--timeout-s must be above 0, got {timeout_s}")
    if limit is not None and limit < 1:
        problems.append(f"--limit must be at least 1, got {limit}")
    if problems:
        raise SettingsError("; ".join(problems))


RECORD_FIELDS = ("key", "task_id", "turns", "stop_reason", "answer", "metadata", "prompt")


def check_records(records: Path) -> None:
    """Every record of ``trajectories.jsonl`` is one this version reads, before any sandbox starts;
    else `DataError` naming the file and line. A line that is not JSON at all is passed over, as
    `ledger.iter_jsonl` does (the torn last line of an interrupted import)."""
    with open(records, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            missing = [
                name for name in RECORD_FIELDS if not isinstance(record, dict) or name not in record
            ]
            if missing or record.get("schema") != SCHEMA_VERSION:
                what = (
                    f"no {', '.join(missing)}"
                    if missing
                    else f"schema {record.get('schema')!r}, not {SCHEMA_VERSION}"
                )
                raise DataError(
                    f"{records}, line {number}: not a trajectory record ({what}); "
                    "import the data again with `codedance data import`"
                )


async def averify_dir(
    out: str | Path,
    *,
    concurrency: int = 2,
    tolerance: float = 0.02,
    timeout_s: float = EXEC_TIMEOUT_S,
    limit: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyResult:
    """Verify every trajectory of the import folder `out` not verified yet (module docstring);
    at most `concurrency` trajectories (and sandbox steps) at once."""
    from codedance.sandbox import SandboxPool

    check_options(concurrency=concurrency, tolerance=tolerance, timeout_s=timeout_s, limit=limit)
    out = Path(out)
    records = out / "trajectories.jsonl"
    if not records.exists():
        raise DataError(
            f"no {records}: import with "
            f"`codedance data import codedance-sft PATH --out {out}` first"
        )
    check_records(records)
    start = time.perf_counter()
    done = ledger.keys(out / VERDICTS)
    total = _count_lines(records)
    store = ImageStore(out / "images")
    gate = asyncio.Semaphore(concurrency)
    finished = len(done)
    ran = 0

    async def one(key: str, trajectory: Trajectory, pool) -> None:  # type: ignore[no-untyped-def]
        nonlocal finished
        try:
            record = await averify_trajectory(
                trajectory, pool, tolerance=tolerance, timeout_s=timeout_s
            )
            ledger.append_lines(out / VERDICTS, [{"key": key, **record}])
        finally:
            gate.release()
        finished += 1
        if progress is not None:
            progress(finished, total)

    async with SandboxPool(max_running=concurrency) as pool:
        tasks = []
        for record in ledger.iter_jsonl(records):
            if record["key"] in done:
                continue
            if limit is not None and ran >= limit:
                break
            await gate.acquire()
            tasks.append(
                asyncio.create_task(one(record["key"], trajectory_from_json(record, store), pool))
            )
            ran += 1
        await asyncio.gather(*tasks)
    result = summarize(out)
    return VerifyResult(
        result.rows, result.steps, result.divergence, ran, time.perf_counter() - start
    )


def verify_dir(out: str | Path, **options) -> VerifyResult:
    """`averify_dir` from synchronous code."""
    return asyncio.run(averify_dir(out, **options))
