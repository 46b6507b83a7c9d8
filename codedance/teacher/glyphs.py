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
    it best: correlation of both, scaled to 16×24 and blurred (tolerates one-pixel shifts), times
    the ratio of their aspect ratios."""
    n, _lab, stats, _c = cv2.connectedComponentsWithStats(ink.astype(np.uint8), connectivity=8)
    comps = [tuple(int(v) for v in stats[i]) for i in range(1, n) if stats[i][3] >= min_height]
    if not comps:
        return ""
    tallest = max(c[3] for c in comps)
    comps = [c for c in comps if c[3] >= tallest / 2]
    size = max(6, round(tallest / 0.73))
    templates = {}  # three sizes around the estimate: rasterisers differ by a pixel here and there
    for k, s in enumerate((size - 1, size, size + 1)):
        templates.update({(ch, k): t for ch, t in glyph_templates(s, alphabet).items()})
    def norm(a):
        v = cv2.GaussianBlur(cv2.resize(a.astype(np.float32), (16, 24), interpolation=cv2.INTER_AREA), (3, 3), 0)
        v = v - v.mean()
        return v / (np.linalg.norm(v) + 1e-6)

    shapes = {ch: (norm(t), t.shape[1] / t.shape[0]) for ch, t in templates.items()}
    text = ""
    for x, y, w, h, _area in sorted(comps):
        glyph, aspect = norm(ink[y:y + h, x:x + w]), w / h
        best, best_score = "?", -2.0
        for (ch, _k), (t, ar) in shapes.items():
            score = float((t * glyph).sum()) * min(ar, aspect) / max(ar, aspect)
            if score > best_score:
                best, best_score = ch, score
        text += best
    return text
