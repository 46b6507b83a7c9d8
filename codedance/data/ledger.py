"""The per-row log of an import or a verification, and batched, crash-safe JSONL appends.

Every input row gets one line in ``rows.jsonl``: ``{"key", "status": "imported" | "skipped",
"reason", "detail", "conventions"}``. A rerun reads the keys back and skips those rows, so an
interrupted import resumes; the summary is computed from the whole log, so it covers every run.

`append_lines` writes many records with one fsync (a row-at-a-time fsync costs minutes over
34k rows); a torn last line from a crash is ended first, as `codedance.records.append_jsonl`
does for single records, and `codedance.records.read_jsonl` skips it.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path


def append_lines(path: str | Path, records: Iterable[dict]) -> None:
    """Append `records` as JSON lines, flushed and fsynced once."""
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if not lines:
        return
    with open(path, "a+b") as f:
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                lines = "\n" + lines
        f.write(lines.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())


def iter_jsonl(path: str | Path) -> Iterator[dict]:
    """Complete records of `path`, one line at a time (a torn line is skipped)."""
    if not Path(path).exists():
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def keys(path: str | Path) -> set[str]:
    """The ``key`` of every record in `path`."""
    return {r["key"] for r in iter_jsonl(path) if "key" in r}


def row(key: str, reason: str = "", detail: str = "", conventions: Iterable[str] = ()) -> dict:
    """One ledger line: imported when `reason` is empty, else skipped for `reason`."""
    return {
        "key": key,
        "status": "skipped" if reason else "imported",
        "reason": reason,
        "detail": detail,
        "conventions": sorted(conventions),
    }


def summarize(path: str | Path) -> dict:
    """Counts of the ledger: rows, imported, skipped by reason, conventions met, a few examples
    per reason (key and detail)."""
    imported = 0
    reasons: Counter[str] = Counter()
    conventions: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    latest: dict[str, dict] = {}
    for record in iter_jsonl(path):
        latest[record["key"]] = record
    for record in latest.values():
        conventions.update(record.get("conventions", ()))
        if record["status"] == "imported":
            imported += 1
            continue
        reasons[record["reason"]] += 1
        shown = examples.setdefault(record["reason"], [])
        if len(shown) < 3:
            shown.append(
                f"{record['key']}: {record['detail']}" if record["detail"] else record["key"]
            )
    return {
        "rows": len(latest),
        "imported": imported,
        "skipped": dict(reasons.most_common()),
        "conventions": dict(conventions.most_common()),
        "examples": examples,
    }
