"""Open-ended visual operations (paper Figure 6 middle (c)): drawing, point plotting, measuring,
masking and zooming, proposed by the strong model, checked by rules, run with real feedback.

For a medium or hard item of a source with ``recipe: draw``:

1. The strong model proposes operations (template ``propose_ops``): a JSON list of
   ``{"op", "label", ...}`` in pixels of the image as the model sees it, one of
   ``point`` (``point_2d: [x, y]``: plot and label a point), ``line`` (``line_2d: [x1, y1, x2,
   y2]``: draw an auxiliary line and measure its length), ``box`` (``bbox_2d``: outline and
   label a region), ``mask`` (``bbox_2d``: dim everything outside the region) and ``zoom``
   (``bbox_2d`` and ``factor``: crop the region and enlarge it). `parse_ops` is strict: an
   entry with an unknown op or coordinates of the wrong shape raises `OpsUnparseable`.
2. `op_problems` drops implausible operations: ``outside`` (a coordinate beyond the image),
   ``degenerate`` (a region side or a line shorter than ``min_box_side``, or x2 <= x1),
   ``whole_image`` (a box, mask or zoom over more than ``max_box_area`` of the image: it shows
   nothing new), ``bad_zoom`` (factor outside [1.5, 4]), ``label_mismatch`` (as for boxes: no
   word of the label in the question), ``duplicate`` (the same op on the same coordinates as
   an earlier kept one).
3. The code turns are written from the kept operations (`draw_turns`) on one canvas, a copy of
   the input kept across turns, and run in the real sandbox with the real output fed back;
   the strong model writes the final turn seeing the whole conversation. *medium*: one turn
   drawing every kept operation, showing the canvas (and each zoom). *hard*: one turn per
   operation (up to ``max_boxes``), each printing its measurement (a point's position, a
   line's length from ``math.dist``, a region's size, the share of the image a mask keeps) and
   showing the result, so later turns build on what the earlier ones drew.

Not handled: free-form drawing the model writes as code itself (the operations are written
from the proposal, as the paper's atomic data is), polygons and curves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from codedance.curate.atomic import AtomicPolicy, json_list, label_mismatch, numbers
from codedance.curate.config import AtomicConfig
from codedance.curate.endpoints import Asker
from codedance.curate.templates import render
from codedance.rollout import EpisodeConfig, arun_episode
from codedance.types import Image, Message, Task, Trajectory

SHAPES = {
    "point": ("point_2d", 2),
    "line": ("line_2d", 4),
    "box": ("bbox_2d", 4),
    "mask": ("bbox_2d", 4),
    "zoom": ("bbox_2d", 4),
}
ZOOM_RANGE = (1.5, 4.0)
DOT = 6  # the radius of a plotted point, px


class OpsUnparseable(ValueError):
    """The strong model's reply holds no JSON list of well-formed operations."""


@dataclass(frozen=True)
class Op:
    op: str
    label: str
    at: tuple[int, ...]  # point: (x, y); line: (x1, y1, x2, y2); box, mask, zoom: (x1, y1, x2, y2)
    factor: float = 2.0

    def as_dict(self) -> dict[str, Any]:
        key = SHAPES[self.op][0]
        return {
            "op": self.op,
            "label": self.label,
            key: list(self.at),
            **({"factor": self.factor} if self.op == "zoom" else {}),
        }


def parse_ops(reply: str) -> list[Op]:
    """The operations of a ``propose_ops`` reply (see the module docstring)."""
    ops = []
    for entry in json_list(reply, OpsUnparseable):
        kind = entry.get("op") if isinstance(entry, dict) else None
        if kind not in SHAPES:
            raise OpsUnparseable(
                f"unknown op {kind!r} (known: {', '.join(SHAPES)}): {str(entry)[:120]!r}"
            )
        key, count = SHAPES[kind]
        at = numbers(entry, key, count)
        if at is None:
            raise OpsUnparseable(f"a {kind} needs {key} of {count} numbers: {str(entry)[:120]!r}")
        factor = entry.get("factor", 2.0)
        if not isinstance(factor, (int, float)) or isinstance(factor, bool):
            raise OpsUnparseable(f"zoom factor is not a number: {str(entry)[:120]!r}")
        ops.append(Op(kind, str(entry.get("label", "")), at, float(factor)))
    return ops


def _problem(op: Op, size: tuple[int, int], question: str, config: AtomicConfig) -> str | None:
    width, height = size
    xs, ys = op.at[0::2], op.at[1::2]
    if min(xs) < 0 or min(ys) < 0 or max(xs) > width or max(ys) > height:
        return "outside"
    if op.op == "line" and math.dist(op.at[:2], op.at[2:]) < config.min_box_side:
        return "degenerate"
    if op.op in ("box", "mask", "zoom"):
        x1, y1, x2, y2 = op.at
        if x2 - x1 < config.min_box_side or y2 - y1 < config.min_box_side:
            return "degenerate"
        if (x2 - x1) * (y2 - y1) > config.max_box_area * width * height:
            return "whole_image"
    if op.op == "zoom" and not ZOOM_RANGE[0] <= op.factor <= ZOOM_RANGE[1]:
        return "bad_zoom"
    if label_mismatch(op.label, question):
        return "label_mismatch"
    return None


