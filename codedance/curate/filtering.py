"""Weak-to-strong difficulty filtering (paper §3.2): k answers without tools from each model.

`classify(item, weak, strong, config)` asks the weak model ``k`` times (temperature
``filter.temperature``) to answer directly (template ``direct_answer``). Each reply is graded
against the gold answer by the rules of the task's answer kind (`codedance.grading.grade_response`).
A weak solve rate at or above ``easy_threshold`` makes the item *easy*; otherwise the strong model
is asked ``k`` times and a strong solve rate at or above ``medium_threshold`` makes it *medium*,
below it *hard*. Every reply (text, extracted answer, correct or not) is recorded.

A reply the server could not give as a chat completion (malformed body, 4xx) is recorded as an
``error`` sample and left out of the rate; an item with no usable weak (or strong) reply is
dropped with reason ``no_valid_samples``. Easy items are kept as direct-answer examples for a
share ``easy_keep`` of them, chosen by item key (``easy_kept``); the rest are dropped as
``easy_not_sampled``. Not handled: judge-graded filtering (rules only here, to keep k·N judge
calls out of the budget; the verify stage uses the judge).
"""

from __future__ import annotations

import asyncio
from typing import Any

from codedance.curate.config import FilterConfig
from codedance.curate.endpoints import Endpoint
from codedance.curate.sources import Item
from codedance.curate.templates import render
from codedance.grading import grade_response
from codedance.policy.base import PolicyError
from codedance.prompts import VisionLimits, model_images
from codedance.types import Message


def direct_messages(item: Item, prompts: Any = None) -> tuple[Message, ...]:
    images = model_images(item.task.images, VisionLimits())
    return (Message("user", (*images, render("direct_answer", prompts, question=item.task.question))),)


async def _samples(endpoint: Endpoint, item: Item, messages: tuple[Message, ...],
                   config: FilterConfig) -> list[dict[str, Any]]:
    async def one() -> dict[str, Any]:
        try:
            completion = await endpoint.ask(messages, temperature=config.temperature)
        except PolicyError as exc:
            return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        grade = grade_response(response=completion.text, task=item.task)
        return {"text": completion.text, "answer": grade.answer, "correct": grade.correct}

    return list(await asyncio.gather(*(one() for _ in range(config.k))))


def _rate(samples: list[dict[str, Any]]) -> float | None:
    valid = [s for s in samples if "error" not in s]
    return None if not valid else sum(s["correct"] for s in valid) / len(valid)


def keeps_easy(key: str, share: float) -> bool:
    """Whether easy item `key` is among the ``share`` kept (stable: decided by the key's hash)."""
    return int(key[:8], 16) / 0x100000000 < share


async def classify(item: Item, weak: Endpoint, strong: Endpoint, config: FilterConfig,
                   prompts: Any = None) -> dict[str, Any]:
    """The filter record of `item` (see the module docstring); `EndpointDown` propagates."""
    record: dict[str, Any] = {"key": item.key, "source": item.source}
    messages = direct_messages(item, prompts)  # the same request to both models (images sized once)
    record["weak"] = await _samples(weak, item, messages, config)
    record["weak_rate"] = weak_rate = _rate(record["weak"])
    if weak_rate is None:
        return {**record, "difficulty": None, "reason": "no_valid_samples"}
    if weak_rate >= config.easy_threshold:
        kept = keeps_easy(item.key, config.easy_keep)
        return {**record, "difficulty": "easy", "reason": "" if kept else "easy_not_sampled"}
    record["strong"] = await _samples(strong, item, messages, config)
    record["strong_rate"] = strong_rate = _rate(record["strong"])
    if strong_rate is None:
        return {**record, "difficulty": None, "reason": "no_valid_samples"}
    return {**record, "difficulty": "medium" if strong_rate >= config.medium_threshold else "hard", "reason": ""}
