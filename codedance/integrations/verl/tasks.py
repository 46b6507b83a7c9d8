"""A `Task` to and from the fields of one verl dataset row (no verl import here).

A row (see `codedance.integrations.verl.data`) keeps the task's images in verl's ``images``
column and everything else under ``extra_info["codedance_task"]`` as plain JSON-able values, so
the agent loop rebuilds the exact `Task` the loop and the rewards expect. ``domain`` (``general``
or ``math``) selects the R_acc/R_format rule set.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from codedance.types import AnswerKind, Image, Task

TASK_KEY = "codedance_task"


def task_fields(task: Task, domain: str = "general") -> dict[str, object]:
    """JSON-able fields of `task` (images excluded; they go to verl's ``images`` column)."""
    return {
        "id": task.id,
        "question": task.question,
        "answer": task.answer,
        "kind": task.kind.value,
        "choices": [list(c) for c in task.choices],
        "source": task.source,
        "metadata": [list(m) for m in task.metadata],
        "domain": domain,
    }


def task_from_fields(fields: dict, images: Sequence[Image]) -> tuple[Task, str]:
    """(`Task`, domain) from `task_fields`' output and the row's images."""

    def pairs(value) -> tuple[tuple[str, str], ...]:
        return tuple((str(a), str(b)) for a, b in (value if value is not None else ()))

    task = Task(
        id=str(fields["id"]),
        question=str(fields["question"]),
        images=tuple(images),
        answer=str(fields["answer"]),
        kind=AnswerKind(fields["kind"]),
        choices=pairs(fields.get("choices")),
        source=str(fields.get("source") or ""),
        metadata=pairs(fields.get("metadata")),
    )
    return task, str(fields.get("domain") or "general")


def image_from_block(block: object, index: int) -> Image:
    """An `Image` from one image entry as verl's dataset delivers it: a PIL image, PNG/JPEG
    bytes, or a dict with ``bytes`` / ``image``."""
    from PIL import Image as PILImage

    value = block
    if isinstance(value, dict):
        value = value.get("image", value.get("bytes"))
        if isinstance(value, dict):
            value = value.get("bytes")
    if isinstance(value, PILImage.Image):
        return Image.from_pil(
            value.convert("RGB") if value.mode not in ("RGB", "RGBA") else value,
            origin=f"input:{index}",
        )
    if isinstance(value, (bytes, bytearray)):
        from codedance.prompts import image_from_bytes

        return image_from_bytes(bytes(value), origin=f"input:{index}")
    raise TypeError(
        f"image {index}: expected a PIL image, bytes or a dict with 'bytes', got "
        f"{type(block).__name__}"
    )


def images_from_prompt(raw_prompt: Sequence[dict]) -> tuple[Image, ...]:
    """The images of verl's ``raw_prompt`` (content blocks of type ``image``), in order."""
    images: list[Image] = []
    for message in raw_prompt:
        content = message.get("content")
        if isinstance(content, str) or content is None:
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "image":
                images.append(image_from_block(block, len(images)))
    return tuple(images)


def pil(image: Image):
    """`image` decoded as an RGB PIL image (what verl's processor consumes)."""
    from PIL import Image as PILImage

    decoded = PILImage.open(io.BytesIO(image.png))
    decoded.load()
    return decoded.convert("RGB") if decoded.mode != "RGB" else decoded
