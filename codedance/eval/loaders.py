"""Benchmark rows to `Task`s, one converter per benchmark, with the data's own column layouts.

`load_benchmark(spec, lmu_dir=..., path=None, limit=None)` finds the data (``path`` if given,
else ``lmu_dir/<VLMEvalKit name>.tsv``), reads it (``codedance.eval.sources``) and converts each
row. Task ids are ``<benchmark>/<index>``; the task's metadata keeps what scoring and reporting
need (``index``, ``category``, ``split``, ``cycle``, ``difficulty``, ``golds``, ...).

Prompts: the question as the dataset gives it; MCQ options are listed as VLMEvalKit's
multiple-choice prompt does ("Options:\\nA. ...", then "Please select the correct answer from the
options above."); ChartQA gets VLMEvalKit's "Answer the question using a single word or phrase."
CountBench's "answer with a number directly ... no additional text" is *not* added: it contradicts
the think/answer format of every profile. V* options are kept in the file's order, as VLMEvalKit
scores them (an earlier rotation by ``index mod n`` departed from VLMEvalKit and was dropped; the
VStarBench.tsv answer distribution could not be checked here); HR-Bench keeps its four rotations
as separate rows. A list cell that is no Python list literal (ChartQA's ``[Cable TV]``) is text.
Difficulty (for turns by difficulty): MathVision ``level``, WeMath step count, HR-Bench
single/cross; ``all`` elsewhere.

``tasks`` is no benchmark of the paper: a Task JSONL (``codedance data import codedance-rl``,
``codedance world gen``; `codedance.task_records`) read with its questions, golds, kinds and
choices as they are (one ``split`` when given), task ids ``tasks/<id>`` (``#`` written ``:``).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import string
from collections.abc import Callable
from pathlib import Path

from codedance.errors import DataError
from codedance.eval.sources import DataNotFoundError, RawItem, read_export, read_mathv, read_tsv
from codedance.eval.spec import BenchmarkSpec
from codedance.grading.vlmeval_rules import literal_list
from codedance.prompts import image_from_bytes
from codedance.task_records import iter_tasks, task_fields, task_from_fields
from codedance.types import AnswerKind, Task

_NO_IMAGES = "__codedance_no_images__"
MCQ_SUFFIX = "Please select the correct answer from the options above."
CHARXIV_CATEGORIES = {
    "1": "Text-in-Chart",
    "2": "Text-in-General",
    "3": "Number-in-Chart",
    "4": "Number-in-General",
}


def _options(item: RawItem) -> list[tuple[str, str]]:
    return [(c, item.get(c)) for c in string.ascii_uppercase if item.get(c).strip()]


def _mcq_text(question: str, options: list[tuple[str, str]], hint: str = "") -> str:
    """VLMEvalKit's ``ImageMCQDataset.build_prompt`` text: hint, ``Question: ``, options, suffix."""
    text = f"Hint: {hint}\n" if hint else ""
    text += f"Question: {question}\n"
    if options:
        text += "Options:\n" + "".join(f"{k}. {v}\n" for k, v in options) + f"{MCQ_SUFFIX} \n"
    return text


def _literal_list(text: str) -> list[str]:
    """A list cell as its items; a cell that is no list literal (``[Cable TV]``) is one text."""
    if not text.strip():
        return []
    parsed = literal_list(text)
    return [text] if parsed is None else parsed


def _task(
    spec: BenchmarkSpec,
    item: RawItem,
    index: str,
    question: str,
    answer: str,
    kind: AnswerKind,
    choices: list[tuple[str, str]] | None = None,
    **meta: str,
) -> Task:
    if not item.images and item.get(_NO_IMAGES) != "1":
        raise DataError(f"{spec.title} item {index} has no image")
    images = tuple(image_from_bytes(b, origin=f"input:{k}") for k, b in enumerate(item.images))
    metadata = (
        ("benchmark", spec.name),
        ("index", index),
        ("difficulty", meta.pop("difficulty", "all")),
        *((k, str(v)) for k, v in meta.items()),
    )
    return Task(
        id=f"{spec.name}/{index}",
        question=question,
        images=images,
        answer=answer,
        kind=kind,
        choices=tuple(choices or ()),
        source=spec.name,
        metadata=metadata,
    )


def _index(item: RawItem, n: int) -> str:
    return item.get("index") or item.get("id") or item.get("question_id") or str(n)


def countbench(spec: BenchmarkSpec, item: RawItem, n: int) -> Task:
    answer = item.get("answer") or item.get("number")
    return _task(spec, item, _index(item, n), item.get("question"), answer, AnswerKind.COUNT)


