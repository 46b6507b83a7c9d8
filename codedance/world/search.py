"""Visual search: read a short code printed on a small coloured tag somewhere in a large canvas.

easy: a 1344×756 canvas, one tag with a 2-digit number in large type (readable at a glance).
medium: a 3836×2156 (4K-class) canvas full of grey clutter and grey decoy numbers; one tag with a
3-digit number about 10 px tall: a glance at a downscaled view cannot read it; crop and zoom.
hard: the same canvas, a 4-character code of digits and capitals (no I, O, M, W, V, which read
ambiguously at this size) on the tag, and a decoy tag in the look-alike colour carrying another
code (a loose colour threshold finds two tags).
Text is white DejaVu Sans, characters drawn apart (a template reader can separate them).
Not handled: rotated or curved text, several lines, tags that overlap clutter.
"""

from __future__ import annotations

import numpy as np
from PIL import ImageDraw

from codedance.types import AnswerKind
from codedance.world.base import Difficulty, Draft, skill
from codedance.world.draw import LOOKALIKE, PALETTE, canvas, font, place, to_image

QUESTION = "What is written on the small {color} tag?"
DIGITS = "0123456789"
CODE_CHARS = "23456789ACEFHKLNPRTUXY"
# colours whose look-alike is a different hue family enough for a 40-level tolerance
TAG_COLORS = ("red", "blue", "purple", "orange", "green")


def _code(rng: np.random.Generator, n: int, alphabet: str) -> str:
    return "".join(alphabet[int(i)] for i in rng.integers(len(alphabet), size=n))


def tag_size(value: str, size: int) -> tuple[int, int]:
    """(width, height) of the tag holding `value` at font `size`."""
    f = font(size)
    width = sum(f.getlength(ch) for ch in value) + (len(value) - 1) * gap(size)
    return int(width + 1.2 * size), int(1.6 * size)


def gap(size: int) -> float:
    return max(2.0, 0.25 * size)


def draw_tag(
    draw: ImageDraw.ImageDraw,
    x: float,
    y: float,
    value: str,
    size: int,
    color: tuple[int, int, int],
) -> None:
    w, h = tag_size(value, size)
    draw.rectangle((x, y, x + w - 1, y + h - 1), fill=color)
    cx = x + 0.6 * size
    for ch in value:
        draw.text((cx, y + 0.3 * size), ch, fill=(255, 255, 255), font=font(size))
        cx += font(size).getlength(ch) + gap(size)


def _clutter(
    rng: np.random.Generator,
    draw: ImageDraw.ImageDraw,
    w: int,
    h: int,
    n: int,
    taken: list[tuple[float, float, float]],
    size: int,
) -> None:
    """Grey boxes, lines and decoy numbers (never in palette colours), avoiding `taken`."""
    for _ in range(n):
        x, y = float(rng.uniform(0, w - 60)), float(rng.uniform(0, h - 40))
        if any((x - a) ** 2 + (y - b) ** 2 < (c + 60) ** 2 for a, b, c in taken):
            continue
        g = int(rng.integers(120, 220))
        kind = int(rng.integers(3))
        if kind == 0:
            draw.rectangle(
                (x, y, x + rng.uniform(10, 60), y + rng.uniform(10, 40)), outline=(g, g, g), width=2
            )
        elif kind == 1:
            draw.line(
                (x, y, x + rng.uniform(-80, 80), y + rng.uniform(-80, 80)), fill=(g, g, g), width=2
            )
        else:
            draw.text((x, y), _code(rng, 3, DIGITS), fill=(g - 60, g - 60, g - 60), font=font(size))


@skill("search")
def search(rng: np.random.Generator, difficulty: Difficulty) -> Draft:
    color = TAG_COLORS[int(rng.integers(len(TAG_COLORS)))]
    if difficulty is Difficulty.EASY:
        w, h, size, value, n_clutter = 1344, 756, 56, _code(rng, 2, DIGITS), 60
    elif difficulty is Difficulty.MEDIUM:
        w, h, size, value, n_clutter = 3836, 2156, 14, _code(rng, 3, DIGITS), 900
    else:
        w, h, size, value, n_clutter = 3836, 2156, 14, _code(rng, 4, CODE_CHARS), 900
    pil = canvas(w, h, (250, 250, 246))
    draw = ImageDraw.Draw(pil)
    taken: list[tuple[float, float, float]] = []
    tw, th = tag_size(value, size)
    tags = [(value, PALETTE[color])]
    if difficulty is Difficulty.HARD:
        decoy = _code(rng, 4, CODE_CHARS)
        tags.append((decoy if decoy != value else value[::-1] + "", PALETTE[LOOKALIKE[color]]))
    radius = max(tw, th) * 0.75
    centres = place(rng, len(tags), radius, w, h, taken, gap=40)
    _clutter(rng, draw, w, h, n_clutter, taken, max(size, 14))  # under the tags
    for (text, rgb), (cx, cy) in zip(tags, centres):
        draw_tag(draw, cx - tw / 2, cy - th / 2, text, size, rgb)
    return Draft(to_image(pil), QUESTION.format(color=color), value, AnswerKind.TEXT)
