"""`Task`s as JSON lines with their images as PNG files beside them (relative paths).

One line per task: ``key`` (the import's row key), ``id``, ``question``, ``answer``, ``kind``
(`AnswerKind` value), ``choices`` and ``metadata`` as [a, b] pairs, ``source``, ``domain``
(``general`` or ``math``: the R_acc/R_format rule set), ``split`` (``train`` or ``val``) and
``images``: paths relative to the JSONL's folder (``images/<sha256>.png``, each stored once).
`load_tasks` reads them back as (`Task`, domain, split) for the CPU trainer and the eval.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from codedance.data.ledger import iter_jsonl
from codedance.records import ImageStore
from codedance.types import AnswerKind, Image, Task


def task_json(task: Task, store: ImageStore, *, key: str, domain: str, split: str) -> dict:
    """The line for `task`; its images go to `store` (a folder ``images`` beside the JSONL)."""
    paths = [f"{store.root.name}/{store.put(image)['sha256']}.png" for image in task.images]
    return {"key": key, "id": task.id, "question": task.question, "answer": task.answer,
            "kind": task.kind.value, "choices": [list(c) for c in task.choices], "source": task.source,
            "metadata": [list(m) for m in task.metadata], "domain": domain, "split": split, "images": paths}


def task_from_json(record: dict, base: Path) -> tuple[Task, str, str]:
    """(`Task`, domain, split) from one line; image paths are relative to `base`."""
    images = tuple(Image.from_png((base / p).read_bytes(), origin=f"input:{i}")
                   for i, p in enumerate(record["images"]))
    task = Task(id=record["id"], question=record["question"], images=images, answer=record["answer"],
                kind=AnswerKind(record["kind"]), choices=tuple((a, b) for a, b in record["choices"]),
                source=record["source"], metadata=tuple((a, b) for a, b in record["metadata"]))
    return task, record["domain"], record["split"]


def iter_tasks(path: str | Path) -> Iterator[tuple[Task, str, str]]:
    """Every task of a Task JSONL file, one at a time (images read as each is yielded)."""
    path = Path(path)
    for record in iter_jsonl(path):
        yield task_from_json(record, path.parent)


def load_tasks(path: str | Path, split: str | None = None) -> list[tuple[Task, str, str]]:
    """All tasks of a Task JSONL file (or of ``tasks.jsonl`` in a folder), optionally one split."""
    path = Path(path)
    if path.is_dir():
        path = path / "tasks.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"no {path}: import with `codedance data import codedance-rl ... --out DIR`")
    return [t for t in iter_tasks(path) if split is None or t[2] == split]
