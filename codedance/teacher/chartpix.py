"""Pixel routines for reading matplotlib charts (numpy + OpenCV + Pillow; pasted into snippets).

`axes_frame` finds the plot's frame (its black spines), `y_scale` reads the y tick labels with
the template reader and fits pixel row → value, `main_color` is the data's colour, `bar_tops`
the bars, `x_ticks` the x tick positions and their (numeric) labels, `find_text` locates a
category name by matching it rendered in DejaVu Sans at a range of sizes, `pie_shares` assigns
the pie's pixels to the legend's colours. Each function is self-contained (it may call the
others and `codedance.teacher.glyphs`/`pixels` routines, pasted alongside).
Not handled: charts without a black frame, negative or log axes, rotated labels.
"""

from __future__ import annotations

import cv2
import numpy as np
from PIL import Image

from codedance.teacher.glyphs import read_glyphs
from codedance.teacher.pixels import blobs


def axes_frame(img):
    """(left, top, right, bottom) of the axes: the longest dark columns and rows."""
    dark = img.max(axis=2) < 90
    cols, rows = dark.sum(axis=0), dark.sum(axis=1)
    xs, ys = np.nonzero(cols > 0.6 * cols.max())[0], np.nonzero(rows > 0.6 * rows.max())[0]
    return int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())


def _runs(flags):
    """Centres of the runs of True in a 1-D bool array."""
    idx = np.nonzero(flags)[0]
    if len(idx) == 0:
        return []
    groups = np.split(idx, np.nonzero(np.diff(idx) > 1)[0] + 1)
    return [float(g.mean()) for g in groups]


def y_scale(img, frame):
    """Tick rows with their labels' values, and (a, b) with value = a·row + b (`robust_line`)."""
    left = frame[0]
    dark = img.max(axis=2) < 90
    ink = img.max(axis=2) < 128
    ticks = []
    for y in _runs(dark[:, left - 3]):
        y = round(y)
        text = read_glyphs(ink[max(0, y - 12):y + 12, max(0, left - 90):left - 6], "0123456789")
        if text and "?" not in text:
            ticks.append((y, float(text)))
    fit = robust_line(ticks)
    return ticks, fit


def robust_line(points):
    """(a, b) of value = a·position + b through the most points (a misread label is an outlier):
    every pair proposes a line, the one most points agree with (within 1 % of the value range)
    is refitted on those points. None with fewer than two points."""
    if len(points) < 2:
        return None
    pos = np.array([p[0] for p in points], float)
    val = np.array([p[1] for p in points], float)
    tol = 0.01 * (val.max() - val.min() + 1e-9)
    best = None
    for i in range(len(points)):
        for j in range(i + 1, len(points)):
            if pos[i] == pos[j]:
                continue
            a = (val[j] - val[i]) / (pos[j] - pos[i])
            inl = np.abs(a * (pos - pos[i]) + val[i] - val) <= tol
            if best is None or inl.sum() > best.sum():
                best = inl
    a, b = np.polyfit(pos[best], val[best], 1)
    return float(a), float(b)


def main_color(img, frame):
    """The most frequent saturated colour inside the frame (the bars' or the line's)."""
    left, top, right, bottom = frame
    inner = img[top + 2:bottom - 1, left + 2:right - 1].reshape(-1, 3)
    sat = inner[(inner.max(axis=1).astype(int) - inner.min(axis=1)) > 40]
    colors, counts = np.unique(sat, axis=0, return_counts=True)
    return tuple(int(v) for v in colors[counts.argmax()])


def bar_tops(img, frame, rgb):
    """[(x centre, top row)] of the bars of colour `rgb`, left to right."""
    left, top, right, bottom = frame
    diff = np.abs(img.astype(np.int16) - np.array(rgb, dtype=np.int16)).max(axis=2)
    mask = np.zeros(img.shape[:2], np.uint8)
    mask[top + 1:bottom, left + 1:right] = diff[top + 1:bottom, left + 1:right] <= 30
    _n, _lab, stats, _c = cv2.connectedComponentsWithStats(mask)
    bars = [(float(s[0] + s[2] / 2), int(s[1])) for s in stats[1:] if s[4] > 30]
    return sorted(bars)


def x_ticks(img, frame):
    """[(x, label)] of the x ticks inside the frame, their numeric labels read below them."""
    left, _top, right, bottom = frame
    dark = img.max(axis=2) < 90
    ink = img.max(axis=2) < 128
    out = []
    for x in _runs(dark[bottom + 3, left + 1:right]):
        x = round(x) + left + 1
        out.append((x, read_glyphs(ink[bottom + 5:bottom + 30, max(0, x - 30):x + 30], "0123456789")))
    return out


def find_text(img, text, region, sizes=(13, 14, 15, 16, 17, 18)):
    """(score, x centre, y centre) of `text` in `region` (x0, y0, x1, y1), rendered black on
    white in DejaVu Sans at each of `sizes` and matched by normalised correlation."""
    import os

    import matplotlib
    from PIL import ImageDraw, ImageFont

    path = os.path.join(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSans.ttf")
    x0, y0, x1, y1 = region
    sub = cv2.cvtColor(np.ascontiguousarray(img[y0:y1, x0:x1]), cv2.COLOR_RGB2GRAY)
    best = (-1.0, 0.0, 0.0)
    for size in sizes:
        font = ImageFont.truetype(path, size)
        canvas = Image.new("L", (int(font.getlength(text)) + 2 * size, 3 * size), 255)
        ImageDraw.Draw(canvas).text((size, size), text, fill=0, font=font)
        t = np.asarray(canvas)
        ys, xs = np.nonzero(t < 200)
        t = t[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
        if t.shape[0] > sub.shape[0] or t.shape[1] > sub.shape[1]:
            continue
        res = cv2.matchTemplate(sub, t, cv2.TM_CCOEFF_NORMED)
        _mn, mx, _l, loc = cv2.minMaxLoc(res)
        if mx > best[0]:
            best = (float(mx), x0 + loc[0] + t.shape[1] / 2, y0 + loc[1] + t.shape[0] / 2)
    return best


def pie_shares(img):
    """The pie's disc box and [(legend patch centre y, colour, share %)]: every saturated pixel of
    the largest saturated blob goes to the nearest legend colour."""
    sat = ((img.max(axis=2).astype(int) - img.min(axis=2)) > 40).astype(np.uint8)
    found = blobs(sat, img, min_area=30)
    disc, patches = found[0], [b for b in found[1:] if b["fill"] > 0.9]
    x, y, w, h = disc["box"]
    _n, lab, _s, _c = cv2.connectedComponentsWithStats(sat)
    biggest = 1 + int(np.argmax(np.bincount(lab[lab > 0].ravel())[1:]))
    pix = img[lab == biggest].astype(int)
    cols = []
    for p in patches:
        px, py, pw, ph = p["box"]
        cols.append(img[py + ph // 2, px + pw // 2].astype(int))
    if not cols:
        return disc["box"], []
    d = np.stack([np.abs(pix - c).sum(axis=1) for c in cols])
    counts = np.bincount(d.argmin(axis=0), minlength=len(cols))
    shares = [(p["centre"][1], tuple(int(v) for v in c), 100.0 * k / len(pix))
              for p, c, k in zip(patches, cols, counts)]
    return (x, y, w, h), sorted(shares)
