"""The teacher's visual search: find the named tag by its colour, crop it, zoom, and read the code
with template matching (`codedance.teacher.glyphs`).

Its glance (easy) works on a downscaled view, as a model's first look would: large type survives
it, 10-pixel type does not (medium and hard need the crop). First mistakes on hard tasks: the tag
located on a 4× downscaled copy and cropped at those coordinates without scaling them back (the
crop holds almost none of the tag's colour), or a loose colour threshold that finds the
look-alike decoy tag too (two candidates printed).
"""

from __future__ import annotations

import re

import cv2
import numpy as np

from codedance.teacher import glyphs, pixels
from codedance.teacher.program import Step, results, snippet
from codedance.teacher.view import TaskView
from codedance.world.draw import PALETTE

MISTAKES = ("wrong_place", "loose")
ALPHABET = "0123456789ABCDEFGHJKLMNPQRSTUVWXYZ"  # codes skip I and O (read as 1 and 0)
HELPERS = (pixels.color_mask, pixels.blobs, glyphs.glyph_templates, glyphs.read_glyphs)
Q = re.compile(r"written on the small (\w+) tag")
GLANCE_SIDE = 1008


def _color(view: TaskView) -> str:
    m = Q.search(view.question)
    if not m or m.group(1) not in PALETTE:
        raise ValueError(f"not a search question: {view.question!r}")
    return m.group(1)


def read_tag(img: np.ndarray, rgb: tuple[int, int, int], tol: int = 40) -> str:
    """In-process: the code on the largest solid blob of colour `rgb` ('' when none)."""
    tags = [
        b
        for b in pixels.blobs(pixels.color_mask(img, rgb, tol), img, min_area=20)
        if b["fill"] > 0.6 and b["box"][2] > b["box"][3]
    ]
    if not tags:
        return ""
    x, y, w, h = tags[0]["box"]
    crop = img[y + 1 : y + h - 1, x + 1 : x + w - 1]
    return glyphs.read_glyphs(crop.min(axis=2) > 160, ALPHABET)


def glance(view: TaskView, img: np.ndarray) -> str:
    h, w = img.shape[:2]
    f = min(1.0, GLANCE_SIDE / max(h, w))
    small = (
        cv2.resize(img, (round(w * f), round(h * f)), interpolation=cv2.INTER_AREA)
        if f < 1
        else img
    )
    return read_tag(small, PALETTE[_color(view)]) or "unknown"


def _good(rgb: tuple[int, int, int], tol: int, ink: int) -> str:
    return "\n".join(
        [
            f"RGB = {rgb}",
            (
                f"tags = [b for b in blobs(color_mask(img, RGB, {tol}), img, min_area=200) "
                "if b['fill'] > 0.6 and b['box'][2] > b['box'][3]]"
            ),
            "print(len(tags), 'tag candidate(s):', [(b['box'], b['rgb']) for b in tags])",
            "x, y, w, h = tags[0]['box']",
            "crop = img[y + 1:y + h - 1, x + 1:x + w - 1]",
            "print('tag colour in crop:', round(100 * color_mask(crop, RGB, 40).mean()), '%')",
            f"print('RESULT:', read_glyphs(crop.min(axis=2) > {ink}, {ALPHABET!r}))",
            (
                "Image.fromarray(crop).resize((crop.shape[1] * 6, crop.shape[0] * 6), "
                "Image.NEAREST).show()"
            ),
        ]
    )


def _wrong_place(rgb: tuple[int, int, int]) -> str:
    return "\n".join(
        [
            f"RGB = {rgb}",
            (
                "small = cv2.resize(img, (img.shape[1] // 4, img.shape[0] // 4), "
                "interpolation=cv2.INTER_AREA)"
            ),
            (
                "tags = [b for b in blobs(color_mask(small, RGB, 40), small, min_area=4) "
                "if b['fill'] > 0.6 and b['box'][2] > b['box'][3]]"
            ),
            (
                "print(len(tags), 'tag candidate(s) in the 4x smaller copy:', "
                "[b['box'] for b in tags])"
            ),
            "x, y, w, h = tags[0]['box']",
            "crop = img[y:y + h * 4, x:x + w * 4]",
            "print('tag colour in crop:', round(100 * color_mask(crop, RGB, 40).mean()), '%')",
            f"print('RESULT:', read_glyphs(crop.min(axis=2) > 160, {ALPHABET!r}))",
            (
                "Image.fromarray(crop).resize((crop.shape[1] * 6, crop.shape[0] * 6), "
                "Image.NEAREST).show()"
            ),
        ]
    )


def _check(feedback: str) -> str | None:
    n = re.search(r"^(\d+) tag candidate", feedback, re.MULTILINE)
    share = re.search(r"tag colour in crop: (\d+) %", feedback)
    if share and int(share.group(1)) < 30:
        return (
            "the crop holds almost none of the tag's colour: I cropped at coordinates of the "
            "downscaled copy without scaling them back"
        )
    if n and int(n.group(1)) > 1:
        return (
            "two tags match the colour: the threshold is too loose and also takes the "
            "look-alike tag"
        )
    return None


def steps(view: TaskView, hard: bool, mistake: str | None) -> list[Step]:
    rgb = PALETTE[_color(view)]
    good = Step(
        f"The tag is tiny in this large picture. I find the {_color(view)} tag by its "
        "colour, crop it, zoom in and read the characters against rendered templates.",
        snippet(_good(rgb, 40, 160), HELPERS),
    )
    if not hard:
        return [good]
    verify = Step(
        "Let me read the zoomed tag once more with a looser ink threshold.",
        snippet(_good(rgb, 30, 140), HELPERS),
    )
    if mistake == "wrong_place":
        first = Step(
            "I locate the tag on a 4x smaller copy (faster), crop it and read it.",
            snippet(_wrong_place(rgb), HELPERS),
            _check,
            good,
        )
        return [first, verify]
    if mistake == "loose":
        first = Step(
            f"I take everything roughly {_color(view)}, crop the tag and read it.",
            snippet(_good(rgb, 110, 160), HELPERS),
            _check,
            good,
        )
        return [first, verify]
    return [good, verify]


def answer(view: TaskView, feedback: str) -> str | None:
    found = results(feedback)
    return found[-1] if found else None
