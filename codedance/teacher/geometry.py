"""The teacher's measurement: the scale bar's length in pixels, the blue object's length (long
side of its minimum-area rectangle) or area (pixel count), converted to cm. First mistake: it
takes the widest black component as the scale, which in hard pictures is the frame; the
printed scale box spanning the whole image gives it away. ``compact_code=True`` writes the
same measurement inline in 10–12 lines (`_compact_body`)."""

from __future__ import annotations

import re

import numpy as np

from codedance.teacher import pixels
from codedance.teacher.program import Step, compact, results, snippet
from codedance.teacher.view import TaskView
from codedance.world.draw import PALETTE

MISTAKES = ("loose",)
COMPACT = True  # `steps` takes ``compact_code=``
HELPERS = (pixels.color_mask, pixels.blobs, pixels.scale_bar, pixels.long_side)
UNIT = re.compile(r"scale bar is ([\d.]+) cm")


def _unit(view: TaskView) -> float:
    m = UNIT.search(view.question)
    if not m:
        raise ValueError(f"no scale in {view.question!r}")
    return float(m.group(1))


def _fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def glance(view: TaskView, img: np.ndarray) -> str:
    bar, _ = pixels.scale_bar(img)
    blue = pixels.color_mask(img, PALETTE["blue"], 40)
    length = pixels.long_side(blue)
    ratio = length / bar if bar else 0.0
    return (
        _fmt(round(ratio) * _unit(view))
        if abs(ratio - round(ratio)) < 0.15
        else _fmt(ratio * _unit(view))
    )


def _body(view: TaskView, skip_border: bool) -> str:
    unit = _unit(view)
    lines = [
        f"bar, box = scale_bar(img, skip_border={skip_border})",
        "print('scale bar:', bar, 'px, box', box, 'image', img.shape[1], 'x', img.shape[0])",
        f"blue = color_mask(img, {PALETTE['blue']}, 40)",
    ]
    if "area" in view.question:
        lines += [
            "contours, _ = cv2.findContours(blue, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)",
            "inner = sum(cv2.contourArea(c) for c in contours)  # through boundary pixel centres",
            "px = (int(blue.sum()) + inner) / 2  # pixel count overshoots by half the outline",
            "print('blue pixels:', int(blue.sum()), 'area estimate:', round(px, 1))",
            f"print('RESULT:', round(px * ({unit} / bar) ** 2, 2))",
        ]
    else:
        lines += [
            "length = long_side(blue)",
            "print('blue length:', round(length, 1), 'px')",
            f"print('RESULT:', round(length / bar * {unit}, 1))",
        ]
    lines += [
        "vis = img.copy()",
        "x, y, w, h = box",
        "cv2.rectangle(vis, (x - 3, y - 3), (x + w + 3, y + h + 3), (255, 0, 0), 2)",
        "Image.fromarray(vis).show()",
    ]
    return "\n".join(lines)


def _compact_body(view: TaskView, skip_border: bool) -> str:
    """`_body` inline: black components (all channels ≤ 60, area ≥ 10), the widest flat one off
    the border as the bar (with `skip_border` False: the widest of all, as `pixels.scale_bar`),
    then the blue mask's long side or area against it."""
    unit = _unit(view)
    keep = (
        "a >= 10 and w > 3 * h and x > 0 and y > 0 and x + w < W and y + h < H"
        if skip_border
        else "a >= 10"
    )
    lines = [
        "H, W = img.shape[:2]",
        "n, lab, st, c = cv2.connectedComponentsWithStats((img.max(2) <= 60).astype(np.uint8))",
        f"bar, box = max((w, (x, y, w, h)) for x, y, w, h, a in st[1:].tolist() if {keep})",
        "print('scale bar:', bar, 'px, box', box, 'image', W, 'x', H)",
        f"blue = (np.abs(img.astype(int) - {PALETTE['blue']}).max(2) <= 40).astype(np.uint8)",
    ]
    if "area" in view.question:
        lines += [
            "cs, _ = cv2.findContours(blue, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)",
            "px = (int(blue.sum()) + sum(cv2.contourArea(k) for k in cs)) / 2",
            f"print('RESULT:', round(px * ({unit} / bar) ** 2, 2))",
        ]
    else:
        lines += [
            (
                "print('RESULT:', round(max(cv2.minAreaRect(cv2.findNonZero(blue))[1]) "
                f"/ bar * {unit}, 1))"
            )
        ]
    return "\n".join(lines)


def _check(feedback: str) -> str | None:
    m = re.search(
        r"scale bar: (\d+) px, box \((\d+), (\d+), (\d+), (\d+)\) image (\d+) x (\d+)", feedback
    )
    if m and int(m.group(4)) >= int(m.group(6)) - 2:
        return "the 'scale bar' spans the whole image: that is the frame, not the bar"
    return None


def _zoom() -> str:
    """The hard tasks' last tool step: not the measurement again but a look at what it used, the
    scale bar and the blue shape, cropped from the input and enlarged. It prints a ``check:`` line
    and no ``RESULT``, so the answer stays the measurement's."""
    return "\n".join(
        [
            "H, W = img.shape[:2]",
            "st = cv2.connectedComponentsWithStats((img.max(2) <= 60).astype(np.uint8))[2]",
            "flat = [(w, (x, y, w, h)) for x, y, w, h, a in st[1:].tolist()",
            "        if a >= 10 and w > 3 * h and x > 0 and y > 0 and x + w < W and y + h < H]",
            "bar, (bx, by, bw, bh) = max(flat)",
            f"ys, xs = np.nonzero((np.abs(img.astype(int) - {PALETTE['blue']}).max(2) <= 40))",
            "shape = (int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max()))",
            "print('check: scale bar', bar, 'px at', (bx, by), '; blue shape in', shape)",
            "x0, y0 = max(0, min(bx, int(xs.min())) - 10), max(0, min(by, int(ys.min())) - 10)",
            (
                "x1, y1 = min(W, max(bx + bw, int(xs.max()) + 1) + 10), "
                "min(H, max(by + bh, int(ys.max()) + 1) + 10)"
            ),
            "crop = input_image.crop((x0, y0, x1, y1))",
            (
                "(crop.resize((crop.width * 2, crop.height * 2)) if max(crop.size) < 400 "
                "else crop).show()"
            ),
        ]
    )


def steps(
    view: TaskView, hard: bool, mistake: str | None, compact_code: bool = False
) -> list[Step]:
    def code(skip_border: bool) -> str:
        return (
            compact(_compact_body(view, skip_border))
            if compact_code
            else snippet(_body(view, skip_border), HELPERS)
        )

    good = Step("I measure the scale bar in pixels and the blue shape against it.", code(True))
    if not hard:
        return [good]
    verify = Step(
        "Before answering, let me look at the scale bar and the blue shape I measured, "
        "enlarged, to be sure I measured the right things.",
        compact(_zoom()) if compact_code else snippet(_zoom(), HELPERS),
    )
    if mistake == "loose":
        first = Step(
            "The scale bar should be the widest black thing; I measure it and the shape.",
            code(False),
            _check,
            good,
        )
        return [first, verify]
    return [good, verify]


def answer(view: TaskView, feedback: str) -> str | None:
    found = results(feedback)
    return _fmt(float(found[-1])) if found else None
