"""`Task`s as JSON lines with their images as PNG files beside them (relative paths): the task
source of `codedance train --tasks` and `codedance eval --tasks`, written by `codedance data import
codedance-rl` (`codedance.data.rl_import`).

One line per task: ``key`` (the import's row key), ``id``, ``question``, ``answer``, ``kind``
(`AnswerKind` value), ``choices`` and ``metadata`` as [a, b] pairs, ``source``, ``domain``
(``general`` or ``math``: the R_acc/R_format rule set), ``split`` (``train`` or ``val``) and
``images``: paths relative to the JSONL's folder (``images/<sha256>.png``, each stored once).

`load_tasks` reads them back as (`Task`, domain, split) for the CPU trainer (``codedance train
--tasks``) and the eval (``codedance eval --tasks``). It also reads the files ``codedance world
gen`` writes (one ``image`` path, ``metadata`` as a mapping; domain ``general``, split
``train``). A record that parses but cannot be a task (a missing field, an unknown kind, an image
that is not there) is a `DataError` naming the file and line; a line that is not JSON is skipped,
as everywhere in codedance (the torn last line of an interrupted import).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from codedance.errors import DataError
from codedance.records import ImageStore
from codedance.types import AnswerKind, Image, Task

RECORDS = "tasks.jsonl"
_FIX = "write it with `codedance data import codedance-rl ... --out DIR` or `codedance world gen`"


def task_fields(task: Task, domain: str, split: str) -> dict:
    """Every field of a line but ``key`` and ``images``."""
    return {
        "id": task.id,
        "question": task.question,
        "answer": task.answer,
        "kind": task.kind.value,
        "choices": [list(c) for c in task.choices],
        "source": task.source,
        "metadata": [list(m) for m in task.metadata],
        "domain": domain,
        "split": split,
    }


def task_json(task: Task, store: ImageStore, *, key: str, domain: str, split: str) -> dict:
    """The line for `task`; its images go to `store` (a folder ``images`` beside the JSONL)."""
    paths = [f"{store.root.name}/{store.put(image)['sha256']}.png" for image in task.images]
    return {"key": key, **task_fields(task, domain, split), "images": paths}


def _pairs(value: object) -> tuple[tuple[str, str], ...]:
    items = value.items() if isinstance(value, dict) else value
    return tuple((str(a), str(b)) for a, b in items)  # type: ignore[union-attr]


def task_from_fields(record: dict, images: tuple[Image, ...]) -> tuple[Task, str, str]:
    """(`Task`, domain, split) of a line's fields and its decoded `images`. Raises `KeyError`,
    `ValueError` or `TypeError` on a record that is not a task."""
    task = Task(
        id=str(record["id"]),
        question=record["question"],
        images=images,
        answer=str(record["answer"]),
        kind=AnswerKind(record["kind"]),
        choices=_pairs(record.get("choices", ())),
        source=record.get("source", ""),
        metadata=_pairs(record.get("metadata", ())),
    )
    return task, record.get("domain", "general"), record.get("split", "train")


def task_from_json(record: dict, base: Path) -> tuple[Task, str, str]:
    """(`Task`, domain, split) from one line; image paths are relative to `base`. Raises
    `KeyError`, `ValueError`, `TypeError` or `OSError` on a record that is not a task."""
    paths = record["images"] if "images" in record else [record["image"]]
    images = tuple(
        Image.from_png((base / p).read_bytes(), origin=f"input:{i}") for i, p in enumerate(paths)
    )
    return task_from_fields(record, images)


def tasks_file(path: str | Path) -> Path:
    """The Task JSONL `path` names (a file, or a folder holding ``tasks.jsonl``); `DataError`
    when there is none."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / RECORDS
    if not path.is_file():
        raise DataError(f"no Task JSONL at {path}: {_FIX}")
    return path


def iter_tasks(path: str | Path) -> Iterator[tuple[Task, str, str]]:
    """Every task of a Task JSONL file (or folder), one at a time (images read as each comes)."""
    path = tasks_file(path)
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            try:
                if not isinstance(record, dict):
                    raise TypeError(f"expected an object, got {type(record).__name__}")
                yield task_from_json(record, path.parent)
            except KeyError as exc:
                raise DataError(
                    f"{path} line {number}: not a task record (no {exc}); {_FIX}"
                ) from None
            except (ValueError, TypeError, OSError) as exc:
                raise DataError(f"{path} line {number}: not a usable task ({exc})") from None


def load_tasks(
    path: str | Path, split: str | None = None, limit: int | None = None
) -> list[tuple[Task, str, str]]:
    """The tasks of a Task JSONL file (or of ``tasks.jsonl`` in a folder), optionally one split
    and at most the first ``limit`` of it; `DataError` when that leaves none."""
    tasks: list[tuple[Task, str, str]] = []
    for item in iter_tasks(path):
        if split is None or item[2] == split:
            tasks.append(item)
            if limit is not None and len(tasks) >= limit:
                break
    if not tasks:
        which = f" in split {split!r}" if split else ""
        raise DataError(
            f"no tasks{which} in {tasks_file(path)}"
            + (" (import with --val-fraction above 0 for a val split)" if split == "val" else "")
        )
    return tasks
