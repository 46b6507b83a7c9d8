"""Weak-to-strong difficulty filtering (paper §3.2): k answers without tools from each model.

`classify(item, weak, strong, config)` asks the weak model ``k`` times (temperature
``filter.temperature``) to answer directly (template ``direct_answer``). Each reply is graded
against the gold answer by the rules of the task's answer kind (`codedance.grading.grade_response`);
an answer the rules reject is then graded by the judge endpoint when ``filter.judge`` says so:
``undecided`` (the default) for the answer kinds whose rules cannot decide a mismatch (``text``,
``math``: a paraphrase or an equivalent expression fails the rule, so a rule "no" is not a no),
``fallback`` for every kind, ``never`` not at all. The judge is asked once per distinct answer of
an item (whitespace- and case-normalised; the k samples often agree), and its verdict is recorded
on each sample it decided (``graded_by`` ``rule`` or ``judge``, ``judge``: verdict and reply). A
judge reply that is no verdict, or a failed judge request, leaves that sample out of the rate
(recorded with its ``problem``, never guessed). A weak solve rate at or above ``easy_threshold``
makes the item *easy*; otherwise the strong model is asked ``k`` times and a strong solve rate at or
above ``medium_threshold`` makes it *medium*, below it *hard*. Every reply (text, extracted answer,
correct or not) is recorded.

A reply the server could not give as a chat completion (malformed body, 4xx) is recorded as an
``error`` sample and left out of the rate; an item with no usable weak (or strong) reply is
dropped with reason ``no_valid_samples``. Easy items are kept as direct-answer examples for a
share ``easy_keep`` of them, chosen by item key (``easy_kept``); the rest are dropped as
``easy_not_sampled``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from codedance.curate.config import FilterConfig
from codedance.curate.endpoints import Asker, error_text
from codedance.curate.judging import JudgeReply, ask_judge
from codedance.curate.sources import Item
from codedance.curate.templates import render
from codedance.grading import grade_response
from codedance.policy.base import PolicyError
from codedance.prompts import VisionLimits, model_images
from codedance.types import AnswerKind, Message

UNDECIDED_KINDS = (AnswerKind.TEXT, AnswerKind.MATH)
JUDGE_MODES = ("never", "undecided", "fallback")


def direct_messages(item: Item, prompts: Any = None) -> tuple[Message, ...]:
    images = model_images(item.task.images, VisionLimits())
    return (
        Message("user", (*images, render("direct_answer", prompts, question=item.task.question))),
    )


class _Judged:
    """The judge's verdicts on one item's answers, one request per distinct answer."""

    def __init__(self, judge: Asker | None, item: Item, mode: str) -> None:
        self.judge, self.item, self.mode = judge, item, mode
        self._asked: dict[str, asyncio.Task[JudgeReply]] = {}

    def wanted(self) -> bool:
        return self.judge is not None and (
            self.mode == "fallback"
            or (self.mode == "undecided" and self.item.task.kind in UNDECIDED_KINDS)
        )

    async def verdict(self, answer: str) -> JudgeReply:
        assert self.judge is not None
        key = " ".join(answer.lower().split())
        if key not in self._asked:
            self._asked[key] = asyncio.ensure_future(ask_judge(self.judge, self.item.task, answer))
        return await self._asked[key]


async def _samples(
    endpoint: Asker,
    item: Item,
    messages: tuple[Message, ...],
    config: FilterConfig,
    judged: _Judged,
) -> list[dict[str, Any]]:
    async def one() -> dict[str, Any]:
        try:
            completion = await endpoint.ask(messages, temperature=config.temperature)
        except PolicyError as exc:
            return {"error": error_text(exc)}
        grade = grade_response(response=completion.text, task=item.task)
        sample = {
            "text": completion.text,
            "answer": grade.answer,
            "correct": grade.correct,
            "graded_by": "rule",
        }
        if grade.correct or not grade.answer or not judged.wanted():
            return sample
        verdict = await judged.verdict(grade.answer)
        return {
            **sample,
            "correct": verdict.correct,
            "graded_by": "judge",
            "judge": verdict.as_dict(),
        }

    return list(await asyncio.gather(*(one() for _ in range(config.k))))


def _rate(samples: list[dict[str, Any]]) -> float | None:
    valid = [s for s in samples if "error" not in s and s["correct"] is not None]
    return None if not valid else sum(s["correct"] for s in valid) / len(valid)


def keeps_easy(key: str, share: float) -> bool:
    """Whether easy item `key` is among the ``share`` kept (stable: decided by the key's hash)."""
    return int(key[:8], 16) / 0x100000000 < share


async def classify(
    item: Item,
    weak: Asker,
    strong: Asker,
    config: FilterConfig,
    prompts: Any = None,
    judge: Asker | None = None,
) -> dict[str, Any]:
    """The filter record of `item` (see the module docstring); `EndpointDown` propagates.
    `judge` None grades by the rules only."""
    record: dict[str, Any] = {"key": item.key, "source": item.source}
    judged = _Judged(judge, item, config.judge)
    messages = direct_messages(item, prompts)  # the same request to both models (images sized once)
    record["weak"] = await _samples(weak, item, messages, config, judged)
    record["weak_rate"] = weak_rate = _rate(record["weak"])
    if weak_rate is None:
        return {**record, "difficulty": None, "reason": "no_valid_samples"}
    if weak_rate >= config.easy_threshold:
        kept = keeps_easy(item.key, config.easy_keep)
        return {**record, "difficulty": "easy", "reason": "" if kept else "easy_not_sampled"}
    record["strong"] = await _samples(strong, item, messages, config, judged)
    record["strong_rate"] = strong_rate = _rate(record["strong"])
    if strong_rate is None:
        return {**record, "difficulty": None, "reason": "no_valid_samples"}
    return {
        **record,
        "difficulty": "medium" if strong_rate >= config.medium_threshold else "hard",
        "reason": "",
    }