def op_problems(
    ops: list[Op], size: tuple[int, int], question: str, config: AtomicConfig
) -> list[str | None]:
    """Why each of `ops` is implausible (None: kept), in order (see the module docstring)."""
    seen: set[tuple[str, tuple[int, ...]]] = set()
    problems: list[str | None] = []
    for op in ops:
        problem = _problem(op, size, question, config)
        if problem is None and (op.op, op.at) in seen:
            problem = "duplicate"
        if problem is None:
            seen.add((op.op, op.at))
        problems.append(problem)
    return problems


def propose_messages(task: Task, image: Image, prompts: Any = None) -> tuple[Message, ...]:
    text = render(
        "propose_ops", prompts, question=task.question, width=image.width, height=image.height
    )
    return (Message("user", (image, text)),)


SETUP = (
    "import math\nfrom PIL import Image, ImageDraw, ImageEnhance\n"
    "canvas = input_image.convert('RGB').copy()\ndraw = ImageDraw.Draw(canvas)\n"
)


def op_code(op: Op, name: str) -> str:
    """Python drawing `op` on ``canvas`` (``draw`` its ImageDraw), printing its measurement;
    `name` is the variable of a zoom's result."""
    label = repr(op.label)
    if op.op == "point":
        x, y = op.at
        return (
            f"draw.ellipse(({x - DOT}, {y - DOT}, {x + DOT}, {y + DOT}), fill=(255, 0, 0))\n"
            f"draw.text(({x + DOT + 2}, {max(0, y - DOT)}), {label}, fill=(255, 0, 0))\n"
            f"print({label}, 'at', ({x}, {y}))\n"
        )
    if op.op == "line":
        x1, y1, x2, y2 = op.at
        return (
            f"draw.line(({x1}, {y1}, {x2}, {y2}), fill=(0, 0, 255), width=3)\n"
            f"print({label}, 'length:', round(math.dist(({x1}, {y1}), ({x2}, {y2})), 1), 'px')\n"
        )
    x1, y1, x2, y2 = op.at
    if op.op == "box":
        return (
            f"draw.rectangle(({x1}, {y1}, {x2}, {y2}), outline=(255, 0, 0), width=3)\n"
            f"draw.text(({x1}, {max(0, y1 - 12)}), {label}, fill=(255, 0, 0))\n"
            f"print({label}, 'box:', {x2 - x1}, 'x', {y2 - y1}, 'px')\n"
        )
    if op.op == "mask":
        return (
            "keep = Image.new('L', canvas.size, 0)\n"
            f"ImageDraw.Draw(keep).rectangle(({x1}, {y1}, {x2}, {y2}), fill=255)\n"
            "canvas = Image.composite(canvas, ImageEnhance.Brightness(canvas).enhance(0.3), keep)\n"
            "draw = ImageDraw.Draw(canvas)\n"
            f"print({label}, 'kept:', "
            f"round({(x2 - x1) * (y2 - y1)} / (canvas.width * canvas.height), 3), "
            "'of the image')\n"
        )
    factor = op.factor
    return (
        f"{name} = input_image.crop(({x1}, {y1}, {x2}, {y2}))\n"
        f"{name} = {name}.resize("
        f"(round({name}.width * {factor}), round({name}.height * {factor})))\n"
        f"print({label}, 'zoomed {factor}x:', {name}.size)\n{name}.show()\n"
    )


def _turn(why: str, code: str) -> str:
    return f"<think>{why}</think>\n<code>\n```python\n{code}```\n</code>"


def _why(op: Op) -> str:
    return {
        "point": f"I mark the {op.label} to locate it precisely.",
        "line": f"I draw the {op.label} and measure it.",
        "box": f"I outline the {op.label} to see where it lies.",
        "mask": f"I dim everything but the {op.label} to focus on it.",
        "zoom": f"I enlarge the {op.label} to read its details.",
    }[op.op]


def draw_turns(ops: list[Op], difficulty: str, max_ops: int) -> list[str]:
    """The scripted code turns (see the module docstring)."""
    used = ops[:max_ops]
    if difficulty == "medium":
        body = "".join(op_code(op, f"zoom{i}") for i, op in enumerate(used))
        shown = "" if used[-1].op == "zoom" and len(used) == 1 else "canvas.show()\n"
        return [_turn("I mark what the question needs on the image.", SETUP + body + shown)]
    turns = []
    for i, op in enumerate(used):
        code = (SETUP if i == 0 else "") + op_code(op, f"zoom{i}")
        turns.append(_turn(_why(op), code if op.op == "zoom" else code + "canvas.show()\n"))
    return turns


async def draw_trajectory(
    task: Task,
    ops: list[Op],
    difficulty: str,
    strong: Asker,
    sandbox: Any,
    episode: EpisodeConfig,
    config: AtomicConfig,
) -> Trajectory:
    """Run the drawing trajectory of `task` in `sandbox` (which holds the model-sized images)."""
    policy = AtomicPolicy(draw_turns(ops, difficulty, config.max_boxes), strong)
    return await arun_episode(policy, task, sandbox, episode)
