"""Spatial relations between named objects ("the red circle").

easy: two objects far apart, "Is X to the left of Y?" (A yes / B no).
medium: 4–5 objects, "Which object is closest to X?", the nearest clearly nearest (margin ≥ 30 %).
hard: 6–7 objects, a near tie (margin 6–20 %), and an object in X's look-alike colour with X's
shape (a loose colour threshold finds two X candidates).
Distances are between shape centres. Not handled: relations in depth, "between", occlusion.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import ImageDraw

from codedance.types import AnswerKind
from codedance.world.base import Difficulty, Draft, skill
from codedance.world.draw import LOOKALIKE, PALETTE, SHAPES, canvas, place, shape, to_image

LEFT_Q = "Is the {a} to the left of the {b}?"
NEAR_Q = "Which object is closest to the {a}?"
LETTERS = "ABCDEFG"


def _objects(rng: np.random.Generator, n: int, avoid: set[str]) -> list[tuple[str, str]]:
    pool = [(c, s) for c in PALETTE for s in SHAPES if c not in avoid]
    picks = rng.choice(len(pool), size=n, replace=False)
    return [pool[int(i)] for i in picks]


def _name(obj: tuple[str, str]) -> str:
    return f"{obj[0]} {obj[1]}"


@skill("spatial")
def spatial(rng: np.random.Generator, difficulty: Difficulty) -> Draft:
    for _ in range(200):
        draft = _attempt(rng, difficulty)
        if draft is not None:
            return draft
    raise RuntimeError("spatial: no layout met the margin constraints")  # pragma: no cover


def _attempt(rng: np.random.Generator, difficulty: Difficulty) -> Draft | None:
    w, h, r = {
        Difficulty.EASY: (364, 280, 26),
        Difficulty.MEDIUM: (560, 420, 20),
        Difficulty.HARD: (644, 476, 18),
    }[difficulty]
    n = {
        Difficulty.EASY: 2,
        Difficulty.MEDIUM: int(rng.integers(4, 6)),
        Difficulty.HARD: int(rng.integers(6, 8)),
    }[difficulty]
    objs = _objects(rng, n, avoid=set())
    ref = objs[0]
    if difficulty is Difficulty.HARD:
        twin = (LOOKALIKE[ref[0]], ref[1])
        objs = [o for o in objs if o != twin][: n - 1] + [twin]
    taken: list[tuple[float, float, float]] = []
    try:
        centres = place(rng, len(objs), r, w, h, taken, gap=14)
    except ValueError:
        return None
    if difficulty is Difficulty.EASY:
        (ax, _), (bx, _) = centres
        if abs(ax - bx) < 100:
            return None
        answer, choices = ("A" if ax < bx else "B"), (("A", "yes"), ("B", "no"))
        question = LEFT_Q.format(a=_name(objs[0]), b=_name(objs[1]))
    else:
        dists = sorted((math.dist(centres[0], c), i) for i, c in enumerate(centres) if i)
        margin = dists[1][0] / dists[0][0] - 1
        lo, hi = (0.3, 9.0) if difficulty is Difficulty.MEDIUM else (0.06, 0.2)
        if not lo <= margin <= hi:
            return None
        others = [i for i in range(1, len(objs))]
        picks = [dists[0][1], dists[1][1]] + [
            i for i in others if i not in (dists[0][1], dists[1][1])
        ]
        picks = picks[:4]
        order = [picks[int(j)] for j in rng.permutation(len(picks))]
        choices = tuple((LETTERS[k], _name(objs[i])) for k, i in enumerate(order))
        answer = LETTERS[order.index(dists[0][1])]
        question = NEAR_Q.format(a=_name(ref))
    pil = canvas(w, h)
    draw = ImageDraw.Draw(pil)
    for (c, s), (cx, cy) in zip(objs, centres):
        shape(draw, s, cx, cy, r, PALETTE[c])
    options = " ".join(f"{k}. {v}" for k, v in choices)
    return Draft(
        to_image(pil), f"{question} Options: {options}", answer, AnswerKind.CHOICE, choices
    )
