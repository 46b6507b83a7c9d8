"""Atomic supervision for crop-style questions (paper Figure 6 middle, Table 6, Figure 7).

1. The strong model proposes boxes for the regions needed to answer (template ``propose_boxes``):
   a JSON list of ``{"label", "bbox_2d": [x1, y1, x2, y2]}`` in pixels of the image as the model
   sees it (`codedance.prompts.model_images`, the same image the sandbox gets). `parse_boxes` is
   strict: a reply with no JSON list of such objects raises `BoxesUnparseable`.
2. `box_problem` drops implausible boxes (Figure 7's bad cases): ``outside`` (any corner beyond
   the image), ``degenerate`` (a side under ``min_box_side`` px, or x2 <= x1), ``whole_image``
   (area over ``max_box_area`` of the image), ``label_mismatch`` (no word of three or more
   letters of the label occurs in the question, so the box is not about what is asked).
3. The trajectory runs through the real loop (`codedance.rollout.arun_episode`) and sandbox: the
   code turns are written from the kept boxes (`code_turns`), the sandbox runs them and its real
   output is fed back, and the strong model writes the final turn seeing the whole conversation
   (the crops included). *medium*: one code turn (crop and zoom the first box). *hard*: one turn
   per box (up to ``max_boxes``), each printing the crop's size, then a turn that enhances the
   contrast of the last crop (it reuses the variables of earlier turns), then the answer.
   ``recipe: annotate`` adds an open-ended drawing turn first: every kept box outlined and
   labelled on a copy of the whole image, shown to the model.

The math recipe (Tables 8-9) is `codedance.curate.math_recipe`; the open-ended operations
(points, lines, masks, zooms) are `codedance.curate.drawing`, which shares `json_list`,
`numbers`, `label_mismatch` and `AtomicPolicy` from here. A source with ``recipe: none`` reaches
verification only through its easy direct-answer examples.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from codedance.curate.config import AtomicConfig
from codedance.curate.endpoints import Asker
from codedance.curate.templates import render
from codedance.policy.base import Completion
from codedance.rollout import Episode, EpisodeConfig, arun_episode
from codedance.types import Image, Message, Task, Trajectory

ZOOM = 2


class BoxesUnparseable(ValueError):
    """The strong model's reply holds no JSON list of {label, bbox_2d} objects."""


@dataclass(frozen=True)
class Box:
    label: str
    x1: int
    y1: int
    x2: int
    y2: int

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "bbox_2d": [self.x1, self.y1, self.x2, self.y2]}


_JSON_BLOCK = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def json_list(reply: str, error: type[ValueError]) -> list[Any]:
    """The non-empty JSON list of a proposal reply (a fenced ```json block or bare JSON; a lone
    object counts as a list of one); `error` with the reason otherwise."""
    match = _JSON_BLOCK.search(reply)
    text = (match.group(1) if match else reply).strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"not JSON ({exc.msg}): {reply[:120]!r}") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise error(f"expected a non-empty JSON list: {reply[:120]!r}")
    return data


def numbers(entry: object, key: str, count: int) -> tuple[int, ...] | None:
    """``entry[key]`` as `count` rounded numbers, or None when it is not that."""
    value = entry.get(key) if isinstance(entry, dict) else None
    if (
        not isinstance(value, list)
        or len(value) != count
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        return None
    return tuple(round(v) for v in value)


def parse_boxes(reply: str) -> list[Box]:
    """The boxes of a Table 6 reply (a fenced ```json block or a bare JSON list)."""
    boxes = []
    for entry in json_list(reply, BoxesUnparseable):
        bbox = numbers(entry, "bbox_2d", 4)
        if bbox is None:
            raise BoxesUnparseable(f"an entry has no bbox_2d of four numbers: {str(entry)[:120]!r}")
        boxes.append(Box(str(entry.get("label", "")), *bbox))
    return boxes


def label_mismatch(label: str, question: str) -> bool:
    """No word of three or more letters of `label` occurs in `question`."""
    return not _words(label) & _words(question)


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 3}


def box_problem(box: Box, size: tuple[int, int], question: str, config: AtomicConfig) -> str | None:
    """Why `box` is implausible for an image of `size` and `question`, or None."""
    width, height = size
    if box.x1 < 0 or box.y1 < 0 or box.x2 > width or box.y2 > height:
        return "outside"
    if box.x2 - box.x1 < config.min_box_side or box.y2 - box.y1 < config.min_box_side:
        return "degenerate"
    if (box.x2 - box.x1) * (box.y2 - box.y1) > config.max_box_area * width * height:
        return "whole_image"
    if label_mismatch(box.label, question):
        return "label_mismatch"
    return None