def pixmocount(spec: BenchmarkSpec, item: RawItem, n: int) -> Task:
    label = item.get("label")
    question = item.get("question") or f"How many {label} are there in the image?"
    return _task(
        spec,
        item,
        _index(item, n),
        question,
        item.get("count") or item.get("answer"),
        AnswerKind.COUNT,
        label=label,
    )


def vstar(spec: BenchmarkSpec, item: RawItem, n: int) -> Task:
    index = _index(item, n)
    options = _options(item)
    if not options:
        raise DataError(f"V* item {index}: no option columns A, B, ...")
    return _task(
        spec,
        item,
        index,
        _mcq_text(item.get("question"), options, item.get("hint")),
        item.get("answer").strip().upper(),
        AnswerKind.CHOICE,
        options,
        category=item.get("category"),
        raw_question=item.get("question"),
    )


def hrbench(spec: BenchmarkSpec, item: RawItem, n: int) -> Task:
    options = _options(item)
    category = item.get("category")
    return _task(
        spec,
        item,
        _index(item, n),
        _mcq_text(item.get("question"), options, item.get("hint")),
        item.get("answer").strip().upper(),
        AnswerKind.CHOICE,
        options,
        category=category,
        cycle=item.get("cycle_category"),
        difficulty=category or "all",
        raw_question=item.get("question"),
    )


def chartqa(spec: BenchmarkSpec, item: RawItem, n: int) -> Task:
    golds = _literal_list(item.get("answer"))
    question = f"{item.get('question').strip()}\nAnswer the question using a single word or phrase."
    return _task(
        spec,
        item,
        _index(item, n),
        question,
        golds[0],
        AnswerKind.RELAXED,
        split=item.get("split"),
        golds=json.dumps(golds),
        raw_answer=item.get("answer"),
    )


def charxiv(spec: BenchmarkSpec, item: RawItem, n: int) -> Task:
    index = _index(item, n)
    if "{PREDICTION}" not in item.get("grading_query"):
        raise DataError(
            f"CharXiv item {index}: grading_query is missing or has no {{PREDICTION}} slot"
        )
    category = CHARXIV_CATEGORIES.get(
        item.get("inst_category").split(".")[0], item.get("inst_category")
    )
    return _task(
        spec,
        item,
        index,
        item.get("question"),
        item.get("answer"),
        AnswerKind.TEXT,
        category=category,
        grading_query=item.get("grading_query"),
    )


def mathvista(spec: BenchmarkSpec, item: RawItem, n: int) -> Task:
    choices = _literal_list(item.get("choices"))
    multi = item.get("question_type") == "multi_choice"
    options = [(string.ascii_uppercase[i], c) for i, c in enumerate(choices)] if multi else []
    gold = item.get("answer_option") if multi and item.get("answer_option") else item.get("answer")
    kind = AnswerKind.CHOICE if multi else AnswerKind.TEXT
    return _task(
        spec,
        item,
        _index(item, n),
        item.get("question"),
        gold,
        kind,
        options,
        task=item.get("task"),
        skills=item.get("skills"),
        question_type=item.get("question_type"),
        answer_type=item.get("answer_type"),
        precision=item.get("precision"),
        raw_answer=item.get("answer"),
    )


def mathvision(spec: BenchmarkSpec, item: RawItem, n: int) -> Task:
    index = _index(item, n)
    raw = item.get("choices") or item.get("options")
    choices = _literal_list(raw)
    options = [(string.ascii_uppercase[i], c) for i, c in enumerate(choices)]
    question = item.get("question").replace("<image1>", "").strip()
    if options and "Options" not in question and "Choices" not in question:
        if all(v.strip() == k for k, v in options):
            question += "\nChoices: " + ", ".join(k for k, _ in options) + " (shown in the image)"
        else:
            question += "\nChoices: " + " ".join(f"({k}) {v}" for k, v in options)
    kind = AnswerKind.CHOICE if options else AnswerKind.MATH
    level = item.get("level")
    return _task(
        spec,
        item,
        index,
        question,
        item.get("answer"),
        kind,
        options,
        category=item.get("category") or item.get("subject"),
        level=level,
        difficulty=f"level {level}" if level else "all",
        raw_question=item.get("question"),
    )


