"""Reading benchmark files from disk into `RawItem`s: VLMEvalKit TSV, Hugging Face exports, MATH-V.

Formats handled:

- **VLMEvalKit TSV** (``$LMUData/<Name>.tsv``): tab-separated, written by pandas (``"`` quoting,
  empty field = missing). The ``image`` column holds base64 image bytes, a Python list literal
  of several base64 strings, or (as VLMEvalKit allows) a short string naming the ``index`` of
  another row whose image is reused. Rows with only ``image_path`` read that file.
- **Hugging Face exports** on disk: a ``.parquet`` file (needs pyarrow), a ``.jsonl`` / ``.json``
  file, or a folder of them (read in name order). An ``image`` / ``images`` value may be the
  ``datasets`` Image struct ``{"bytes": ..., "path": ...}``, raw bytes, base64 text, or a path
  relative to the export's folder.
- **MATH-V repository layout**: ``<root>/data/test.jsonl`` or ``data/testmini.jsonl`` with an
  ``image`` path relative to ``<root>`` (e.g. ``images/4.jpg``).

Nothing is downloaded here. A missing file raises `DataNotFoundError` naming what was expected
and where to get it. Not handled: parquet without pyarrow (the error says to install it), TSV
files written with another quoting convention, image URLs (see ``codedance.eval.pixmo``).
`iter_tsv` / `iter_export` stream (parquet record batches, JSONL and TSV lines); `read_tsv` /
`read_export` are their lists.
"""

from __future__ import annotations

import ast
import base64
import binascii
import csv
import json
import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from codedance.errors import CodeDanceError, DataError, SettingsError


class DataNotFoundError(DataError, FileNotFoundError):
    """A benchmark file is missing; the message says which file and where to get it."""


@dataclass(frozen=True)
class RawItem:
    """One benchmark row as read: its text fields (missing ones absent) and its image bytes."""

    fields: Mapping[str, str]
    images: tuple[bytes, ...]

    def get(self, key: str, default: str = "") -> str:
        return self.fields.get(key, default)


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=False)
    except (binascii.Error, ValueError) as exc:
        raise DataError(f"image field is not base64 ({exc})") from exc


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):  # NaN from pandas
        return None
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bytes):
        return None
    return str(value)


def read_tsv(path: str | Path) -> list[RawItem]:
    """All rows of a VLMEvalKit TSV file (see the module docstring for the image column)."""
    return list(iter_tsv(path))


