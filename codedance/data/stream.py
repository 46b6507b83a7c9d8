"""Rows of parquet files in bounded memory, each with a stable key, skipping keys already done.

`parquet_files` expands files and folders (``*.parquet`` under a folder, sorted); `iter_rows`
reads one row group at a time in record batches of ``batch_size`` rows (pyarrow's
``ParquetFile.iter_batches``, without pre-buffering the whole row group), so memory is bounded by
a batch, not by a file or a 12 GB dataset. A row's key is ``<file name>#<row number in the
file>``; a row group whose keys are all done is not read at all.

Not handled: two input files with the same name (refused: keys would collide).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Sequence
from pathlib import Path

from codedance.errors import SettingsError
from codedance.messages import shorten


class InputError(SettingsError):
    """Bad input paths or columns; the message says what to pass instead."""


def parquet_files(paths: Sequence[str | Path]) -> list[Path]:
    """The parquet files named by `paths` (files, or folders searched recursively)."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise InputError(
            "reading parquet needs pyarrow: pip install pyarrow (it is in the dev, eval and "
            "train extras)"
        ) from None
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(path.rglob("*.parquet"))
            if not found:
                raise InputError(
                    f"no .parquet files under {path}: pass the dataset's data/ folder "
                    "or its train-*.parquet files"
                )
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"{path} does not exist: pass parquet files or a folder holding them")
    names = [f.name for f in files]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(
            f"two input files are named {dupes[0]}: row keys use file names, so pass each file once"
        )
    return files


def check_columns(files: Sequence[Path], required: Sequence[str]) -> None:
    """Raise `InputError` naming the first file that lacks one of `required`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for file in files:
        try:
            names = set(pq.read_schema(file).names)
        except (
            pa.ArrowException,
            OSError,
        ) as exc:  # not parquet, or cut short (an interrupted download)
            raise InputError(
                f"{file} is not a readable parquet file ({shorten(str(exc), 120)}); "
                "a truncated download?"
            ) from None
        missing = [c for c in required if c not in names]
        if missing:
            raise InputError(
                f"{file} has no column {missing[0]!r} (columns: {sorted(names)}); "
                "is it the right dataset?"
            )


def total_rows(files: Sequence[Path]) -> int:
    """Rows in all `files`, from their footers (nothing else is read)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def iter_rows(
    files: Sequence[Path],
    columns: Sequence[str],
    done: Container[str] = frozenset(),
    batch_size: int = 8,
    on_skip: Callable[[int], None] | None = None,
) -> Iterator[tuple[str, Path, dict]]:
    """(key, file, row as a dict of `columns`) for every row whose key is not in `done`;
    `on_skip(n)` is told how many rows were skipped as done."""
    import pyarrow.parquet as pq

    for file in files:
        reader = pq.ParquetFile(file, pre_buffer=False, buffer_size=1 << 20)
        start = 0
        for group in range(reader.num_row_groups):
            n = reader.metadata.row_group(group).num_rows
            keys = [f"{file.name}#{start + i}" for i in range(n)]
            if all(k in done for k in keys):
                if on_skip is not None:
                    on_skip(n)
                start += n
                continue
            offset = start
            for batch in reader.iter_batches(
                batch_size=batch_size, row_groups=[group], columns=list(columns), use_threads=False
            ):
                for i, row in enumerate(batch.to_pylist()):
                    key = f"{file.name}#{offset + i}"
                    if key in done:
                        if on_skip is not None:
                            on_skip(1)
                        continue
                    yield key, file, row
                offset += batch.num_rows
            start += n