def mathverse(spec: BenchmarkSpec, item: RawItem, n: int) -> Task:
    meta_text = item.get("metadata")
    try:
        meta = json.loads(meta_text.replace("'", '"')) if meta_text else {}
    except json.JSONDecodeError:
        meta = ast.literal_eval(meta_text)
    return _task(
        spec,
        item,
        _index(item, n),
        item.get("question"),
        item.get("answer"),
        AnswerKind.TEXT,
        question_for_eval=item.get("question_for_eval") or item.get("question"),
        question_type=item.get("question_type"),
        problem_version=item.get("problem_version"),
        subject=str(meta.get("subject", "")),
        subfield=str(meta.get("subfield", "")),
    )


def _wemath_difficulty(key: str) -> str:
    if key.endswith("_multi"):
        return {"2": "two-step", "3": "three-step"}.get(key[0], key)
    return "one-step"


def wemath(spec: BenchmarkSpec, item: RawItem, n: int) -> Task:
    options = _options(item)
    question = item.get("question").strip()
    text = f"Question: {question}\n" + (
        "Options:\n" + "\n".join(f"{k}. {v}" for k, v in options) if options else ""
    )
    key = item.get("key")
    return _task(
        spec,
        item,
        _index(item, n),
        text.strip(),
        item.get("answer").strip(),
        AnswerKind.CHOICE,
        options,
        ID=item.get("ID") or item.get("id"),
        key=key,
        raw_question=question,
        concept=item.get("knowledge concept"),
        difficulty=_wemath_difficulty(key),
    )


def imported(spec: BenchmarkSpec, item: RawItem, n: int) -> Task:
    """A Task JSONL line (`read_tasks`) as it was written; its metadata kept, with its domain."""
    task, domain, _ = task_from_fields(json.loads(item.get("record")), ())
    if not item.images and item.get(_NO_IMAGES) != "1":
        raise DataError(f"{spec.title} item {task.id} has no image")
    index = task.id.replace("#", ":")
    kept = tuple((k, v) for k, v in task.metadata if k not in ("benchmark", "index", "difficulty"))
    metadata = (
        ("benchmark", spec.name),
        ("index", index),
        ("difficulty", dict(task.metadata).get("difficulty", "all")),
        ("domain", domain),
        ("task_id", task.id),
        *kept,
    )
    images = tuple(image_from_bytes(b, origin=f"input:{k}") for k, b in enumerate(item.images))
    return dataclasses.replace(task, id=f"{spec.name}/{index}", images=images, metadata=metadata)


def read_tasks(path: str | Path, split: str = "", limit: int | None = None) -> list[RawItem]:
    """The rows of a Task JSONL file (or import folder), one split when given, the first `limit`
    (the rest of the file is not read; `imported`)."""
    items = []
    for task, domain, task_split in iter_tasks(path):
        if not split or task_split == split:
            items.append(
                RawItem(
                    {"record": json.dumps(task_fields(task, domain, task_split))},
                    tuple(im.png for im in task.images),
                )
            )
            if limit is not None and len(items) >= limit:
                break
    if not items:
        raise DataNotFoundError(f"no tasks{f' in split {split!r}' if split else ''} in {path}")
    return items


CONVERTERS: dict[str, Callable[[BenchmarkSpec, RawItem, int], Task]] = {
    "countbench": countbench,
    "pixmocount": pixmocount,
    "mcq": vstar,
    "hrbench": hrbench,
    "chartqa": chartqa,
    "charxiv": charxiv,
    "mathvista": mathvista,
    "mathvision": mathvision,
    "mathverse": mathverse,
    "wemath": wemath,
    "tasks": imported,
}


# columns each converter reads that no row can do without (``a|b``: either); the image is checked
# apart (a TSV's ``image`` / ``image_path``, an export's ``image`` / ``images``)
REQUIRED: dict[str, tuple[str, ...]] = {
    "countbench": ("question", "answer|number"),
    "pixmocount": ("label", "count|answer"),
    "mcq": ("question", "answer", "A"),
    "hrbench": ("question", "answer", "A"),
    "chartqa": ("question", "answer"),
    "charxiv": ("question", "answer", "grading_query"),
    "mathvista": ("question", "answer"),
    "mathvision": ("question", "answer"),
    "mathverse": ("question", "answer"),
    "wemath": ("question", "answer"),
    "tasks": (),
}


