"""Drawing helpers shared by the synthetic skills: palette, shapes, text, non-overlapping layout.

Shapes are drawn without antialiasing, so every object's pixels carry its exact palette colour
(pixel programs can threshold them); text uses DejaVu Sans, the font matplotlib ships.
Not handled: textures, lighting, perspective (the `photos` skill covers real images).
"""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw, ImageFont

from codedance.types import Image

PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 200, 30),
    "purple": (150, 60, 190),
    "orange": (245, 140, 30),
}
SHAPES = ("circle", "square", "triangle")
# a colour a loose threshold confuses with the key (used for hard distractors)
LOOKALIKE = {
    "red": "orange",
    "orange": "red",
    "yellow": "orange",
    "green": "yellow",
    "blue": "purple",
    "purple": "blue",
}


@lru_cache(maxsize=8)
def font(size: int) -> ImageFont.FreeTypeFont:
    import matplotlib

    path = os.path.join(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSans.ttf")
    return ImageFont.truetype(path, size)


def canvas(
    width: int, height: int, color: tuple[int, int, int] = (255, 255, 255)
) -> PILImage.Image:
    return PILImage.new("RGB", (width, height), color)


def shape(
    draw: ImageDraw.ImageDraw,
    kind: str,
    cx: float,
    cy: float,
    r: float,
    color: tuple[int, int, int],
) -> None:
    """A filled circle, square (side 2r·0.9) or upward triangle centred at (cx, cy)."""
    if kind == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=color)
    elif kind == "square":
        s = r * 0.9
        draw.rectangle((cx - s, cy - s, cx + s, cy + s), fill=color)
    elif kind == "triangle":
        draw.polygon([(cx, cy - r), (cx + r, cy + r * 0.8), (cx - r, cy + r * 0.8)], fill=color)
    else:
        raise ValueError(f"unknown shape {kind!r}")


def place(
    rng: np.random.Generator,
    n: int,
    radius: float,
    width: int,
    height: int,
    taken: list[tuple[float, float, float]],
    gap: float = 6.0,
    tries: int = 4000,
) -> list[tuple[float, float]]:
    """`n` centres for discs of `radius` that keep `gap` pixels from everything in `taken`
    (appended to it) and from the border; raises ValueError when they do not fit."""
    out: list[tuple[float, float]] = []
    for _ in range(tries):
        if len(out) == n:
            break
        x = float(rng.uniform(radius + gap, width - radius - gap))
        y = float(rng.uniform(radius + gap, height - radius - gap))
        if all((x - a) ** 2 + (y - b) ** 2 >= (radius + c + gap) ** 2 for a, b, c in taken):
            taken.append((x, y, radius))
            out.append((x, y))
    if len(out) < n:
        raise ValueError(f"could not place {n} objects of radius {radius} in {width}x{height}")
    return out


def to_image(pil: PILImage.Image) -> Image:
    return Image.from_pil(pil, origin="input:0")


def text(
    draw: ImageDraw.ImageDraw,
    xy: tuple[float, float],
    value: str,
    size: int,
    color: tuple[int, int, int] = (0, 0, 0),
) -> None:
    draw.text(xy, value, fill=color, font=font(size))