def propose_messages(task: Task, image: Image, prompts: Any = None) -> tuple[Message, ...]:
    """The Table 6 request for `task`'s first image as the model sees it (`Episode.images`)."""
    text = render(
        "propose_boxes", prompts, question=task.question, width=image.width, height=image.height
    )
    return (Message("user", (image, text)),)


def _crop_turn(box: Box, name: str, why: str) -> str:
    return (
        f"<think>{why} The {box.label} is at ({box.x1}, {box.y1}, {box.x2}, {box.y2}); "
        "I crop it and "
        f"zoom in {ZOOM}x to read it.</think>\n<code>\n```python\n"
        f"{name} = input_image.crop(({box.x1}, {box.y1}, {box.x2}, {box.y2}))\n"
        f"print('{box.label}:', {name}.size)\n"
        f"{name}.resize(({name}.width * {ZOOM}, {name}.height * {ZOOM})).show()\n```\n</code>"
    )


def annotate_turn(boxes: list[Box]) -> str:
    """A drawing turn: outline and label every box on a copy of the whole image, then show it."""
    draw = "".join(
        f"draw.rectangle(({b.x1}, {b.y1}, {b.x2}, {b.y2}), outline=(255, 0, 0), width=3)\n"
        f"draw.text(({b.x1}, max(0, {b.y1} - 12)), {b.label!r}, fill=(255, 0, 0))\n"
        for b in boxes
    )
    return (
        "<think>First I mark the candidate regions on the whole image to see where they lie."
        "</think>\n"
        "<code>\n```python\nfrom PIL import ImageDraw\nmarked = input_image.convert('RGB').copy()\n"
        f"draw = ImageDraw.Draw(marked)\n{draw}"
        f"print('marked', {len(boxes)}, 'regions on', marked.size)\n"
        "marked.show()\n```\n</code>"
    )


def code_turns(
    boxes: list[Box], difficulty: str, max_boxes: int, annotate: bool = False
) -> list[str]:
    """The scripted code turns of a trajectory (see the module docstring); with `annotate`, a
    drawing turn (`annotate_turn`) comes first."""
    first = [annotate_turn(boxes[:max_boxes])] if annotate else []
    if difficulty == "medium":
        return [*first, _crop_turn(boxes[0], "crop", "The answer depends on a small detail.")]
    used = boxes[:max_boxes]
    turns = first + [
        _crop_turn(b, f"crop{i}", "I check this region first." if i == 0 else "Next region.")
        for i, b in enumerate(used)
    ]
    last = f"crop{len(used) - 1}"
    turns.append(
        "<think>The details are faint; I raise the contrast of the last crop.</think>\n<code>\n"
        "```python\nfrom PIL import ImageOps\n"
        f"sharp = ImageOps.autocontrast({last}.convert('RGB'))\n"
        f"print('contrast range:', sharp.getextrema())\n"
        f"sharp.resize(({last}.width * {ZOOM * 2}, {last}.height * {ZOOM * 2})).show()\n"
        "```\n</code>"
    )
    return turns


class AtomicPolicy:
    """A `Policy` whose first replies are `turns` (code written from the boxes) and whose last
    reply comes from the strong model, given the whole conversation with the real feedback."""

    def __init__(self, turns: list[str], strong: Asker) -> None:
        self.turns = turns
        self.strong = strong

    def complete(self, messages: tuple[Message, ...]) -> Completion:
        raise NotImplementedError("AtomicPolicy is asynchronous: use arun_episode")

    async def acomplete(self, messages: tuple[Message, ...]) -> Completion:
        done = sum(m.role == "assistant" for m in messages)
        if done < len(self.turns):
            return Completion(self.turns[done])
        return await self.strong.ask(messages)


async def crop_trajectory(
    task: Task,
    boxes: list[Box],
    difficulty: str,
    strong: Asker,
    sandbox: Any,
    episode: EpisodeConfig,
    config: AtomicConfig,
    annotate: bool = False,
) -> Trajectory:
    """Run the atomic trajectory of `task` in `sandbox` (which holds the model-sized images)."""
    policy = AtomicPolicy(code_turns(boxes, difficulty, config.max_boxes, annotate), strong)
    return await arun_episode(policy, task, sandbox, episode)


def direct_trajectory(task: Task, reply: str, episode: EpisodeConfig) -> Trajectory:
    """The direct-answer example of an easy item: the weak model's correct reply as the one turn."""
    ep = Episode(task, episode)
    ep.on_completion(Completion(reply))
    return ep.trajectory()
