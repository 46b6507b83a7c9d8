"""Reading printed characters by template matching (numpy + OpenCV + Pillow only; no OCR model).

The teacher renders its own glyph templates in DejaVu Sans (the font matplotlib ships, found
through ``matplotlib.get_data_path()``, which the sandbox can read) at the size the characters
in the picture have, and classifies each connected component of ink by its best overlap with a
template. Like `codedance.teacher.pixels`, every function is self-contained so its source can be
pasted into a sandbox snippet; ``Image`` is PIL's, imported by the snippet header.

Handled: a line of separate, upright characters (digits, upper-case letters) in DejaVu Sans, as
drawn by the world (characters apart) and by matplotlib (tick labels). Not handled: touching or
rotated characters, other fonts, letters with separate dots (i, j), punctuation.
"""

from __future__ import annotations

import cv2
import numpy as np
from PIL import Image


def glyph_templates(size, alphabet):
    """{character: binary array of its ink, cropped to its box} rendered at `size` pixels."""
    import os

    import matplotlib
    from PIL import ImageDraw, ImageFont

    path = os.path.join(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSans.ttf")
    font = ImageFont.truetype(path, int(size))
    out = {}
    for ch in alphabet:
        canvas = Image.new("L", (int(size) * 3, int(size) * 3), 0)
        ImageDraw.Draw(canvas).text((size, size // 2), ch, fill=255, font=font)
        ink = np.asarray(canvas) > 127
        ys, xs = np.nonzero(ink)
        out[ch] = ink[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
    return out


def read_glyphs(ink, alphabet="0123456789", min_height=4):
    """The characters of one text line in `ink` (2-D bool, True on text pixels), left to right.

    Components shorter than half the tallest (dots, specks) are skipped; the template size is
    chosen so that a digit's height (0.73 of the font size in DejaVu Sans) matches the tallest
    component. Each component takes the character whose template, scaled to its box, overlaps
    it best (intersection over union, times the ratio of the aspect ratios)."""
    n, _lab, stats, _c = cv2.connectedComponentsWithStats(ink.astype(np.uint8), connectivity=8)
    comps = [tuple(int(v) for v in stats[i]) for i in range(1, n) if stats[i][3] >= min_height]
    if not comps:
        return ""
    tallest = max(c[3] for c in comps)
    comps = [c for c in comps if c[3] >= tallest / 2]
    templates = glyph_templates(max(6, round(tallest / 0.73)), alphabet)
    text = ""
    for x, y, w, h, _area in sorted(comps):
        glyph = ink[y:y + h, x:x + w].astype(bool)
        best, best_score = "?", -1.0
        for ch, t in templates.items():
            scaled = cv2.resize(t.astype(np.uint8), (w, h), interpolation=cv2.INTER_AREA) > 0
            iou = (scaled & glyph).sum() / max(1, (scaled | glyph).sum())
            ar_t, ar_g = t.shape[1] / t.shape[0], w / h
            score = iou * min(ar_t, ar_g) / max(ar_t, ar_g)
            if score > best_score:
                best, best_score = ch, score
        text += best
    return text
