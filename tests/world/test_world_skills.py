"""The search, charts and photos skills: answers consistent with independent checks of the data
and the pictures (not with the teacher's routines)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from codedance.world import generate
from codedance.world.charts import category_tables, series_tables
from codedance.world.draw import PALETTE
from codedance.world.photos import COINS, PAD_H, PAD_W, count_in

pytestmark = pytest.mark.tier("unit")


def test_search_sizes_and_the_tag_is_drawn_in_its_colour():
    for diff, size in (("easy", (1344, 756)), ("medium", (3836, 2156)), ("hard", (3836, 2156))):
        task = generate("search", diff, 2)
        assert task.images[0].size == size
        color = re.search(r"small (\w+) tag", task.question).group(1)
        img = np.asarray(task.images[0].to_pil().convert("RGB"))
        exact = np.all(img == np.array(PALETTE[color]), axis=2)
        ys, xs = np.nonzero(exact)
        assert len(ys) > 100 and xs.max() - xs.min() < (0.15 if diff == "easy" else 0.03) * size[0]
        assert len(task.answer) == {"easy": 2, "medium": 3, "hard": 4}[diff]
    assert re.fullmatch(r"\d{3}", generate("search", "medium", 9).answer)


def test_chart_answers_come_from_the_real_tables():
    labels_values = {
        (t.title, lab): v
        for t in (*category_tables(), *series_tables())
        for lab, v in zip(t.labels, t.values)
    }
    assert len(category_tables()) > 20 and len(series_tables()) > 10
    from vega_datasets import local_data

    b = local_data.barley()
    row = b[(b.site == "Morris") & (b.year == 1931) & (b.variety == "Manchuria")]
    assert labels_values[("Barley yield of Manchuria, 1931 (bushels/acre)", "Morris")] == round(
        float(row["yield"].iloc[0]), 1
    )
    seen = set()
    for seed in range(12):
        task = generate("charts", "medium", seed)
        m = re.search(r"what is the .+ (?:of|in) (.+)\?$", task.question)
        assert m, task.question
        values = [v for (_title, lab), v in labels_values.items() if lab == m.group(1)]
        assert any(abs(v - float(task.answer)) < 0.01 for v in values)
        seen.add(task.question.split(",")[0])
        assert task.images[0].size == (840, 504)
    assert seen == {"In the bar chart", "In the line chart"}


def test_coin_annotations_are_consistent():
    assert len(COINS) == 24  # counted by eye: 4 rows of 6
    for i, (x, y, r) in enumerate(COINS):
        assert r < x < PAD_W - r and r < y < PAD_H - r
        for x2, y2, r2 in COINS[i + 1 :]:
            assert np.hypot(x - x2, y - y2) > r + r2  # no two coins touch
    assert count_in((0, 0, PAD_W, PAD_H)) == 24
    assert count_in((0, 0, 75, 85)) == 1 and count_in((0, 0, 50, 80)) is None  # cuts the coin


@pytest.mark.parametrize("difficulty,lo,hi", [("easy", 2, 5), ("medium", 6, 24), ("hard", 12, 24)])
def test_photo_counts_are_in_range_and_bright_blobs_agree(difficulty, lo, hi):
    import cv2
    import scipy.ndimage as ndi

    for seed in range(4):
        task = generate("photos", difficulty, seed)
        assert lo <= int(task.answer) <= hi
        if difficulty != "easy":
            continue
        g = np.asarray(task.images[0].to_pil().convert("L"))
        _t, m = cv2.threshold(
            cv2.GaussianBlur(g, (5, 5), 0), 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU
        )
        m = ndi.binary_fill_holes(m > 0)
        _n, _l, st, _c = cv2.connectedComponentsWithStats(m.astype(np.uint8))
        assert sum(1 for s in st[1:] if s[4] > 1500) == int(task.answer)  # big bright blobs = coins
