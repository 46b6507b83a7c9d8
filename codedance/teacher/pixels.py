"""Pixel routines the teacher's programs are made of (numpy + OpenCV only).

Each function is self-contained so that its source can be pasted into a sandbox snippet
(`codedance.teacher.program.snippet`) and also called in-process for the teacher's glance at an
easy task. They see pixels only. Not handled: antialiased or textured objects beyond what a
colour tolerance absorbs; rotated text.
"""

from __future__ import annotations

import cv2
import numpy as np


def color_mask(img, rgb, tol):
    """1 where every channel of `img` (H, W, 3 uint8) is within `tol` of `rgb`, else 0."""
    diff = np.abs(img.astype(np.int16) - np.array(rgb, dtype=np.int16)).max(axis=2)
    return (diff <= tol).astype(np.uint8)


def blobs(mask, img, min_area=20):
    """Connected components of `mask` as dicts: area, box (x, y, w, h), centre, fill (area over
    box), rgb (mean colour in `img`); largest first."""
    n, lab, stats, cents = cv2.connectedComponentsWithStats(mask, connectivity=8)
    out = []
    for i in range(1, n):
        x, y, w, h, area = (int(v) for v in stats[i])
        if area < min_area:
            continue
        rgb = tuple(int(v) for v in img[lab == i].mean(axis=0))
        out.append({"area": area, "box": (x, y, w, h), "centre": (round(float(cents[i][0]), 1),
                    round(float(cents[i][1]), 1)), "fill": round(area / (w * h), 3), "rgb": rgb})
    return sorted(out, key=lambda b: -b["area"])


def shape_of(blob):
    """circle, square or triangle from how much of its box a single blob fills."""
    fill = blob["fill"]
    return "square" if fill > 0.9 else "circle" if fill > 0.66 else "triangle"


def count_shapes(found, shape, split=True):
    """How many `shape`s the blobs hold; with `split`, a blob at least 1.6 times the area of one
    `shape` counts as round(area / that) touching objects. One `shape`'s area is the median of
    the `shape` blobs with a square box (a touching pair's box is long, or half empty when the
    pair is diagonal, which can make it look like another shape), else of all `shape` blobs."""
    matching = [b for b in found if shape_of(b) == shape]
    if not matching:
        return 0
    square = [b for b in matching if 0.8 <= b["box"][2] / b["box"][3] <= 1.25] or matching
    unit = float(np.median([b["area"] for b in square]))
    total = 0
    for b in found:
        k = round(b["area"] / unit) if split and b["area"] >= 1.6 * unit else 1
        if k > 1 or shape_of(b) == shape:
            total += k
    return total


def scale_bar(img, skip_border=True):
    """Length in pixels of the scale bar: the widest flat black component (optionally those
    touching the image border are skipped); returns (length, box)."""
    mask = color_mask(img, (0, 0, 0), 60)
    h, w = mask.shape
    best = None
    for b in blobs(mask, img, min_area=10):
        x, y, bw, bh = b["box"]
        if skip_border and (x == 0 or y == 0 or x + bw >= w or y + bh >= h):
            continue
        if (bw > 3 * bh or not skip_border) and (best is None or bw > best[0]):
            best = (bw, b["box"])
    return best if best is not None else (0, None)


def long_side(mask):
    """Length in pixels of the longest side of the mask's minimum-area rectangle."""
    pts = cv2.findNonZero(mask)
    if pts is None:
        return 0.0
    (_, _), (a, b), _ = cv2.minAreaRect(pts)
    return float(max(a, b))
