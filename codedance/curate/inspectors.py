"""Inspectors (paper Figure 6 top): is the image worth zooming into, is the question sound?

`inspect_item(item, vlm, config)` asks the VLM endpoint (the ``strong`` role) two questions:

- image informativeness (Table 5; template ``image_informativeness``): diversity,
  distinguishability, zoom-in benefit, suitability for fine-grained VQA -> ``True`` / ``False``;
- question validation (Table 7; template ``question_validation``): the gold answer is correct and
  the question is not trivial -> ``GOOD`` / ``BAD``.

Parsing is strict (`parse_word`): the reply, stripped of surrounding whitespace, ``*``, quotes and
periods, must be exactly one of the allowed words (any case). Anything else is recorded as
unparseable (reason ``inspector_unparseable``) and the item is dropped, never guessed.
Reasons: ``uninformative_image``, ``bad_question``, ``inspector_unparseable``, ``inspector_error``
(the server gave no usable completion).
"""

from __future__ import annotations

from typing import Any

from codedance.curate.config import InspectConfig
from codedance.curate.endpoints import Endpoint, error_text
from codedance.curate.sources import Item
from codedance.curate.templates import render
from codedance.policy.base import PolicyError
from codedance.prompts import VisionLimits, model_images
from codedance.types import Message


def parse_word(reply: str, allowed: tuple[str, ...]) -> str | None:
    """The allowed word `reply` consists of (as spelled in `allowed`), or None.

    >>> parse_word(" **True**. ", ("True", "False")), parse_word("GOOD, mostly", ("GOOD", "BAD"))
    ('True', None)
    """
    word = reply.strip().strip("*\"'`. ")
    for option in allowed:
        if word.lower() == option.lower():
            return option
    return None


async def _ask(vlm: Endpoint, item: Item, template: str, prompts: Any, **values: object) -> str:
    images = model_images(item.task.images, VisionLimits())
    text = render(template, prompts, **values)
    return (await vlm.ask((Message("user", (*images, text)),), temperature=0.0)).text


async def inspect_item(
    item: Item, vlm: Endpoint, config: InspectConfig, prompts: Any = None
) -> dict[str, Any]:
    """The inspect record of `item`: replies, verdicts and the drop reason ('' when kept)."""
    record: dict[str, Any] = {"key": item.key, "source": item.source, "reason": "", "calls": 0}
    checks = []
    if config.image:
        checks.append(
            (
                "image",
                "image_informativeness",
                ("True", "False"),
                "False",
                "uninformative_image",
                {},
            )
        )
    if config.question:
        checks.append(
            (
                "question",
                "question_validation",
                ("GOOD", "BAD"),
                "BAD",
                "bad_question",
                {"question": item.task.question, "answer": item.task.answer},
            )
        )
    for name, template, allowed, bad, reason, values in checks:
        record["calls"] += 1
        try:
            reply = await _ask(vlm, item, template, prompts, **values)
        except PolicyError as exc:
            return {**record, "reason": "inspector_error", "detail": f"{name}: {error_text(exc)}"}
        verdict = parse_word(reply, allowed)
        record[name] = {"reply": reply[:300], "verdict": verdict}
        if verdict is None:
            return {
                **record,
                "reason": "inspector_unparseable",
                "detail": f"{name}: {reply[:120]!r}",
            }
        if verdict == bad:
            return {**record, "reason": reason}
    return record
