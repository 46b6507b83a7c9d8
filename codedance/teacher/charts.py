"""The teacher's chart reading: the frame from the black spines, the y scale fitted to the tick
labels it reads (template matching), bars and line markers by the data colour, category names
found by matching them rendered in DejaVu Sans, pie shares by assigning the disc's pixels to the
legend's colours.

First mistakes on hard tasks: for a bar difference, taking the frame's top edge as the top tick's
value (it is not: matplotlib leaves a margin), noticed from the printed tick rows; for a pie, the
colour's pixels divided by the pie's bounding box instead of the disc, noticed when the shares add
up to about 79 % (π/4).
"""

from __future__ import annotations

import re

import numpy as np

from codedance.teacher import chartpix, glyphs, pixels
from codedance.teacher.program import Step, results, snippet
from codedance.teacher.view import TaskView

MISTAKES = ("top_tick",)  # the pie's own first mistake is chosen in `steps`
HELPERS = (
    pixels.color_mask,
    pixels.blobs,
    glyphs.glyph_templates,
    glyphs.read_glyphs,
    chartpix.axes_frame,
    chartpix._runs,
    chartpix.y_scale,
    chartpix.robust_line,
    chartpix.main_color,
    chartpix.bar_tops,
    chartpix.x_ticks,
    chartpix.find_text,
    chartpix.pie_shares,
)
EXTREME = re.compile(r"which category has the (highest|lowest) ")
VALUE = re.compile(r"In the bar chart, what is the .+ of (.+)\?$")
DIFF = re.compile(r"In the bar chart, what is the .+ of (.+) minus that of (.+)\?$")
LINE = re.compile(r"In the line chart, what is the .+ in (\d+)\?$")
PIE = re.compile(r"what percentage of the total is (.+)\?$")
LABELS = "(left - 30, bottom + 4, right + 30, min(img.shape[0], bottom + 40))"
COMMON = """frame = axes_frame(img)
left, top, right, bottom = frame
ticks, (a, b) = y_scale(img, frame)
print('frame', frame, 'y ticks (row, value):', ticks)
rgb = main_color(img, frame)
"""


def _bar_value(name: str, var: str) -> str:
    return (
        f"score, x, _y = find_text(img, {name!r}, {LABELS})\n"
        f"bx, by = min(tops, key=lambda t: abs(t[0] - x))\n"
        f"{var} = a * by + b\n"
        f"print({name!r}, 'label at x =', round(x), '(match', round(score, 2), ') bar top row',"
        f" by, '->', round({var}, 2))\n"
    )


def _body(view: TaskView, mistake: str | None = None) -> str:
    q = view.question
    if m := DIFF.search(q):
        head = COMMON + "tops = bar_tops(img, frame, rgb)\nprint('bars (x, top row):', tops)\n"
        if mistake == "top_tick":
            head += (
                "top_value = max(v for _r, v in ticks)\n"
                "print('frame top row', top, 'taken as', top_value)\n"
                "a, b = -top_value / (bottom - top), top_value * bottom / (bottom - top)\n"
            )
        return (
            head
            + _bar_value(m.group(1), "va")
            + _bar_value(m.group(2), "vb")
            + "print('RESULT:', round(va - vb, 2))"
        )
    if m := VALUE.search(q):
        return (
            COMMON
            + "tops = bar_tops(img, frame, rgb)\nprint('bars (x, top row):', tops)\n"
            + _bar_value(m.group(1), "v")
            + "print('RESULT:', round(v, 2))"
        )
    if m := LINE.search(q):
        return (
            COMMON + "xt = x_ticks(img, frame)\nprint('x ticks (x, label):', xt)\n"
            "c, d = robust_line([(x, float(t)) for x, t in xt if t.isdigit()])\n"
            f"x = int(round(({m.group(1)} - d) / c))  # labels misread by one digit are outliers\n"
            "print('tick of', " + m.group(1) + ", 'at x =', x)\n"
            "near = color_mask(img[top + 1:bottom, x - 1:x + 2], rgb, 30)\n"
            "y = top + 1 + float(np.nonzero(near)[0].mean())\n"
            "print('marker centre row', round(y, 1))\n"
            "print('RESULT:', round(a * y + b, 2))"
        )
    if m := PIE.search(q):
        name = m.group(1)
        lines = ["box, shares = pie_shares(img)", "print('pie box', box)"]
        if mistake == "loose":
            lines += [
                "area = box[2] * box[3]  # the pie's box",
                (
                    "shares = [(y, c, 100.0 * color_mask(img, c, 40).sum() / area) "
                    "for y, c, _s in shares]"
                ),
            ]
        lines += [
            "for y, c, s in shares:",
            "    print(f'legend patch at row {y}: colour {c}, share {s:.1f} %')",
            "print('total share', round(sum(s for _y, _c, s in shares), 1), '%')",
            "x, y, w, h = box",
            f"score, tx, ty = find_text(img, {name!r}, (x + w, 0, img.shape[1], img.shape[0]))",
            f"print({name!r}, 'in the legend at row', round(ty), '(match', round(score, 2), ')')",
            "print('RESULT:', round(min(shares, key=lambda s: abs(s[0] - ty))[2], 2))",
        ]
        return "\n".join(lines)
    raise ValueError(f"not a chart question the teacher reads: {q!r}")


