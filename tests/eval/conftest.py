"""Fixture benchmarks in the real on-disk formats, built by the tests themselves.

VLMEvalKit TSV files are written with pandas' conventions (tab-separated, ``"`` quoting, base64
images in ``image``), exactly as ``vlmeval.smp.dump`` writes them; Hugging Face exports as
parquet (the ``datasets`` Image struct ``{"bytes", "path"}``) or JSONL with image files.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from pathlib import Path

import pytest
from PIL import Image as PILImage

MATHV = Path("/work/shared/data/mathvision-testmini")


def png_bytes(
    color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (32, 24)
) -> bytes:
    buffer = io.BytesIO()
    PILImage.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def jpeg_bytes(color: tuple[int, int, int] = (30, 200, 30)) -> bytes:
    buffer = io.BytesIO()
    PILImage.new("RGB", (40, 30), color).save(buffer, format="JPEG")
    return buffer.getvalue()


def write_tsv(path: Path, rows: list[dict]) -> Path:
    """A VLMEvalKit TSV: rows' ``image`` values are bytes (base64-encoded here) or str as given."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, columns, delimiter="\t")
        writer.writeheader()
        for r in rows:
            writer.writerow(
                {
                    k: base64.b64encode(v).decode() if isinstance(v, bytes) else v
                    for k, v in r.items()
                }
            )
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def fx():
    """The helpers above, for tests (importing conftest is awkward under importlib mode)."""

    class Helpers:
        pass

    h = Helpers()
    for name, fn in (
        ("png", png_bytes),
        ("jpeg", jpeg_bytes),
        ("tsv", write_tsv),
        ("parquet", write_parquet),
        ("jsonl", write_jsonl),
    ):
        setattr(h, name, staticmethod(fn))
    h.mathv = MATHV
    return h


@pytest.fixture
def mathv_root():
    if not (MATHV / "data" / "testmini.jsonl").is_file():
        pytest.skip(f"{MATHV} (shared MathVision testmini) is not present")
    return MATHV
