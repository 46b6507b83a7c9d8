"""Counting: how many objects of one colour and shape.

easy: 2–5 large targets and a few other objects on a small canvas, well apart.
medium: 5–12 targets among distractors of other colours and of other shapes in the same colour.
hard: 7–14 targets of one size, some drawn touching in pairs (one blob to a connected-components
count), plus look-alike-colour distractors (a loose colour threshold counts them).
Not handled: occlusion by other objects, varying target sizes at the hard end.
"""

from __future__ import annotations

import numpy as np
from PIL import ImageDraw

from codedance.types import AnswerKind
from codedance.world.base import Difficulty, Draft, skill
from codedance.world.draw import LOOKALIKE, PALETTE, SHAPES, canvas, place, shape, to_image

QUESTION = "How many {color} {shape}s are there in the image?"


@skill("counting")
def counting(rng: np.random.Generator, difficulty: Difficulty) -> Draft:
    colors = list(PALETTE)
    color = colors[int(rng.integers(len(colors)))]
    kind = SHAPES[int(rng.integers(len(SHAPES)))] if difficulty is not Difficulty.HARD else "circle"
    others_c = [c for c in colors if c not in (color, LOOKALIKE[color])]
    others_s = [s for s in SHAPES if s != kind]
    if difficulty is Difficulty.EASY:
        w, h, r, n, n_other, pairs = (
            364,
            280,
            26,
            int(rng.integers(2, 6)),
            int(rng.integers(1, 4)),
            0,
        )
    elif difficulty is Difficulty.MEDIUM:
        w, h, r, n, n_other, pairs = (
            644,
            476,
            18,
            int(rng.integers(5, 13)),
            int(rng.integers(5, 10)),
            0,
        )
    else:
        w, h, r, n, n_other, pairs = (
            728,
            532,
            17,
            int(rng.integers(7, 15)),
            int(rng.integers(6, 10)),
            0,
        )
        pairs = min(n // 2, int(rng.integers(1, 4)))
    pil = canvas(w, h)
    draw = ImageDraw.Draw(pil)
    taken: list[tuple[float, float, float]] = []
    singles = n - 2 * pairs
    # touching pairs first: one disc of radius 2r holds both circles, centre distance 1.85r
    for cx, cy in place(rng, pairs, 2 * r, w, h, taken, gap=10):
        angle = float(rng.uniform(0, np.pi))
        dx, dy = 0.925 * r * np.cos(angle), 0.925 * r * np.sin(angle)
        shape(draw, kind, cx - dx, cy - dy, r, PALETTE[color])
        shape(draw, kind, cx + dx, cy + dy, r, PALETTE[color])
    for cx, cy in place(rng, singles, r, w, h, taken, gap=10):
        shape(draw, kind, cx, cy, r, PALETTE[color])
    distractors: list[tuple[str, str]] = []
    for i in range(n_other):
        if difficulty is not Difficulty.EASY and i % 3 == 0:
            distractors.append((color, others_s[i % len(others_s)]))  # same colour, other shape
        elif difficulty is Difficulty.HARD and i % 3 == 1:
            distractors.append((LOOKALIKE[color], kind))  # look-alike colour, same shape
        else:
            distractors.append(
                (others_c[int(rng.integers(len(others_c)))], SHAPES[int(rng.integers(len(SHAPES)))])
            )
    for (c, s), (cx, cy) in zip(distractors, place(rng, len(distractors), r, w, h, taken, gap=10)):
        shape(draw, s, cx, cy, r, PALETTE[c])
    return Draft(to_image(pil), QUESTION.format(color=color, shape=kind), str(n), AnswerKind.COUNT)
