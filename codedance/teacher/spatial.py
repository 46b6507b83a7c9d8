"""The teacher's spatial relations: find each named object by colour and shape, compare
centres. First mistake: a loose colour threshold that finds two candidates for the reference
object (its look-alike-coloured twin), noticed from the candidate list. ``compact_code=True``
writes a four-line ``find`` inline instead of the pasted helpers (`COMPACT_FINDER`)."""

from __future__ import annotations

import re

import numpy as np

from codedance.teacher import pixels
from codedance.teacher.program import Step, compact, results, snippet
from codedance.teacher.view import TaskView
from codedance.world.draw import PALETTE

MISTAKES = ("loose",)
COMPACT = True  # `steps` takes ``compact_code=``
HELPERS = (pixels.color_mask, pixels.blobs, pixels.shape_of)
LEFT = re.compile(r"Is the (\w+) (\w+) to the left of the (\w+) (\w+)\?")
NEAR = re.compile(r"Which object is closest to the (\w+) (\w+)\?")
FINDER = """
def find(color, shape, tol=40):
    cands = [b for b in blobs(color_mask(img, RGB[color], tol), img) if shape_of(b) == shape]
    print(f"{color} {shape}: {len(cands)} candidate(s) at", [b['centre'] for b in cands])
    return cands[0]['centre'] if cands else None
"""

COMPACT_FINDER = """
def find(rgb, shape, tol=40):
    n, lab, st, c = cv2.connectedComponentsWithStats((np.abs(img.astype(int) - rgb).max(2) <= \
tol).astype(np.uint8))
    s = np.where(st[:, 4] > 0.9 * st[:, 2] * st[:, 3], 'square', \
np.where(st[:, 4] > 0.66 * st[:, 2] * st[:, 3], 'circle', 'triangle'))
    p = [c[i] for i in np.argsort(-st[:, 4], kind='stable') \
if i and st[i, 4] >= 20 and s[i] == shape]
    print(shape, len(p), 'candidate(s)')
    return p[0]
"""


def _locate(img: np.ndarray, color: str, shape: str, tol: int = 40) -> tuple[float, float] | None:
    cands = [
        b
        for b in pixels.blobs(pixels.color_mask(img, PALETTE[color], tol), img)
        if pixels.shape_of(b) == shape
    ]
    return cands[0]["centre"] if cands else None


def glance(view: TaskView, img: np.ndarray) -> str:
    m = LEFT.search(view.question)
    if m:
        a, b = _locate(img, m.group(1), m.group(2)), _locate(img, m.group(3), m.group(4))
        if a is None or b is None:
            return "B"
        return "A" if a[0] < b[0] else "B"
    return _nearest_in_process(view, img)


def _nearest_in_process(view: TaskView, img: np.ndarray) -> str:
    m = NEAR.search(view.question)
    assert m, view.question
    ref = _locate(img, m.group(1), m.group(2))
    best, letter = float("inf"), view.choices[0][0]
    for key, name in view.choices:
        c = _locate(img, *name.split())
        if ref is not None and c is not None and np.hypot(c[0] - ref[0], c[1] - ref[1]) < best:
            best, letter = float(np.hypot(c[0] - ref[0], c[1] - ref[1])), key
    return letter


def _body(view: TaskView, tol: int, compact_code: bool = False) -> str:
    """Find the reference object, then compare or measure to each option. Full style: the
    pasted helpers' `FINDER` over colour names; compact: `COMPACT_FINDER` (largest matching
    component's centre) over RGB triples."""
    m = NEAR.search(view.question) or LEFT.search(view.question)
    assert m
    colour = (lambda c: str(PALETTE[c])) if compact_code else repr
    head = (
        [COMPACT_FINDER.strip()]
        if compact_code
        else [f"RGB = { {c: PALETTE[c] for c in PALETTE} }", FINDER.strip()]
    )
    lines = [*head, f"ref = find({colour(m.group(1))}, {m.group(2)!r}, tol={tol})"]
    if m.re is LEFT:
        lines += [
            f"other = find({colour(m.group(3))}, {m.group(4)!r})",
            "print('RESULT:', 'A' if ref[0] < other[0] else 'B')",
        ]
    elif compact_code:
        lines += ["d = {}"]
        for key, name in view.choices:
            c, s = name.split()
            lines += [f"d[{key!r}] = np.hypot(*(find({colour(c)}, {s!r}) - ref))"]
        lines += ["print('RESULT:', min(d, key=d.get))"]
    else:
        lines += ["dists = {}"]
        for key, name in view.choices:
            c, s = name.split()
            lines += [
                f"p = find({c!r}, {s!r})",
                f"dists[{key!r}] = float(np.hypot(p[0] - ref[0], p[1] - ref[1]))",
            ]
        lines += [
            "print('distances:', {k: round(v, 1) for k, v in dists.items()})",
            "print('RESULT:', min(dists, key=dists.get))",
        ]
    return "\n".join(lines)


def _check(feedback: str) -> str | None:
    first = re.search(r"^(?:\w+ \w+:|\w+) (\d+) candidate", feedback, re.MULTILINE)
    if first and int(first.group(1)) > 1:
        return "the reference object has more than one candidate: my colour threshold is too loose"
    return None


def steps(
    view: TaskView, hard: bool, mistake: str | None, compact_code: bool = False
) -> list[Step]:
    def code(tol: int) -> str:
        return (
            compact(_body(view, tol, True)) if compact_code else snippet(_body(view, tol), HELPERS)
        )

    good = Step("I locate each object by its colour and shape and compare the centres.", code(40))
    if not hard:
        return [good]
    verify = Step(
        "The two nearest candidates are close; let me "
        + (
            "measure once more with a tighter colour tolerance."
            if compact_code
            else "print the distances once more, measured between centres."
        ),
        code(30),
    )
    if mistake == "loose":
        first = Step(
            "I find the objects with a generous colour tolerance and measure distances.",
            code(110),
            _check,
            good,
        )
        return [first, verify]
    return [good, verify]


def answer(view: TaskView, feedback: str) -> str | None:
    found = results(feedback)
    return found[-1] if found else None
