"""The teacher's counting: colour threshold, connected components, shape by box fill, touching
objects split by area. Its first mistakes: a loose colour threshold (look-alike colours join
in) or counting blobs without splitting touching ones; both show in the printed blob table.
``compact_code=True`` writes the same computation inline in 8–12 lines (`_compact_body`)."""

from __future__ import annotations

import re

import numpy as np

from codedance.teacher import pixels
from codedance.teacher.program import Step, compact, results, snippet
from codedance.teacher.view import TaskView
from codedance.world.draw import PALETTE

MISTAKES = ("loose", "nosplit")
COMPACT = True  # `steps` takes ``compact_code=``
HELPERS = (pixels.color_mask, pixels.blobs, pixels.shape_of, pixels.count_shapes)
Q = re.compile(r"How many (\w+) (\w+?)s are there")
BLOB = re.compile(r"area=(\d+) fill=([\d.]+) rgb=\((\d+), (\d+), (\d+)\)")
BLOB_COMPACT = re.compile(r"^blob (\d+) ([\d.]+) \[(\d+), (\d+), (\d+)\]", re.MULTILINE)
# shape_of's box-fill thresholds as a condition on ``f``
FILL = {"square": "f > 0.9", "circle": "0.66 < f <= 0.9", "triangle": "f <= 0.66"}


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
        (
            "    print(f\"blob {i}: area={b['area']} fill={b['fill']} rgb={b['rgb']} "
            'shape={shape_of(b)}")'
        ),
        f"print('RESULT:', count_shapes(found, {shape!r}, split={split}))",
    ]
    if show:
        lines += [
            "vis = img.copy()",
            "for b in found:",
            "    x, y, w, h = b['box']",
            "    cv2.rectangle(vis, (x, y), (x + w, y + h), (0, 0, 0), 2)",
            "Image.fromarray(vis).show()",
        ]
    return "\n".join(lines)


def _compact_body(color: str, shape: str, tol: int, split: bool, show: bool) -> str:
    """`_body` inline: the mask, components (area, box fill, box aspect, label), the table when
    `show`, the count (split as `pixels.count_shapes` does)."""
    cond = FILL[shape]
    lines = [
        f"m = (np.abs(img.astype(int) - {PALETTE[color]}).max(2) <= {tol}).astype(np.uint8)",
        "n, lab, st, _ = cv2.connectedComponentsWithStats(m)",
        (
            "b = [(a, a / (w * h), w / h, i) for i, (x, y, w, h, a) in enumerate(st.tolist()) "
            "if i and a >= 20]"
        ),
    ]
    if show:
        lines += [
            "for a, f, r, i in b:",
            "    print('blob', a, round(f, 2), img[lab == i].mean(0).astype(int).tolist())",
        ]
    if split:
        lines += [
            f"k = [a for a, f, r, i in b if {cond}]",
            f"k = [a for a, f, r, i in b if {cond} and 0.8 <= r <= 1.25] or k",
            "med = float(np.median(k)) if k else 1e9",
            (
                "print('RESULT:', sum(round(a / med) if a >= 1.6 * med else 1 "
                f"for a, f, r, i in b if a >= 1.6 * med or {cond}))"
            ),
        ]
    else:
        lines += [f"print('RESULT:', sum({cond} for a, f, r, i in b))"]
    return "\n".join(lines)


def _check(color: str):
    ref = np.array(PALETTE[color])

    def check(feedback: str) -> str | None:
        found = BLOB.findall(feedback) + BLOB_COMPACT.findall(feedback)
        rows = [(int(a), np.array([int(r), int(g), int(b)])) for a, _f, r, g, b in found]
        if any(np.abs(rgb - ref).max() > 30 for _a, rgb in rows):
            return f"some blobs are not {color} at all: the colour threshold is too loose"
        areas = sorted(a for a, _rgb in rows)
        if areas and max(areas) >= 1.6 * float(np.median(areas)):
            return "one blob is about twice the usual size: touching objects were counted as one"
        return None

    return check


def _zoom(color: str) -> str:
    """The hard tasks' last tool step: not the count again but a look at the counted blobs,
    cropped from the input and enlarged, so touching objects and shapes can be seen. It prints a
    ``check:`` line and no ``RESULT``, so the answer stays the count's."""
    return "\n".join(
        [
            f"m = (np.abs(img.astype(int) - {PALETTE[color]}).max(2) <= 40).astype(np.uint8)",
            "st = cv2.connectedComponentsWithStats(m)[2]",
            "boxes = [(x, y, x + w, y + h) for x, y, w, h, a in st[1:].tolist() if a >= 20]",
            "H, W = img.shape[:2]",
            "x0, y0 = max(0, min(b[0] for b in boxes) - 8), max(0, min(b[1] for b in boxes) - 8)",
            "x1, y1 = min(W, max(b[2] for b in boxes) + 8), min(H, max(b[3] for b in boxes) + 8)",
            f"print('check: the', len(boxes), '{color} blobs lie in', (x0, y0, x1, y1))",
            "crop = input_image.crop((x0, y0, x1, y1))",
            "crop.resize((crop.width * 2, crop.height * 2)).show()",
        ]
    )


def steps(
    view: TaskView, hard: bool, mistake: str | None, compact_code: bool = False
) -> list[Step]:
    color, shape = target(view)

    def code(tol: int, split: bool, show: bool) -> str:
        if compact_code:
            return compact(_compact_body(color, shape, tol, split, show))
        return snippet(_body(color, shape, tol, split, show), HELPERS)

    good = Step(
        f"I threshold the {color} pixels, label the connected components and keep the "
        f"{shape}s by how much of their box they fill"
        + (", splitting blobs that are touching objects by their area." if hard else "."),
        code(40, hard, show=hard),
    )
    if not hard:
        return [good]
    verify = Step(
        f"Before answering, let me look at the {color} blobs enlarged, to see the touching "
        "ones and the shapes for myself.",
        compact(_zoom(color)) if compact_code else snippet(_zoom(color), HELPERS),
    )
    if mistake == "loose":
        first = Step(
            f"I'll take everything roughly {color} and count the blobs.",
            code(110, False, show=True),
            _check(color),
            good,
        )
        return [first, verify]
    if mistake == "nosplit":
        first = Step(
            f"I threshold the {color} pixels and count the connected components.",
            code(40, False, show=True),
            _check(color),
            good,
        )
        return [first, verify]
    return [good, verify]


def answer(view: TaskView, feedback: str) -> str | None:
    found = results(feedback)
    return found[-1] if found else None
