"""Source adapters: turn a dataset into `Task`s with images, then deduplicate them.

Kinds (one mapping per source in the YAML's ``sources`` list; ``name`` labels it in the report,
``recipe`` picks the atomic recipe: ``crop`` (default), ``annotate`` (a drawing turn, then
crops), ``draw`` (points, lines, boxes, masks, zooms: `codedance.curate.drawing`), ``math`` or
``none``):

- ``world``: the synthetic task world (``skills``, ``difficulties``, ``n``, ``seed``).
- ``benchmark``: a benchmark the eval harness knows (``name`` as in ``codedance eval list``,
  ``path`` to its VLMEvalKit TSV, Hugging Face export or MATH-V folder, ``limit``), converted by
  the eval loaders (`codedance.eval.loaders`), so answer kinds and choices are the benchmark's.
- ``table``: any JSONL / JSON / parquet / TSV file or folder of them with an image column and
  question / answer columns (names given by ``question``, ``answer``, ``image``, ``id``;
  ``answer_kind`` one of `codedance.types.AnswerKind`'s values). Images may be bytes, base64
  text, the Hugging Face ``{bytes, path}`` struct or a path relative to the file
  (`codedance.eval.sources` reads them); any format Pillow decodes is stored as PNG.

More kinds: `register_source(kind, fn)` with ``fn(spec, base) -> Iterable[Task]`` (``base`` is the
YAML's folder for relative paths).

`iter_items` streams every source (table files by parquet record batches or JSONL / TSV lines, the
world and benchmarks task by task) and keeps the first task per (image hashes, normalised
question); the item key is a short hash of that pair, so it is stable across runs and resumes by
key. A ``.json`` table (one document) and the benchmark loaders read their file whole. Not handled:
near-duplicate images (perceptual hashing), videos.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from codedance.curate.config import CurateError
from codedance.types import AnswerKind, Task

SourceFn = Callable[[dict[str, Any], Path], Iterable[Task]]


@dataclass(frozen=True)
class Item:
    """A task to curate: ``key`` (stable hash), the source's name and its atomic recipe."""

    key: str
    task: Task
    source: str
    recipe: str


def _world(spec: dict[str, Any], base: Path) -> Iterable[Task]:
    from codedance.world import task_set

    return task_set(
        int(spec.get("n", 12)),
        int(spec.get("seed", 0)),
        spec.get("skills"),
        spec.get("difficulties") or ("easy", "medium", "hard"),
    )


def _benchmark(spec: dict[str, Any], base: Path) -> Iterable[Task]:
    from codedance.eval.loaders import load_benchmark
    from codedance.eval.spec import get_spec

    if "name" not in spec or "path" not in spec:
        raise CurateError("a benchmark source needs 'name' (see `codedance eval list`) and 'path'")
    limit = spec.get("limit")
    return load_benchmark(
        get_spec(str(spec["name"])),
        path=base / str(spec["path"]),
        limit=None if limit is None else int(limit),
    )


def _table(spec: dict[str, Any], base: Path) -> Iterator[Task]:
    from codedance.data.formats import Unmappable, to_image
    from codedance.eval.sources import DataNotFoundError, iter_export, iter_tsv

    if "path" not in spec:
        raise CurateError(
            "a table source needs 'path' (a JSONL, JSON, parquet or TSV file or folder)"
        )
    path = base / str(spec["path"])
    if not path.exists():
        raise CurateError(f"table source: {path} does not exist")
    q_key, a_key = spec.get("question", "question"), spec.get("answer", "answer")
    image_key, id_key = spec.get("image", "image"), spec.get("id", "id")
    try:
        kind = AnswerKind(spec.get("answer_kind", "text"))
    except ValueError:
        raise CurateError(
            f"answer_kind must be one of {', '.join(k.value for k in AnswerKind)}"
        ) from None
    rows = iter_tsv(path) if path.suffix == ".tsv" else iter_export(path, (image_key,))
    name = spec.get("name", path.stem)
    try:
        for n, item in enumerate(rows):
            question, answer = item.fields.get(q_key), item.fields.get(a_key)
            if not question or answer is None or not item.images:
                raise CurateError(
                    f"{path} row {n}: needs '{q_key}', '{a_key}' and an image in '{image_key}'"
                )
            try:
                images = tuple(to_image(b, f"input:{i}") for i, b in enumerate(item.images))
            except Unmappable as exc:
                raise CurateError(f"{path} row {n}: {exc}") from None
            yield Task(
                id=str(item.fields.get(id_key, n)),
                question=question,
                images=images,
                answer=answer,
                kind=kind,
                source=str(name),
            )
    except DataNotFoundError as exc:
        raise CurateError(f"table source {path}: {exc}") from None


