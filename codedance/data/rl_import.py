"""CodeDance-RL rows → `Task` JSONL and the verl parquet ``codedance verl prepare-data`` writes.

    from codedance.data.rl_import import import_rl
    result = import_rl(["CodeDance-RL/data"], "data/codedance-rl")
    # then, with PRESET=codedance/presets/verl/single_node_8gpu.yaml:
    # DATA=data/codedance-rl bash scripts/train_verl.sh $PRESET

One `Task` per row (id = the row key ``<file>#<row>``):

- question: ``extra_info.question``; when empty, the last user message with its ``<image>``
  tags removed and a trailing release/paper instruction cut (counted as "question from the
  messages");
- gold answer: ``reward_model.ground_truth`` (else ``extra_info.answer``); none → skipped; an
  option letter written ``(B)`` or ``B.`` is kept as the letter (what the grader compares);
- images: the ``images`` column; when empty, ``extra_info.tools_kwargs.execute_python_code.
  create_kwargs.image`` (bytes, or a path that exists relative to the parquet file); none →
  skipped. Placeholders in the user message that disagree with the image count → skipped;
- domain and answer kind (`infer_domain`, `infer_kind`): ``math`` when ``data_source`` is one
  of the release grader's math sources (``thinklite_eureka``, ``xince``: graded by math-verify
  then a judge in ``llm_judge_qwen_tool_step.py``) or ``ability`` mentions math, and then kind
  ``math``; otherwise ``general`` with the kind read off the gold answer: an option letter that
  names an option listed in the question → ``choice``; an integer on a counting source
  (``count`` or ``pixmo`` in data_source/ability) → ``count``; a number on a chart source →
  ``relaxed``; any other number → ``number``; else ``text`` (the release judges all general
  data with an LLM: pass ``judge_policy`` to the reward to do the same);
- metadata: data_source, ability, index, split, reward style of the row, and the row's
  ``extra_info.detected_objects`` when it names a label or points (`detected_objects`): the
  card's schema is one ``label`` and ``point`` lists ``x``, ``y``; kept as
  ``detected_label`` and ``detected_points`` (JSON ``[[x, y], ...]``, in the numbers the row
  gives: the card does not say whether they are pixels or fractions of the image).

Output folder: ``tasks.jsonl`` + ``images/`` (`codedance.task_records`), ``rows.jsonl``,
``summary.json`` (with ``verl_rows``: rows per split); then ``train.parquet`` and ``val.parquet`` (a
deterministic ``val_fraction`` of the rows by a hash of their key), rewritten from ``tasks.jsonl``
at the end of every run with `codedance.integrations.verl.data.task_row`, in bounded memory;
``prompts.json`` (every distinct system prompt and user template around the question, with counts)
and ``profiles.yaml`` holding the most common one as prompt profile ``codedance-rl`` (feedback
worded as the release's tool: base ``release``), for ``--profiles``.

Not handled: videos, rows without images.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from codedance.data.formats import IMAGE, Unmappable, image_bytes, to_image
from codedance.data.importing import ImportResult, Progress, claim, run_import
from codedance.data.ledger import iter_jsonl, summarize
from codedance.data.stream import check_columns, parquet_files
from codedance.errors import SettingsError
from codedance.grading.numbers import parse_number
from codedance.prompts.profiles import PAPER_INSTRUCTION, RELEASE_INSTRUCTION
from codedance.records import ImageStore
from codedance.task_records import RECORDS, task_from_json, task_json
from codedance.types import AnswerKind, Image, Task

KIND = "codedance-rl"
COLUMNS = ("data_source", "messages", "images", "ability", "reward_model", "extra_info")
MATH_SOURCES = frozenset({"thinklite_eureka", "xince"})
PROFILE = "codedance-rl"
_LETTER = re.compile(r"^\(?([A-Z])\)?\.?$")
_OPTION = re.compile(r"^\s*\(?([A-Z])[.):]\s+(.+?)\s*$", re.MULTILINE)


def infer_domain(data_source: str, ability: str) -> str:
    """``math`` or ``general`` (module docstring).

    >>> (infer_domain("thinklite_eureka", ""), infer_domain("chart", "vqa"),
    ...  infer_domain("x", "Math"))
    ('math', 'general', 'math')
    """
    if data_source.strip().lower() in MATH_SOURCES or "math" in ability.lower():
        return "math"
    return "general"


def infer_kind(
    data_source: str, ability: str, domain: str, gold: str, question: str
) -> tuple[AnswerKind, tuple[tuple[str, str], ...]]:
    """(kind, choices) for one row (module docstring).

    >>> infer_kind("pixmo", "", "general", "7", "How many?")[0].value
    'count'
    >>> infer_kind("vstar", "", "general", "(B)", "Which?\\n(A) red\\n(B) blue")
    (<AnswerKind.CHOICE: 'choice'>, (('A', 'red'), ('B', 'blue')))
    """
    if domain == "math":
        return AnswerKind.MATH, ()
    tags = f"{data_source} {ability}".lower()
    letter = _LETTER.match(gold.strip())
    if letter:
        choices = tuple((m.group(1), m.group(2)) for m in _OPTION.finditer(question))
        if letter.group(1) in dict(choices):
            return AnswerKind.CHOICE, choices
    value = parse_number(gold)
    if value is not None:
        if float(value).is_integer() and ("count" in tags or "pixmo" in tags):
            return AnswerKind.COUNT, ()
        return (AnswerKind.RELAXED if "chart" in tags else AnswerKind.NUMBER), ()
    return AnswerKind.TEXT, ()


def in_val(key: str, fraction: float) -> bool:
    """Whether row `key` is held out: a hash of the key below `fraction` (stable across runs)."""
    return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) / 0x1_0000_0000 < fraction


@dataclass(frozen=True)
class Template:
    system: str
    prefix: str
    suffix: str

    @property
    def name(self) -> str:
        return hashlib.sha1(
            json.dumps([self.system, self.prefix, self.suffix]).encode()
        ).hexdigest()[:8]


def _messages(row: dict) -> list[tuple[str, str]]:
    return [
        (str(m.get("role", "")).lower(), str(m.get("content") or ""))
        for m in row.get("messages") or []
    ]


def _question(row: dict, messages: list[tuple[str, str]], seen: set[str]) -> str:
    question = str((row.get("extra_info") or {}).get("question") or "").replace(IMAGE, "").strip()
    if question:
        return question
    users = [text for role, text in messages if role == "user"]
    if not users:
        raise Unmappable("no question", "extra_info.question is empty and there is no user message")
    seen.add("question from the messages")
    text = users[-1].replace(IMAGE, "").strip()
    for instruction in (RELEASE_INSTRUCTION, PAPER_INSTRUCTION):
        if text.endswith(instruction.strip()):
            text = text[: -len(instruction.strip())].strip()
    if not text:
        raise Unmappable("no question", "the user message holds no question")
    return text


def _images(row: dict, file: Path, messages: list[tuple[str, str]], seen: set[str]) -> list[bytes]:
    listed = [image_bytes(v, file.parent) for v in row.get("images") or []]
    if any(d is None for d in listed):
        raise Unmappable("empty image entry", f"{len(listed)} images, some without bytes")
    tool = (
        (
            ((row.get("extra_info") or {}).get("tools_kwargs") or {}).get("execute_python_code")
            or {}
        ).get("create_kwargs")
        or {}
    ).get("image")
    tool_bytes = image_bytes(tool, file.parent) if tool else None
    data: list[bytes] = [d for d in listed if d is not None]
    if not data and tool_bytes:
        seen.add("image from tools_kwargs")
        data = [tool_bytes]
    elif data and tool_bytes and tool_bytes != data[0]:
        seen.add("tool image differs from the prompt image")
    if not data:
        if tool and tool.get("path"):
            raise Unmappable("image only by a path missing here", str(tool.get("path"))[:200])
        raise Unmappable("no image")
    placeholders = sum(text.count(IMAGE) for role, text in messages if role == "user")
    if placeholders > len(data):
        raise Unmappable(
            "more placeholders than images", f"{placeholders} placeholders, {len(data)} images"
        )
    if 0 < placeholders < len(data):
        raise Unmappable(
            "more images than placeholders", f"{placeholders} placeholders, {len(data)} images"
        )
    return data


def _template(messages: list[tuple[str, str]], question: str) -> Template | None:
    system = next((text for role, text in messages if role == "system"), "")
    users = [text.replace(IMAGE, "") for role, text in messages if role == "user"]
    if not users or question not in users[-1]:
        return None
    prefix, suffix = users[-1].split(question, 1)
    return Template(system, prefix, suffix)


def detected_objects(extra: dict, seen: set[str]) -> tuple[tuple[str, str], ...]:
    """Metadata pairs of ``extra_info.detected_objects`` (module docstring); () when empty.
    Points whose x and y lists differ in length are dropped (noted in `seen`).

    >>> point = {"x": [1.5, 3.0], "y": [2.0, 4.0]}
    >>> detected_objects({"detected_objects": {"label": "cat", "point": point}}, set())
    (('detected_label', 'cat'), ('detected_points', '[[1.5, 2.0], [3.0, 4.0]]'))
    """
    objects = extra.get("detected_objects") or {}
    label = str(objects.get("label") or "")
    point = objects.get("point") or {}
    xs, ys = list(point.get("x") or []), list(point.get("y") or [])
    pairs = (("detected_label", label),) if label else ()
    if len(xs) != len(ys):
        seen.add("detected points dropped: x and y differ in length")
    elif xs:
        pairs += (
            (
                "detected_points",
                json.dumps([[float(x), float(y)] for x, y in zip(xs, ys, strict=True)]),
            ),
        )
    return pairs


def row_task(key: str, file: Path, row: dict) -> tuple[Task, str, tuple[str, ...], Template | None]:
    """(task, domain, conventions, prompt template) of one row; raises `Unmappable`."""
    seen: set[str] = set()
    messages = _messages(row)
    extra = row.get("extra_info") or {}
    gold = str(
        (row.get("reward_model") or {}).get("ground_truth") or extra.get("answer") or ""
    ).strip()
    if not gold:
        raise Unmappable("no ground truth")
    question = _question(row, messages, seen)
    data = _images(row, file, messages, seen)
    images: tuple[Image, ...] = tuple(to_image(d, f"input:{i}") for i, d in enumerate(data))
    source, ability = str(row.get("data_source") or ""), str(row.get("ability") or "")
    domain = infer_domain(source, ability)
    kind, choices = infer_kind(source, ability, domain, gold, question)
    if kind is AnswerKind.CHOICE:
        gold = _LETTER.match(gold).group(1)  # type: ignore[union-attr]  # "(B)" → "B": graded as a letter
    seen.add(f"{source or '(no source)'} → {domain}/{kind.value}")
    template = _template(messages, question)
    if template is not None:
        seen.add(f"prompt template {template.name}")
    metadata = (
        ("data_source", source),
        ("ability", ability),
        ("index", str(extra.get("index", ""))),
        ("split", str(extra.get("split") or "")),
        ("reward_style", str((row.get("reward_model") or {}).get("style") or "")),
    ) + detected_objects(extra, seen)
    task = Task(
        id=key,
        question=question,
        images=images,
        answer=gold,
        kind=kind,
        choices=choices,
        source=source or KIND,
        metadata=metadata,
    )
    return task, domain, tuple(sorted(seen)), template


def verl_schema():  # type: ignore[no-untyped-def]
    """The pyarrow schema of `codedance.integrations.verl.data.task_row`'s rows."""
    import pyarrow as pa

    pairs = pa.list_(pa.list_(pa.string()))
    task = pa.struct(
        [
            ("id", pa.string()),
            ("question", pa.string()),
            ("answer", pa.string()),
            ("kind", pa.string()),
            ("choices", pairs),
            ("source", pa.string()),
            ("metadata", pairs),
            ("domain", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("images", pa.list_(pa.struct([("bytes", pa.binary())]))),
            ("ability", pa.string()),
            ("agent_name", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            ("extra_info", pa.struct([("index", pa.int64()), ("codedance_task", task)])),
        ]
    )


def write_verl(tasks_file: Path, out: Path, batch: int = 64) -> dict[str, int]:
    """``train.parquet`` and ``val.parquet`` in `out` from a Task JSONL file, `batch` rows in
    memory at a time; returns rows per split."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:  # the package imports verl (registration), so this needs the train extra
        from codedance.integrations.verl.data import task_row
    except ImportError as exc:
        raise SettingsError(
            f"writing verl parquet needs the train extra (pip install -e '.[train]'): {exc}; "
            "tasks.jsonl is written: rerun the import afterwards to write the parquet"
        ) from exc

    schema = verl_schema()
    counts = {"train": 0, "val": 0}
    pending: dict[str, list[dict]] = {"train": [], "val": []}
    writers = {split: pq.ParquetWriter(out / f"{split}.parquet.tmp", schema) for split in counts}
    try:
        for record in iter_jsonl(tasks_file):
            task, domain, split = task_from_json(record, tasks_file.parent)
            pending[split].append(task_row(task, counts[split], domain=domain))
            counts[split] += 1
            if len(pending[split]) >= batch:
                writers[split].write_table(pa.Table.from_pylist(pending[split], schema=schema))
                pending[split].clear()
        for split, rows in pending.items():
            if rows:
                writers[split].write_table(pa.Table.from_pylist(rows, schema=schema))
    finally:
        for writer in writers.values():
            writer.close()
    for split in counts:
        (out / f"{split}.parquet.tmp").replace(out / f"{split}.parquet")
    return counts


def _yaml_text(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid YAML scalar


def write_prompts(out: Path, templates: dict[str, Template]) -> Template | None:
    """Merge this run's templates into ``prompts.json`` with their row counts from the ledger,
    and write the most common one as profile ``codedance-rl`` in ``profiles.yaml``."""
    path = out / "prompts.json"
    known = {t["name"]: t for t in json.loads(path.read_text())} if path.exists() else {}
    for name, t in templates.items():
        known[name] = {"name": name, "system": t.system, "prefix": t.prefix, "suffix": t.suffix}
    counts = summarize(out / "rows.jsonl")["conventions"]
    entries = sorted(known.values(), key=lambda t: -counts.get(f"prompt template {t['name']}", 0))
    for entry in entries:
        entry["rows"] = counts.get(f"prompt template {entry['name']}", 0)
    path.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")
    if not entries:
        return None
    top = Template(entries[0]["system"], entries[0]["prefix"], entries[0]["suffix"])

    def braces(s: str) -> str:
        return s.replace("{", "{{").replace("}", "}}")

    user_template = braces(top.prefix) + "{question}" + braces(top.suffix)
    (out / "profiles.yaml").write_text(
        f"# the most common prompt of {out} ({entries[0]['rows']} rows; all of them: "
        "prompts.json)\n"
        f'{PROFILE}:\n  base: release\n  system: {_yaml_text(top.system)}\n  instruction: ""\n'
        f"  user_template: {_yaml_text(user_template)}\n"
    )
    return top


def import_rl(
    paths: Sequence[str | Path],
    out: str | Path,
    *,
    val_fraction: float = 0.005,
    progress: Callable[[Progress], None] | None = None,
    limit: int | None = None,
) -> ImportResult:
    """Import CodeDance-RL parquet files (or folders) into `out`; resumes (module docstring)."""
    if not 0.0 <= val_fraction < 1.0:
        raise SettingsError(f"val_fraction must be in [0, 1), got {val_fraction}")
    files = parquet_files(paths)
    check_columns(files, COLUMNS)
    out = Path(out)
    claim(out, KIND)
    store = ImageStore(out / "images")
    templates: dict[str, Template] = {}

    def convert(key: str, file: Path, row: dict) -> tuple[list[dict], tuple[str, ...]]:
        task, domain, conventions, template = row_task(key, file, row)
        if template is not None:
            templates.setdefault(template.name, template)
        split = "val" if in_val(key, val_fraction) else "train"
        return [task_json(task, store, key=key, domain=domain, split=split)], conventions

    result = run_import(files, COLUMNS, out, RECORDS, convert, progress=progress, limit=limit)
    write_prompts(out, templates)
    counts = write_verl(out / RECORDS, out)
    summary = json.loads((out / "summary.json").read_text())
    summary["verl_rows"] = counts
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return result