def glance(view: TaskView, img: np.ndarray) -> str:
    """Easy (which bar is highest/lowest): the same routines, run in-process."""
    m = EXTREME.search(view.question)
    if not m:
        raise ValueError(f"not an easy chart question: {view.question!r}")
    frame = chartpix.axes_frame(img)
    left, _top, right, bottom = frame
    tops = chartpix.bar_tops(img, frame, chartpix.main_color(img, frame))
    bx, _ = (min if m.group(1) == "highest" else max)(tops, key=lambda t: t[1])
    region = (left - 30, bottom + 4, right + 30, min(img.shape[0], bottom + 40))
    where = {k: chartpix.find_text(img, name, region)[1] for k, name in view.choices}
    return min(where, key=lambda k: abs(where[k] - bx))


def _check(feedback: str) -> str | None:
    total = re.search(r"total share ([\d.]+) %", feedback)
    if total and not 99 <= float(total.group(1)) <= 101:
        return (
            f"the shares add up to {total.group(1)} %, not 100 %: I divided by the pie's "
            "bounding box, not by the disc"
        )
    top = re.search(r"frame top row (\d+) taken as", feedback)
    ticks = [
        int(r)
        for r in re.findall(r"\((\d+), [\d.]+\)", feedback.split("y ticks", 1)[-1].split("\n")[0])
    ]
    if top and ticks and abs(min(ticks) - int(top.group(1))) > 3:
        return (
            f"the top tick is at row {min(ticks)}, not at the frame's top (row {top.group(1)}): "
            "the axis does not end at its last label"
        )
    return None


def _cross_check(view: TaskView) -> str:
    """The hard tasks' last tool step: not the measurement again but a check of what it rests on
    (the fitted axis against every label read; for a pie, how clearly the name picks its legend
    entry). It prints ``check:`` lines and no ``RESULT``, so the answer stays the measurement's."""
    q = view.question
    if m := PIE.search(q):
        return (
            "box, shares = pie_shares(img)\nx, y, w, h = box\n"
            f"score, tx, ty = find_text(img, {m.group(1)!r}, "
            "(x + w, 0, img.shape[1], img.shape[0]))\n"
            "gaps = sorted(round(abs(r - ty)) for r, _c, _s in shares)\n"
            "print('check: name matched with score', round(score, 2), '; legend patches', gaps, "
            "'rows from it')"
        )
    if LINE.search(q):
        return (
            "frame = axes_frame(img)\nxt = x_ticks(img, frame)\n"
            "pairs = [(x, float(t)) for x, t in xt if t.isdigit()]\nc, d = robust_line(pairs)\n"
            "on = sum(abs(c * x + d - t) < 0.5 for x, t in pairs)\n"
            "print('check:', on, 'of', len(pairs), 'year labels lie on the fitted axis')"
        )
    return (
        "frame = axes_frame(img)\nticks, (a, b) = y_scale(img, frame)\n"
        "step = min(abs(v - u) for (_r, v), (_q, u) in zip(ticks, ticks[1:])) "
        "if len(ticks) > 1 else 1.0\n"
        "on = sum(abs(a * r + b - v) < 0.1 * step for r, v in ticks)\n"
        "print('check:', on, 'of', len(ticks), 'tick labels lie on the fitted scale')"
    )


def steps(view: TaskView, hard: bool, mistake: str | None) -> list[Step]:
    good = Step(
        "I find the axes, read the tick labels to fit the scale, locate the named category "
        "and measure it in pixels.",
        snippet(_body(view), HELPERS),
    )
    if "pie chart" in view.question:
        good = Step(
            "I assign the pie's pixels to the legend colours, then find the named slice's "
            "legend entry.",
            snippet(_body(view), HELPERS),
        )
    if not hard:
        return [good]
    verify = Step(
        "Before answering, let me check what the reading rests on: "
        + (
            "that the name picks one legend entry clearly."
            if PIE.search(view.question)
            else "that the fitted axis agrees with the labels it was fitted to."
        ),
        snippet(_cross_check(view), HELPERS),
    )
    if mistake == "top_tick" and PIE.search(view.question):
        mistake = "loose"
    if mistake in ("top_tick", "loose"):
        think = (
            "I count the slice's colour and divide by the pie's size."
            if mistake == "loose"
            else "The frame spans the axis up to its largest label; I scale the bars by it."
        )
        return [Step(think, snippet(_body(view, mistake), HELPERS), _check, good), verify]
    return [good, verify]


def answer(view: TaskView, feedback: str) -> str | None:
    found = results(feedback)
    return found[-1] if found else None