def check_items(spec: BenchmarkSpec, items: list[RawItem], source: str) -> None:
    """Refuse a data file that cannot give one scorable sample, before a run folder is written:
    no rows, a required column that no row has, rows without images, or a first row its
    converter cannot read. ``source`` names the file in the `DataError`."""
    if not items:
        raise DataError(f"{spec.title}: {source} has no rows (is it the benchmark's file?)")
    present = set().union(*(item.fields for item in items))
    missing = [c for c in REQUIRED[spec.scorer] if not any(a in present for a in c.split("|"))]
    if missing:
        names = ", ".join(repr(c.replace("|", "' or '")) for c in missing)
        raise DataError(
            f"{spec.title}: {source} has no column {names} "
            f"(columns: {', '.join(sorted(present)) or 'none'})"
        )
    if spec.scorer != "tasks" and not any(item.images for item in items):
        raise DataError(
            f"{spec.title}: {source} has no images "
            "(an 'image' column of base64 images, or 'image_path')"
        )
    try:
        to_task(spec, items[0], 0, images=False)
    except (DataError, ValueError, KeyError, SyntaxError) as exc:
        raise DataError(f"{spec.title}: {source}, row 0 cannot be read: {exc}") from None


def read_items(
    spec: BenchmarkSpec,
    *,
    lmu_dir: str | Path | None,
    path: str | Path | None = None,
    split: str = "",
    limit: int | None = None,
) -> list[RawItem]:
    """The benchmark's raw rows from ``path`` (TSV, HF export, MATH-V folder, or for ``tasks`` a
    Task JSONL: the first ``limit`` of ``split`` when given, read no further) or ``lmu_dir``."""
    if spec.scorer == "tasks":
        if path is None:
            raise DataNotFoundError(f"{spec.title}: give the file: --tasks PATH ({spec.source})")
        return read_tasks(path, split, limit)
    if path is not None:
        p = Path(path)
        if p.suffix == ".tsv":
            return read_tsv(p)
        if p.is_dir() and (p / "data").is_dir() and spec.scorer == "mathvision":
            return read_mathv(p, "testmini" if spec.split == "testmini" else "test")
        if not p.exists():
            raise DataNotFoundError(f"{spec.title}: {p} does not exist (get it: {spec.source})")
        return read_export(p)
    if lmu_dir is None:
        raise DataNotFoundError(
            f"{spec.title}: no data folder given; expected {spec.vlmeval_name}.tsv "
            f"in $LMUData (get it: {spec.source})"
        )
    tsv = Path(lmu_dir) / f"{spec.vlmeval_name}.tsv"
    if not tsv.is_file():
        raise DataNotFoundError(
            f"{spec.title}: expected {tsv} (get it: {spec.source}), or pass "
            f"--data {spec.name}=PATH for a TSV, Hugging Face export or MATH-V folder"
        )
    return read_tsv(tsv)


def prepare_items(
    spec: BenchmarkSpec,
    *,
    lmu_dir: str | Path | None = None,
    path: str | Path | None = None,
    limit: int | None = None,
    pixmo_cache: str | Path | None = None,
    fetch_images: bool = False,
    split: str = "",
) -> list[RawItem]:
    """The first ``limit`` raw rows, with PixmoCount's images brought from the cache (see pixmo)."""
    items = read_items(spec, lmu_dir=lmu_dir, path=path, split=split, limit=limit)
    if limit is not None:
        items = items[:limit]
    if spec.scorer == "pixmocount" and items and not items[0].images:
        from codedance.eval.pixmo import pixmo_images

        if pixmo_cache is None:
            raise DataNotFoundError("PixmoCount needs an image cache folder (--pixmo-cache)")
        images, _ = pixmo_images(items, pixmo_cache, fetch=fetch_images)
        items = [
            RawItem(it.fields, (img,))
            for it, img in zip(items, images, strict=True)
            if img is not None
        ]
    return items


def to_task(spec: BenchmarkSpec, item: RawItem, n: int, *, images: bool = True) -> Task:
    """The `Task` of raw row number `n`; ``images=False`` skips decoding (for scoring)."""
    if not images:
        item = RawItem({**item.fields, _NO_IMAGES: "1"}, ())
    return CONVERTERS[spec.scorer](spec, item, n)


def load_benchmark(
    spec: BenchmarkSpec,
    *,
    lmu_dir: str | Path | None = None,
    path: str | Path | None = None,
    limit: int | None = None,
    pixmo_cache: str | Path | None = None,
    fetch_images: bool = False,
) -> tuple[Task, ...]:
    """The benchmark's tasks (the first ``limit`` rows when given). See the module docstring."""
    items = prepare_items(
        spec,
        lmu_dir=lmu_dir,
        path=path,
        limit=limit,
        pixmo_cache=pixmo_cache,
        fetch_images=fetch_images,
    )
    return tuple(to_task(spec, item, n) for n, item in enumerate(items))
