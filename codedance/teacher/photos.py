"""The teacher's counting on real photos (coins): threshold, fill the holes, open, and count the
round blobs that do not touch the border; blobs that touch it or are far from round are listed as
discarded. Easy: a global (Otsu) threshold in-process; medium and hard: an adaptive (local mean)
threshold, which survives uneven light. First mistake on hard tasks: the global threshold,
noticed from the printed background levels (they differ across the picture) or from a discarded
blob larger than any coin (the bright background joined in).
"""

from __future__ import annotations

import json
import re

import cv2
import numpy as np

from codedance.teacher.program import Step, results, snippet
from codedance.teacher.view import TaskView

MISTAKES = ("global",)
DISCARD = re.compile(r"discarded: (\[.*\])")
KEPT = re.compile(r"kept areas: (\[.*\])")


def count_coins(img, adaptive=True, block=61):
    """(kept blob areas, discarded blob areas) of bright round objects on a dark background."""
    import scipy.ndimage as ndi

    g = cv2.GaussianBlur(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY), (5, 5), 0)
    h, w = g.shape
    if adaptive:
        m = cv2.adaptiveThreshold(g, 255, cv2.ADAPTIVE_THRESH_MEAN_C, cv2.THRESH_BINARY, block, -8)
        m = cv2.morphologyEx(m, cv2.MORPH_OPEN, np.ones((5, 5), np.uint8))
    else:
        _t, m = cv2.threshold(g, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    m = ndi.binary_fill_holes(m > 0).astype(np.uint8)
    m = cv2.morphologyEx(m, cv2.MORPH_OPEN, np.ones((7, 7), np.uint8))
    _n, _lab, stats, _c = cv2.connectedComponentsWithStats(m)
    kept, dropped = [], []
    for x, y, bw, bh, area in (tuple(int(v) for v in s) for s in stats[1:]):
        if area < 300:
            continue
        border = x == 0 or y == 0 or x + bw >= w or y + bh >= h
        round_ = max(bw, bh) <= 1.6 * min(bw, bh) and area >= 0.55 * bw * bh
        (kept if round_ and not border else dropped).append(area)
    return kept, dropped


def glance(view: TaskView, img: np.ndarray) -> str:
    kept, _ = count_coins(img, adaptive=False)
    return str(len(kept))


def background_levels(img):
    """Median of the darkest 30 % of each quadrant (the background's brightness there)."""
    g = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)
    h, w = g.shape
    quads = [g[:h // 2, :w // 2], g[:h // 2, w // 2:], g[h // 2:, :w // 2], g[h // 2:, w // 2:]]
    return [int(np.median(q[q <= np.percentile(q, 30)])) for q in quads]


HELPERS = (count_coins, background_levels)


def _body(adaptive: bool, block: int = 61) -> str:
    method = f"local mean, block {block}" if adaptive else "global Otsu"
    return "\n".join([
        "print('background level per quadrant:', background_levels(img))",
        f"kept, dropped = count_coins(img, adaptive={adaptive}, block={block})",
        "print('kept areas:', sorted(kept))",
        "print('discarded:', sorted(dropped))",
        f"print('threshold:', {method!r})",
        "print('RESULT:', len(kept))",
    ])


def _check(feedback: str) -> str | None:
    levels = re.search(r"background level per quadrant: (\[.*\])", feedback)
    if "Otsu" in feedback and levels:
        lv = json.loads(levels.group(1))
        if max(lv) - min(lv) > 30:
            return (f"the background brightness runs from {min(lv)} to {max(lv)} across the picture: "
                    "one global threshold cannot separate the coins everywhere")
    kept, dropped = KEPT.search(feedback), DISCARD.search(feedback)
    if not kept or not dropped:
        return None
    k, d = json.loads(kept.group(1)), json.loads(dropped.group(1))
    if d and k and max(d) > 3 * float(np.median(k)):
        return ("a discarded blob is far larger than any coin: the global threshold joined the "
                "bright part of the background to the coins")
    return None


def steps(view: TaskView, hard: bool, mistake: str | None) -> list[Step]:
    good = Step("The light is uneven, so I threshold against the local mean, fill the coins' holes "
                "and count the round blobs away from the border.", snippet(_body(True), HELPERS))
    if not hard:
        return [good]
    verify = Step("Let me recount with a larger neighbourhood for the local threshold.",
                  snippet(_body(True, 81), HELPERS))
    if mistake == "global":
        first = Step("The coins are bright on a dark background: one global Otsu threshold, then "
                     "count the blobs.", snippet(_body(False), HELPERS), _check, good)
        return [first, verify]
    return [good, verify]


def answer(view: TaskView, feedback: str) -> str | None:
    found = results(feedback)
    return found[-1] if found else None