SOURCES: dict[str, SourceFn] = {"world": _world, "benchmark": _benchmark, "table": _table}
RECIPES = ("crop", "annotate", "draw", "math", "none")


def register_source(kind: str, fn: SourceFn) -> None:
    """Add a source kind (see the module docstring)."""
    SOURCES[kind] = fn


def item_key(task: Task) -> str:
    """16 hex digits of sha256 over the images' hashes and the whitespace-normalised question."""
    text = " ".join(task.question.lower().split())
    digest = hashlib.sha256("|".join([*(i.sha256 for i in task.images), text]).encode())
    return digest.hexdigest()[:16]


def iter_items(
    specs: Iterable[dict[str, Any]], base: Path, counts: dict[str, int]
) -> Iterator[Item]:
    """All sources' items, one at a time, deduplicated; per-source counts (``read``,
    ``duplicates``) go into `counts` as they are read. What is kept across the stream is the set
    of item keys (16 hex digits each), so memory stays flat in the number of items."""
    specs = list(specs)
    check_sources(specs)
    seen: set[str] = set()
    for spec in specs:
        kind, recipe = spec["kind"], spec.get("recipe", "crop")
        name = str(spec.get("name") or kind)
        for task in SOURCES[kind](spec, base):
            counts[f"{name}.read"] = counts.get(f"{name}.read", 0) + 1
            key = item_key(task)
            if key in seen:
                counts[f"{name}.duplicates"] = counts.get(f"{name}.duplicates", 0) + 1
                continue
            seen.add(key)
            yield Item(key, replace(task, source=task.source or name), name, recipe)


def check_sources(specs: Iterable[dict[str, Any]]) -> None:
    """The kind and recipe of every source, before anything is read."""
    for i, spec in enumerate(specs):
        if spec.get("kind") not in SOURCES:
            raise CurateError(
                f"sources[{i}]: unknown kind {spec.get('kind')!r}; known: {', '.join(SOURCES)}"
            )
        if spec.get("recipe", "crop") not in RECIPES:
            raise CurateError(
                f"sources[{i}]: unknown recipe {spec.get('recipe')!r}; "
                f"choose from {', '.join(RECIPES)}"
            )


def check_first_rows(specs: Iterable[dict[str, Any]], base: Path) -> None:
    """Read the first task of every source (a world source is asked for one task, a benchmark for
    one row), so that a missing file, a missing column or an unreadable first row is refused
    before the run folder is written, and a source with no rows is an error, not an empty run."""
    for i, spec in enumerate(specs):
        kind = spec["kind"]
        one = (
            {**spec, "n": 1}
            if kind == "world"
            else {**spec, "limit": 1}
            if kind == "benchmark"
            else spec
        )
        if next(iter(SOURCES[kind](one, base)), None) is None:
            raise CurateError(f"sources[{i}] ({spec.get('name') or kind}): no rows to curate")


def load_items(specs: Iterable[dict[str, Any]], base: Path) -> tuple[list[Item], dict[str, int]]:
    """`iter_items` as a list (every task and image in memory: for small sources and tests)."""
    counts: dict[str, int] = {}
    return list(iter_items(specs, base, counts)), counts
