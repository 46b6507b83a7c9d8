"""Counting on a real photo: scikit-image's ``coins`` (Greek coins from the Pompeii collection,
303×384 grey), with hand-checked coin positions.

Gold counts come from `COINS`: the 24 coins' centres and radii in the original image, found
once by a segmentation and then checked by eye coin by coin against the picture (4 rows of 6;
none touching). A task shows a crop that cuts no coin (every coin is wholly in or wholly out),
so the count of a crop is exact.
easy: 2–5 coins, the crop upscaled 2×. medium: 6–16 coins or the whole picture, maybe mirrored.
hard: 12–24 coins under an uneven illumination ramp with sensor noise (a global threshold joins
the bright background to the coins or loses the dark ones: a likely first mistake).
Not handled: other photos (the package's other pictures hold no countable objects with a
checkable answer), occlusion.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from PIL import Image as PILImage

from codedance.types import AnswerKind, Image
from codedance.world.base import Difficulty, Draft, WorldError, skill

# (x, y, radius) in the original 384×303 picture; checked by eye: rows of 6, 24 coins.
COINS = (
    (44, 55, 22),
    (100, 56, 20),
    (155, 51, 24),
    (216, 52, 23),
    (276, 53, 20),
    (336, 44, 29),
    (45, 124, 22),
    (102, 126, 19),
    (154, 127, 20),
    (205, 124, 20),
    (271, 119, 25),
    (336, 124, 20),
    (43, 197, 19),
    (102, 196, 22),
    (154, 198, 20),
    (213, 193, 24),
    (274, 193, 23),
    (348, 186, 32),
    (46, 260, 28),
    (114, 266, 22),
    (173, 261, 28),
    (244, 263, 24),
    (301, 263, 25),
    (359, 268, 23),
)
PAD_W, PAD_H = 392, 308  # the picture padded (right, bottom) to multiples of 28
QUESTION = "How many coins are there in this photo?"


@lru_cache(maxsize=1)
def padded() -> np.ndarray:
    try:
        from skimage import data
    except ImportError:  # pragma: no cover - depends on the install
        raise WorldError("the photos skill needs scikit-image (pip install scikit-image)") from None
    coins = data.coins()
    out = np.full((PAD_H, PAD_W), int(np.median(coins[-4:, :])), np.uint8)
    out[: coins.shape[0], : coins.shape[1]] = coins
    return out


def count_in(box: tuple[int, int, int, int], margin: int = 6) -> int | None:
    """Coins wholly inside `box` (x, y, w, h); None when the box cuts a coin."""
    x, y, w, h = box
    n = 0
    for cx, cy, r in COINS:
        inside = (
            x + margin <= cx - r
            and cx + r <= x + w - margin
            and y + margin <= cy - r
            and cy + r <= y + h - margin
        )
        outside = cx + r < x or cx - r >= x + w or cy + r < y or cy - r >= y + h
        if inside:
            n += 1
        elif not outside:
            return None
    return n


def _crop(
    rng: np.random.Generator, step: int, lo: int, hi: int
) -> tuple[tuple[int, int, int, int], int]:
    for _ in range(20000):
        w = int(rng.integers(3, PAD_W // step + 1)) * step
        h = int(rng.integers(3, PAD_H // step + 1)) * step
        x, y = int(rng.integers(0, PAD_W - w + 1)), int(rng.integers(0, PAD_H - h + 1))
        n = count_in((x, y, w, h))
        if n is not None and lo <= n <= hi:
            return (x, y, w, h), n
    raise WorldError(f"no crop with {lo}–{hi} coins")  # pragma: no cover


@skill("photos")
def photos(rng: np.random.Generator, difficulty: Difficulty) -> Draft:
    pic = padded()
    if difficulty is Difficulty.EASY:
        (x, y, w, h), n = _crop(rng, 14, 2, 5)
        arr = np.asarray(
            PILImage.fromarray(pic[y : y + h, x : x + w]).resize((2 * w, 2 * h), PILImage.BICUBIC)
        )
    elif difficulty is Difficulty.MEDIUM:
        if rng.random() < 0.25:
            arr, n = pic, len(COINS)
        else:
            (x, y, w, h), n = _crop(rng, 28, 6, 16)
            arr = pic[y : y + h, x : x + w]
        if rng.integers(2):
            arr = arr[:, ::-1]
    else:
        (x, y, w, h), n = (0, 0, PAD_W, PAD_H), len(COINS)
        if rng.random() < 0.5:
            (x, y, w, h), n = _crop(rng, 28, 12, 20)
        arr = pic[y : y + h, x : x + w].astype(np.float32)
        angle = float(rng.uniform(0, 2 * np.pi))
        yy, xx = np.mgrid[0:h, 0:w]
        ramp = np.cos(angle) * xx / w + np.sin(angle) * yy / h
        ramp = (ramp - ramp.min()) / (np.ptp(ramp) + 1e-9)
        arr = arr * (0.45 + 0.8 * ramp) + 40 * ramp + rng.normal(0, 6, arr.shape)
        arr = np.clip(arr, 0, 255).astype(np.uint8)
    pil = PILImage.fromarray(np.ascontiguousarray(arr)).convert("RGB")
    return Draft(Image.from_pil(pil, "input:0"), QUESTION, str(n), AnswerKind.COUNT)