def _tsv_rows(path: Path) -> Iterator[dict[str, str]]:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            yield from csv.DictReader(f, delimiter="\t")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}: not a VLMEvalKit TSV file (not UTF-8 text at byte {exc.start})"
        ) from None
    except csv.Error as exc:
        raise DataError(f"{path}: not a VLMEvalKit TSV file ({exc})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def iter_tsv(path: str | Path) -> Iterator[RawItem]:
    """`read_tsv`, one row at a time (the file is read line by line). A VLMEvalKit image
    reference to another row costs one more pass, holding only the referenced rows' images."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"expected the VLMEvalKit TSV file {path}")
    csv.field_size_limit(sys.maxsize)
    refs = {
        r["image"].strip()
        for r in _tsv_rows(path)
        if "index" in r and 0 < len((r.get("image") or "").strip()) <= 64
    }
    by_index = {
        r["index"]: r.get("image", "") for r in _tsv_rows(path) if refs and r.get("index") in refs
    }
    for number, row in enumerate(_tsv_rows(path), start=2):
        images: tuple[bytes, ...] = ()
        raw = (row.get("image") or "").strip()
        try:
            if raw and len(raw) <= 64 and raw in by_index and len(by_index[raw]) > 64:
                raw = by_index[raw].strip()  # VLMEvalKit: a short image field names another row
            if raw.startswith("["):
                images = tuple(_b64(s) for s in ast.literal_eval(raw))
            elif raw:
                images = (_b64(raw),)
            elif row.get("image_path"):
                images = tuple((path.parent / p).read_bytes() for p in _listish(row["image_path"]))
        except (ValueError, SyntaxError, OSError) as exc:
            raise DataError(f"{path}, line {number}: cannot read the image ({exc})") from exc
        fields = {k: v for k, v in row.items() if k not in ("image",) and v not in ("", None)}
        yield RawItem(fields, images)


def _listish(text: str) -> list[str]:
    text = text.strip()
    if text.startswith("["):
        return [str(x) for x in ast.literal_eval(text)]
    return [text]


def _read_image(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DataError(f"image {path}: cannot read it ({exc.strerror or exc})") from None


def _image_bytes(value: object, base: Path) -> list[bytes]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [b for v in value for b in _image_bytes(v, base)]
    if isinstance(value, dict):
        if value.get("bytes"):
            data = value["bytes"]
            return [data if isinstance(data, bytes) else _b64(str(data))]
        if value.get("path"):
            return [_read_image(base / str(value["path"]))]
        return []
    if isinstance(value, (bytes, bytearray)):
        return [bytes(value)]
    text = str(value)
    candidate = base / text
    if len(text) < 1024 and candidate.is_file():
        return [_read_image(candidate)]
    if len(text) < 1024 and _tiny_encoded_image(text) is None:
        raise DataNotFoundError(f"image file {candidate} (named in the export) is missing")
    return [_b64(text)]


_IMAGE_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF8", b"RIFF", b"BM")


def _tiny_encoded_image(text: str) -> bytes | None:
    """The bytes of a short field that is base64 of an image (a few-pixel PNG is under 1,024
    characters), or None: then it is a file name."""
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return data if data.startswith(_IMAGE_SIGNATURES) else None


def _export_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".parquet", ".jsonl", ".json"))
        if files:
            return files
    raise DataNotFoundError(
        f"expected a Hugging Face export (.parquet, .jsonl or .json files) at {path}"
    )


def _records(file: Path) -> Iterator[dict]:
    """The records of one export file; a file that cannot be read is a `DataError` naming it."""
    try:
        yield from _file_records(file)
    except (OSError, ValueError) as exc:
        if isinstance(exc, CodeDanceError):
            raise
        raise DataError(f"{file}: cannot read its records ({exc})") from None


def _file_records(file: Path) -> Iterator[dict]:
    if file.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise SettingsError(f"reading {file} needs pyarrow: pip install pyarrow") from None
        # a few rows in memory at a time: no pre-buffering of whole row groups (image datasets
        # write row groups of ~100 rows, tens of MB), reads through a 1 MiB buffer
        parquet = pq.ParquetFile(file, pre_buffer=False, buffer_size=1 << 20)
        for batch in parquet.iter_batches(batch_size=16):
            yield from batch.to_pylist()
    elif file.suffix == ".jsonl":
        with open(file, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)
    else:
        data = json.loads(file.read_text(encoding="utf-8"))
        yield from (data if isinstance(data, list) else data.get("data", []))


def read_export(
    path: str | Path, image_keys: tuple[str, ...] = ("image", "images")
) -> list[RawItem]:
    """All records of a Hugging Face export (file or folder); images resolved as described above."""
    return list(iter_export(path, image_keys))


def iter_export(
    path: str | Path, image_keys: tuple[str, ...] = ("image", "images")
) -> Iterator[RawItem]:
    """`read_export`, one record at a time: parquet by record batches, JSONL by lines (a ``.json``
    file is one document, read whole)."""
    for file in _export_files(Path(path)):
        base = file.parent
        for record in _records(file):
            images = [b for k in image_keys if k in record for b in _image_bytes(record[k], base)]
            fields = {
                k: t
                for k, v in record.items()
                if k not in image_keys and (t := _text(v)) is not None
            }
            yield RawItem(fields, tuple(images))


def read_mathv(root: str | Path, split: str) -> list[RawItem]:
    """MATH-V's own layout: ``root/data/<split>.jsonl`` with images relative to ``root``."""
    root = Path(root)
    file = root / "data" / f"{split}.jsonl"
    if not file.is_file():
        raise DataNotFoundError(
            f"expected {file} (MATH-V layout: clone github.com/mathllm/MATH-V, "
            f"which has data/test.jsonl, data/testmini.jsonl and images/)"
        )
    items = []
    for record in _records(file):
        image = record.get("image")
        try:
            images = tuple(_image_bytes(image, root)) if image else ()
        except (OSError, DataError) as exc:
            raise DataNotFoundError(f"{file}: item {record.get('id')}: {exc}") from exc
        fields = {k: t for k, v in record.items() if k != "image" and (t := _text(v)) is not None}
        if isinstance(image, str) and len(image) < 1024 and _tiny_encoded_image(image) is None:
            fields["image_file"] = image  # named when the image cannot be decoded
        items.append(RawItem(fields, images))
    return items
