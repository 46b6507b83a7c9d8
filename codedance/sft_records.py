"""The canonical SFT record of a trajectory and its exports to ms-swift and TRL (no torch).

`canonical_record(trajectory)` is the one record every SFT format is converted from: messages
(role, text with ``<image>`` where each image goes, in order across the conversation, and a
``loss`` flag that is True exactly for the model's own assistant turns; the prompt and the sandbox
feedback are never trained) and the images in placeholder order.

On disk (`record_json`) images are PNG files stored once by hash (`codedance.records.ImageStore`)
and named by a path relative to the folder of the JSONL file (``images/<sha256>.png``), so the
folder can be moved to another machine as a whole. ms-swift and TRL (through ``datasets``' `Image`
feature) open a relative path against the *working directory*: start them from the folder holding
the JSONL file, or export with ``absolute=True`` (``codedance sft --export-swift F
--absolute-paths``) to name each image by its absolute path instead:

- canonical / ms-swift: ``{"messages": [{"role", "content", "loss"}], "images": [path, ...]}`` —
  ms-swift's custom-dataset layout (``swift sft --dataset file.jsonl``; its per-message ``loss``
  flag). Checked with ms-swift 4.6.0's own loader and Qwen2.5-VL template (docs/data.md).
- TRL (`trl_json`): ``{"messages": [{"role", "content": [{"type": "image"} | {"type": "text",
  "text"}]}], "images": [path, ...]}``, TRL's conversational vision format. Load it with
  ``datasets.load_dataset("json", data_files=...)`` and ``cast_column("images",
  Sequence(Image()))``; train with ``SFTConfig(assistant_only_loss=True)``, which selects the same
  turns as the ``loss`` flags (TRL has no per-message flag).

Not handled: tool roles (feedback is a ``user`` message, as the model saw it), videos.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from codedance.prompts import IMAGE_PLACEHOLDER, conversation
from codedance.records import ImageStore
from codedance.types import Image, Trajectory


@dataclass(frozen=True)
class SFTMessage:
    """One message: ``content`` has `IMAGE_PLACEHOLDER` where each image goes."""

    role: str
    content: str
    loss: bool


@dataclass(frozen=True)
class SFTRecord:
    """A whole conversation; ``images`` in the order of the placeholders."""

    messages: tuple[SFTMessage, ...]
    images: tuple[Image, ...]

    def as_dict(self) -> dict[str, object]:
        """``{"messages": [{"role", "content", "loss"}], "images": [Image, ...]}``."""
        return {"messages": self.messages_json(), "images": list(self.images)}

    def messages_json(self) -> list[dict[str, object]]:
        return [{"role": m.role, "content": m.content, "loss": m.loss} for m in self.messages]


def canonical_record(trajectory: Trajectory) -> SFTRecord:
    """The record of `trajectory`, from `codedance.prompts.conversation` (what the model saw)."""
    messages: list[SFTMessage] = []
    images: list[Image] = []
    for message in conversation(trajectory):
        text = []
        for part in message.parts:
            if isinstance(part, Image):
                text.append(IMAGE_PLACEHOLDER)
                images.append(part)
            else:
                text.append(part)
        messages.append(SFTMessage(message.role, "".join(text), message.role == "assistant"))
    return SFTRecord(tuple(messages), tuple(images))


def image_paths(record: SFTRecord, store: ImageStore, base: Path | None = None) -> list[str]:
    """The record's PNG paths, written to `store` once by hash: relative to the folder `base`
    (the JSONL file's folder), or absolute when `base` is None."""
    paths = [(store.root / f"{store.put(i)['sha256']}.png").resolve() for i in record.images]
    if base is None:
        return [str(p) for p in paths]
    return [Path(os.path.relpath(p, base.resolve())).as_posix() for p in paths]


def record_json(
    record: SFTRecord, store: ImageStore, base: Path | None = None
) -> dict[str, object]:
    """The canonical (= ms-swift) JSON form; images go to `store`, named relative to `base`."""
    return {"messages": record.messages_json(), "images": image_paths(record, store, base)}


def _blocks(content: str) -> list[dict[str, str]]:
    blocks: list[dict[str, str]] = []
    for i, text in enumerate(content.split(IMAGE_PLACEHOLDER)):
        if i:
            blocks.append({"type": "image"})
        if text:
            blocks.append({"type": "text", "text": text})
    return blocks


def trl_json(record: SFTRecord, store: ImageStore, base: Path | None = None) -> dict[str, object]:
    """TRL's conversational vision form (content blocks; see the module docstring)."""
    return {
        "messages": [{"role": m.role, "content": _blocks(m.content)} for m in record.messages],
        "images": image_paths(record, store, base),
    }


FORMATS: dict[str, Callable[[SFTRecord, ImageStore, Path | None], dict[str, object]]] = {
    "canonical": record_json,
    "swift": record_json,
    "trl": trl_json,
}


def write_records(
    records: Iterable[SFTRecord],
    path: str | Path,
    fmt: str = "swift",
    images: str | Path | None = None,
    absolute: bool = False,
) -> int:
    """Write `records` as JSONL in format `fmt` (``canonical``, ``swift`` or ``trl``) to `path`,
    images under `images` (default ``path.parent/images``), named relative to ``path.parent``
    (absolute with `absolute`); return how many."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown SFT format {fmt!r}; choose from {', '.join(FORMATS)}")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    store = ImageStore(images if images is not None else out.parent / "images")
    n = 0
    with open(out, "w", encoding="utf-8") as f:
        for record in records:
            f.write(
                json.dumps(
                    FORMATS[fmt](record, store, None if absolute else out.parent),
                    ensure_ascii=False,
                )
                + "\n"
            )
            n += 1
    return n
