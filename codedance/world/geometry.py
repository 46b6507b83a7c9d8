"""Geometry and measurement against a drawn scale bar (its length is given in the question).

easy: a horizontal blue line a whole multiple (1–4) of the scale bar, drawn right above it.
medium: a blue line at any angle and length; answers to 0.01 cm.
hard: the area of a rotated blue rectangle in cm², with a black frame around the picture (the
largest black thing is then the frame, not the scale bar).
Answers are graded ``relaxed`` (5 %). Not handled: angles, perspective, curved shapes.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import ImageDraw

from codedance.types import AnswerKind
from codedance.world.base import Difficulty, Draft, skill
from codedance.world.draw import PALETTE, canvas, to_image

LINE_Q = "The black scale bar is {unit} cm long. How long is the blue line, in cm?"
AREA_Q = "The black scale bar is {unit} cm long. What is the area of the blue rectangle, in cm²?"
BLUE = PALETTE["blue"]


def _fmt(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _scale(draw: ImageDraw.ImageDraw, x: int, y: int, length: int) -> None:
    draw.rectangle((x, y, x + length - 1, y + 5), fill=(0, 0, 0))


@skill("geometry")
def geometry(rng: np.random.Generator, difficulty: Difficulty) -> Draft:
    unit = int(rng.choice([1, 2, 5, 10]))
    w, h = (392, 308) if difficulty is Difficulty.EASY else (644, 476)
    pil = canvas(w, h)
    draw = ImageDraw.Draw(pil)
    scale_px = int(rng.integers(50, 90))
    sx, sy = 30, h - 30
    _scale(draw, sx, sy, scale_px)
    if difficulty is Difficulty.EASY:
        k = int(rng.integers(1, 5))
        draw.rectangle((sx, sy - 40, sx + k * scale_px - 1, sy - 36), fill=BLUE)
        return Draft(to_image(pil), LINE_Q.format(unit=unit), _fmt(k * unit), AnswerKind.RELAXED)
    if difficulty is Difficulty.MEDIUM:
        length = float(rng.uniform(120, 380))
        angle = float(rng.uniform(0, math.pi))
        cx, cy = w / 2 + rng.uniform(-60, 60), h / 2 - 40 + rng.uniform(-40, 40)
        dx, dy = length / 2 * math.cos(angle), length / 2 * math.sin(angle)
        corners = _rect(cx, cy, length, 5, angle)
        draw.polygon(corners, fill=BLUE)
        del dx, dy
        return Draft(
            to_image(pil),
            LINE_Q.format(unit=unit),
            _fmt(length / scale_px * unit),
            AnswerKind.RELAXED,
        )
    draw.rectangle((0, 0, w - 1, h - 1), outline=(0, 0, 0), width=3)
    a, b = float(rng.uniform(90, 220)), float(rng.uniform(60, 140))
    angle = float(rng.uniform(0, math.pi))
    draw.polygon(_rect(w / 2, h / 2 - 30, a, b, angle), fill=BLUE)
    area = a * b / scale_px**2 * unit**2
    return Draft(to_image(pil), AREA_Q.format(unit=unit), _fmt(area), AnswerKind.RELAXED)


def _rect(cx: float, cy: float, a: float, b: float, angle: float) -> list[tuple[float, float]]:
    """Corners of an a×b rectangle centred at (cx, cy), its side a at `angle` radians."""
    ux, uy = math.cos(angle), math.sin(angle)
    vx, vy = -uy, ux
    return [
        (cx + sa * a / 2 * ux + sb * b / 2 * vx, cy + sa * a / 2 * uy + sb * b / 2 * vy)
        for sa, sb in ((1, 1), (1, -1), (-1, -1), (-1, 1))
    ]
