"""The loop both importers share: stream rows, convert each, append records and the ledger.

`run_import` reads the rows not yet in ``out/rows.jsonl`` (nor in the records file, which is
written first: a crash between the two appends never imports a row twice), converts each with
the importer's function, appends the records of every batch with one fsync and then the
batch's ledger lines, reports progress as rows done of the total, and ends by writing
``out/summary.json`` from the whole ledger (`codedance.data.ledger.summarize`).

A conversion raises `codedance.data.formats.Unmappable` for a row it cannot map (skipped with
that reason); any other exception is also counted, as ``unexpected <Type>``, so one odd row
never stops a 12 GB import, and the summary's examples name the rows to look at.

``out/import.json`` records which importer owns the folder; another importer is refused.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from codedance.data import ledger
from codedance.data.formats import Unmappable
from codedance.data.stream import InputError, iter_rows, total_rows

ROWS = "rows.jsonl"
SUMMARY = "summary.json"
MARKER = "import.json"


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    imported: int
    skipped: int


@dataclass(frozen=True)
class ImportResult:
    """Totals over every run into ``out`` (``ran``: rows converted by this run)."""

    out: str
    rows: int
    total: int
    imported: int
    skipped: dict[str, int]
    conventions: dict[str, int]
    ran: int
    seconds: float


Convert = Callable[[str, Path, dict], tuple[list[dict], tuple[str, ...]]]


def claim(out: Path, kind: str) -> None:
    """Create `out` for importer `kind`, or check that it already belongs to it."""
    out.mkdir(parents=True, exist_ok=True)
    marker = out / MARKER
    if marker.exists():
        owner = json.loads(marker.read_text()).get("kind")
        if owner != kind:
            raise InputError(f"{out} holds a {owner} import; choose another --out for {kind}")
    elif any(out.iterdir()):
        raise InputError(f"{out} is not empty and holds no import; choose an empty or new --out")
    else:
        marker.write_text(json.dumps({"kind": kind}) + "\n")


def run_import(
    files: Sequence[Path],
    columns: Sequence[str],
    out: Path,
    records_file: str,
    convert: Convert,
    *,
    progress: Callable[[Progress], None] | None = None,
    limit: int | None = None,
    batch_size: int = 16,
) -> ImportResult:
    """Import every row of `files` not done yet (see the module docstring)."""
    start = time.perf_counter()
    done = ledger.keys(out / ROWS) | ledger.keys(out / records_file)
    total = total_rows(files)
    counts = {"done": 0, "imported": 0, "skipped": 0}

    def skipped_as_done(n: int) -> None:
        counts["done"] += n

    def report() -> None:
        if progress is not None:
            progress(Progress(counts["done"], total, counts["imported"], counts["skipped"]))

    records: list[dict] = []
    lines: list[dict] = []

    def flush() -> None:
        ledger.append_lines(out / records_file, records)
        ledger.append_lines(out / ROWS, lines)
        records.clear()
        lines.clear()
        report()

    ran = 0
    for key, file, row in iter_rows(files, columns, done, on_skip=skipped_as_done):
        if limit is not None and ran >= limit:
            break
        try:
            new, conventions = convert(key, file, row)
            records.extend(new)
            lines.append(ledger.row(key, conventions=conventions))
            counts["imported"] += 1
        except Unmappable as exc:
            lines.append(ledger.row(key, exc.reason, exc.detail))
            counts["skipped"] += 1
        except Exception as exc:  # noqa: BLE001 - counted and reported, see the module docstring
            lines.append(ledger.row(key, f"unexpected {type(exc).__name__}", str(exc)[:300]))
            counts["skipped"] += 1
        ran += 1
        counts["done"] += 1
        if len(lines) >= batch_size:
            flush()
    flush()
    summary = ledger.summarize(out / ROWS)
    summary["total"] = total
    (out / SUMMARY).write_text(json.dumps(summary, indent=1) + "\n")
    return ImportResult(
        str(out),
        summary["rows"],
        total,
        summary["imported"],
        summary["skipped"],
        summary["conventions"],
        ran,
        time.perf_counter() - start,
    )
