"""The teacher's counting: colour threshold, connected components, shape by box fill, touching
objects split by area. Its first mistakes: a loose colour threshold (look-alike colours join
in) or counting blobs without splitting touching ones; both show in the printed blob table."""

from __future__ import annotations

import re

import numpy as np

from codedance.teacher import pixels
from codedance.teacher.program import Step, results, snippet
from codedance.teacher.view import TaskView
from codedance.world.draw import PALETTE

MISTAKES = ("loose", "nosplit")
HELPERS = (pixels.color_mask, pixels.blobs, pixels.shape_of, pixels.count_shapes)
Q = re.compile(r"How many (\w+) (\w+?)s are there")
BLOB = re.compile(r"area=(\d+) fill=([\d.]+) rgb=\((\d+), (\d+), (\d+)\)")


def target(view: TaskView) -> tuple[str, str]:
    m = Q.search(view.question)
    if not m:
        raise ValueError(f"not a counting question: {view.question!r}")
    return m.group(1), m.group(2)


def glance(view: TaskView, img: np.ndarray) -> str:
    color, shape = target(view)
    found = pixels.blobs(pixels.color_mask(img, PALETTE[color], 40), img)
    return str(pixels.count_shapes(found, shape, split=False))


def _body(color: str, shape: str, tol: int, split: bool, show: bool) -> str:
    rgb = PALETTE[color]
    lines = [
        f"mask = color_mask(img, {rgb}, tol={tol})  # {color}",
        "found = blobs(mask, img)",
        "for i, b in enumerate(found):",
        "    print(f\"blob {i}: area={b['area']} fill={b['fill']} rgb={b['rgb']} shape={shape_of(b)}\")",
        f"print('RESULT:', count_shapes(found, {shape!r}, split={split}))",
    ]
    if show:
        lines += ["vis = img.copy()",
                  "for b in found:",
                  "    x, y, w, h = b['box']",
                  "    cv2.rectangle(vis, (x, y), (x + w, y + h), (0, 0, 0), 2)",
                  "Image.fromarray(vis).show()"]
    return "\n".join(lines)


def _check(color: str):
    ref = np.array(PALETTE[color])

    def check(feedback: str) -> str | None:
        rows = [(int(a), np.array([int(r), int(g), int(b)])) for a, _f, r, g, b in BLOB.findall(feedback)]
        if any(np.abs(rgb - ref).max() > 30 for _a, rgb in rows):
            return f"some blobs are not {color} at all: the colour threshold is too loose"
        areas = sorted(a for a, _rgb in rows)
        if areas and max(areas) >= 1.6 * float(np.median(areas)):
            return "one blob is about twice the usual size: touching objects were counted as one"
        return None

    return check


def steps(view: TaskView, hard: bool, mistake: str | None) -> list[Step]:
    color, shape = target(view)
    good = Step(f"I threshold the {color} pixels, label the connected components and keep the "
                f"{shape}s by how much of their box they fill"
                + (", splitting blobs that are touching objects by their area." if hard else "."),
                snippet(_body(color, shape, 40, hard, show=hard), HELPERS))
    if not hard:
        return [good]
    verify = Step("Let me double-check the count on an annotated copy before answering.",
                  snippet(_body(color, shape, 40, True, show=True), HELPERS))
    if mistake == "loose":
        first = Step(f"I'll take everything roughly {color} and count the blobs.",
                     snippet(_body(color, shape, 110, False, show=True), HELPERS), _check(color), good)
        return [first, verify]
    if mistake == "nosplit":
        first = Step(f"I threshold the {color} pixels and count the connected components.",
                     snippet(_body(color, shape, 40, False, show=True), HELPERS), _check(color), good)
        return [first, verify]
    return [good, verify]


def answer(view: TaskView, feedback: str) -> str | None:
    found = results(feedback)
    return found[-1] if found else None
