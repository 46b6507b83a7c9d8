"""Dots: a small card of one background colour with a few white dots; the CPU testbed's skill.

The question's form says how hard it is, and the image is the same kind either way:

- easy: "Are there any white dots in the image?": always yes (every card has dots), so it is
  answerable without a tool by a policy that has learned the answer never varies. The testbed
  first asked the background colour (red, green or blue) here; its 0.6M-parameter policy did not
  learn to read it in 180 SFT steps (7 of 30 greedy answers right, chance), see docs/train.md.
- medium: "How many white dots are there in the image?" with 1–4 dots of 6×6 pixels (3×3 at the
  testbed policy's 56×56 view).
- hard: the same question with 2–9 dots of 2×2 pixels, below one pixel each at a 56×56 view; a
  count over the full-resolution image (a threshold and connected components) reads it exactly.

The card is 112×112; dots keep a gap of at least 3 pixels, so each is one connected component.
Not handled: dots of other colours, touching dots, larger canvases.
"""

from __future__ import annotations

import numpy as np
from PIL import ImageDraw

from codedance.types import AnswerKind
from codedance.world.base import Difficulty, Draft, skill
from codedance.world.draw import PALETTE, canvas, place, to_image

COLORS = ("red", "green", "blue")
SIZE = 112
YES_QUESTION = "Are there any white dots in the image?"
COUNT_QUESTION = "How many white dots are there in the image?"


@skill("dots")
def dots(rng: np.random.Generator, difficulty: Difficulty) -> Draft:
    color = COLORS[int(rng.integers(len(COLORS)))]
    if difficulty is Difficulty.MEDIUM:
        side, n = 6, int(rng.integers(1, 5))
    else:
        side, n = 2, int(rng.integers(2, 10))
    pil = canvas(SIZE, SIZE, PALETTE[color])
    draw = ImageDraw.Draw(pil)
    for cx, cy in place(rng, n, side / 2 + 1, SIZE, SIZE, [], gap=3):
        x, y = int(cx - side / 2), int(cy - side / 2)
        draw.rectangle((x, y, x + side - 1, y + side - 1), fill=(255, 255, 255))
    if difficulty is Difficulty.EASY:
        return Draft(to_image(pil), YES_QUESTION, "yes", AnswerKind.TEXT)
    return Draft(to_image(pil), COUNT_QUESTION, str(n), AnswerKind.COUNT)
