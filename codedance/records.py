"""Trajectories to and from JSON lines, with images stored once by content hash.

A record is one JSON object per line: ``schema`` (`SCHEMA_VERSION`), ``key`` (the batch
runner's ``task_id#rollout``), and the trajectory's fields. Every image becomes
``{"sha256", "origin", "width", "height"}`` and its PNG bytes are written once to
``images/<sha256>.png`` beside the JSONL (`ImageStore`); loading reads them back, so a loaded
trajectory equals the saved one.

Records written before the turn flag was renamed (``injected_turn_limit``, the same meaning) are
read as ``feedback_has_turn_limit``. Not handled: records of another schema version are refused,
not migrated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from codedance.types import (
    SCHEMA_VERSION,
    ExecError,
    ExecResult,
    ExecStatus,
    FormatVerdict,
    Image,
    Message,
    StopReason,
    Trajectory,
    Turn,
)


class ImageStore:
    """PNG files named by their sha256 under `root`; writes are atomic and idempotent."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def put(self, image: Image) -> dict[str, object]:
        digest = image.sha256
        path = self.root / f"{digest}.png"
        if not path.exists():
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(image.png)
            os.replace(tmp, path)
        return {
            "sha256": digest,
            "origin": image.origin,
            "width": image.width,
            "height": image.height,
        }

    def get(self, ref: dict) -> Image:
        png = (self.root / f"{ref['sha256']}.png").read_bytes()
        return Image(png=png, origin=ref["origin"], width=ref["width"], height=ref["height"])


def _result_json(r: ExecResult, store: ImageStore) -> dict[str, object]:
    error = None
    if r.error is not None:
        e = r.error
        error = {
            "type": e.type,
            "message": e.message,
            "traceback": e.traceback,
            "frames": [list(f) for f in e.frames],
        }
    return {
        "status": r.status.value,
        "stdout": r.stdout,
        "stderr": r.stderr,
        "error": error,
        "images": [store.put(i) for i in r.images],
        "duration_s": r.duration_s,
        "rolled_back": r.rolled_back,
        "notes": list(r.notes),
        "executed_nothing": r.executed_nothing,
    }


def _result(d: dict, store: ImageStore) -> ExecResult:
    e = d["error"]
    error = (
        None
        if e is None
        else ExecError(
            e["type"], e["message"], e["traceback"], tuple((int(n), s) for n, s in e["frames"])
        )
    )
    return ExecResult(
        status=ExecStatus(d["status"]),
        stdout=d["stdout"],
        stderr=d["stderr"],
        error=error,
        images=tuple(store.get(i) for i in d["images"]),
        duration_s=d["duration_s"],
        rolled_back=d["rolled_back"],
        notes=tuple(d["notes"]),
        executed_nothing=d["executed_nothing"],
    )


def _message_json(m: Message, store: ImageStore) -> dict[str, object]:
    return {
        "role": m.role,
        "parts": [p if isinstance(p, str) else {"image": store.put(p)} for p in m.parts],
    }


def _message(d: dict, store: ImageStore) -> Message:
    return Message(
        d["role"], tuple(p if isinstance(p, str) else store.get(p["image"]) for p in d["parts"])
    )


def _turn_json(t: Turn, store: ImageStore) -> dict[str, object]:
    return {
        "text": t.text,
        "think": t.think,
        "code": t.code,
        "answer": t.answer,
        "verdict": {"ok": t.verdict.ok, "reasons": list(t.verdict.reasons)},
        "result": None if t.result is None else _result_json(t.result, store),
        "token_ids": list(t.token_ids),
        "logprobs": list(t.logprobs),
        "feedback_text": t.feedback_text,
        "feedback_images": [store.put(i) for i in t.feedback_images],
        "feedback_has_turn_limit": t.feedback_has_turn_limit,
    }


def _turn(d: dict, store: ImageStore) -> Turn:
    return Turn(
        text=d["text"],
        think=d["think"],
        code=d["code"],
        answer=d["answer"],
        verdict=FormatVerdict(d["verdict"]["ok"], tuple(d["verdict"]["reasons"])),
        result=None if d["result"] is None else _result(d["result"], store),
        token_ids=tuple(d["token_ids"]),
        logprobs=tuple(d["logprobs"]),
        feedback_text=d["feedback_text"],
        feedback_images=tuple(store.get(i) for i in d["feedback_images"]),
        feedback_has_turn_limit=d.get(
            "feedback_has_turn_limit", d.get("injected_turn_limit", False)
        ),
    )


def trajectory_json(trajectory: Trajectory, store: ImageStore, key: str = "") -> dict[str, object]:
    """The record for `trajectory` (its images go to `store`)."""
    return {
        "schema": SCHEMA_VERSION,
        "key": key,
        "task_id": trajectory.task_id,
        "stop_reason": trajectory.stop_reason.value,
        "answer": trajectory.answer,
        "metadata": [list(kv) for kv in trajectory.metadata],
        "prompt": [_message_json(m, store) for m in trajectory.prompt],
        "turns": [_turn_json(t, store) for t in trajectory.turns],
    }


def trajectory_from_json(record: dict, store: ImageStore) -> Trajectory:
    if record.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"record schema {record.get('schema')!r}, expected {SCHEMA_VERSION}")
    return Trajectory(
        task_id=record["task_id"],
        turns=tuple(_turn(t, store) for t in record["turns"]),
        stop_reason=StopReason(record["stop_reason"]),
        answer=record["answer"],
        metadata=tuple((k, v) for k, v in record["metadata"]),
        prompt=tuple(_message(m, store) for m in record["prompt"]),
    )


def append_jsonl(path: str | Path, record: dict) -> None:
    """Append one record as a single line, flushed and fsynced (a crash loses no finished line)."""
    line = json.dumps(record, ensure_ascii=False) + "\n"
    with open(path, "a+b") as f:
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":  # a torn line from a crash: end it so this record stays whole
                line = "\n" + line
        f.write(line.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: str | Path) -> list[dict]:
    """All complete records in `path`; a torn last line (a crash mid-write) is skipped."""
    if not Path(path).exists():
        return []
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def load_trajectories(out_dir: str | Path) -> list[tuple[str, Trajectory]]:
    """(key, trajectory) pairs of ``out_dir/trajectories.jsonl`` with images from
    ``out_dir/images`` (none, and nothing written, where the folder holds no trajectories)."""
    records = read_jsonl(Path(out_dir) / "trajectories.jsonl")
    if not records:
        return []
    store = ImageStore(Path(out_dir) / "images")
    return [(r["key"], trajectory_from_json(r, store)) for r in records]
