"""CodeDance-SFT rows (``messages``, ``images``) → trajectory records in an output folder.

    from codedance.data.sft_import import import_sft
    result = import_sft(["CodeDance-SFT/data"], "data/codedance-sft")

Each row becomes one `Trajectory` (`codedance.records` format, keyed ``<file>#<row>``), so
``codedance sft --data OUT`` trains on it and ``--export-swift`` exports it: the prompt messages
(system, user with its images) as the row has them, one `Turn` per assistant message (its text
exactly as released; think, code and answer parsed by `codedance.parsing`), and the feedback that
followed each turn (tool responses as Qwen's template renders them, with their images).
Conventions and unmappable rows: `codedance.data.formats`.

Output folder: ``trajectories.jsonl``; ``images/<sha256>.png`` (each image once, PNG; other
formats are decoded and stored as PNG, so a JPEG-heavy dataset takes more disk here);
``rows.jsonl`` (one line per row: imported or skipped and why); ``summary.json``. A rerun
resumes. Not recorded: the snippets' sandbox results (the rows hold only the rendered feedback;
`codedance.data.verify` re-executes the code and compares).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from codedance.data.formats import (
    IMAGE,
    Conversation,
    Unmappable,
    conversation,
    image_bytes,
    to_image,
)
from codedance.data.importing import ImportResult, Progress, claim, run_import
from codedance.data.stream import check_columns, parquet_files
from codedance.parsing import parse_message
from codedance.prompts import split_placeholders
from codedance.records import ImageStore, trajectory_json
from codedance.types import Image, Message, StopReason, Trajectory, Turn

KIND = "codedance-sft"
COLUMNS = ("messages", "images")
RECORDS = "trajectories.jsonl"
SOURCE = "codedance-sft"


def _take(images: list[Image], text: str) -> tuple[Image, ...]:
    n = text.count(IMAGE)
    taken = tuple(images[:n])
    del images[:n]
    return taken


def _origin(image: Image, origin: str) -> Image:
    return Image(png=image.png, origin=origin, width=image.width, height=image.height)


def build_trajectory(key: str, conv: Conversation, images: Sequence[Image]) -> Trajectory:
    """The `Trajectory` of a mapped row; `images` in placeholder order."""
    queue = list(images)
    prompt = []
    n_input = 0
    for role, text in conv.prompt:
        own = tuple(_origin(i, f"input:{n_input + k}") for k, i in enumerate(_take(queue, text)))
        n_input += len(own)
        prompt.append(Message(role, split_placeholders(text, own)))
    turns = []
    for t, step in enumerate(conv.steps):
        parsed = parse_message(step.text)
        feedback = step.feedback or ""
        shown = tuple(_origin(i, f"turn:{t}:{k}") for k, i in enumerate(_take(queue, feedback)))
        turns.append(
            Turn(
                text=step.text,
                think=parsed.think,
                code=parsed.code,
                answer=parsed.answer,
                verdict=parsed.verdict,
                feedback_text=feedback,
                feedback_images=shown,
            )
        )
    answer = turns[-1].answer
    stop = StopReason.ANSWERED if answer is not None else StopReason.FORMAT_ERROR
    return Trajectory(
        task_id=key,
        turns=tuple(turns),
        stop_reason=stop,
        answer=answer,
        metadata=(("source", SOURCE), ("row", key)),
        prompt=tuple(prompt),
    )


def row_trajectory(key: str, file: Path, row: dict) -> tuple[Trajectory, tuple[str, ...]]:
    """One row as a trajectory and the conventions it used; raises `Unmappable`."""
    messages = row.get("messages") or []
    raw_images = row.get("images") or []
    data = [image_bytes(v, file.parent) for v in raw_images]
    missing = [i for i, d in enumerate(data) if d is None]
    if missing:
        raise Unmappable("empty image entry", f"image {missing[0]} of {len(data)} has no bytes")
    conv = conversation(messages, len(data))
    images = [to_image(d, f"row image {i}") for i, d in enumerate(data)]
    return build_trajectory(key, conv, images), conv.conventions


def import_sft(
    paths: Sequence[str | Path],
    out: str | Path,
    *,
    progress: Callable[[Progress], None] | None = None,
    limit: int | None = None,
) -> ImportResult:
    """Import CodeDance-SFT parquet files (or folders) into `out`; resumes (module docstring)."""
    files = parquet_files(paths)
    check_columns(files, COLUMNS)
    out = Path(out)
    claim(out, KIND)
    store = ImageStore(out / "images")

    def convert(key: str, file: Path, row: dict) -> tuple[list[dict], tuple[str, ...]]:
        trajectory, conventions = row_trajectory(key, file, row)
        return [trajectory_json(trajectory, store, key=key)], conventions

    return run_import(files, COLUMNS, out, RECORDS, convert, progress=progress, limit=limit)
