"""The `dots` skill (the CPU testbed's): the question's form is its difficulty, and the gold
answers follow the pixels (exact white pixels here, where the teacher thresholds)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from codedance.types import AnswerKind
from codedance.world import generate
from codedance.world.draw import PALETTE

pytestmark = pytest.mark.tier("unit")


def test_easy_asks_whether_there_are_dots_on_a_one_colour_card():
    for seed in range(8):
        task = generate("dots", "easy", seed)
        img = np.asarray(task.images[0].to_pil().convert("RGB")).reshape(-1, 3)
        colours, counts = np.unique(img, axis=0, return_counts=True)
        assert task.kind is AnswerKind.TEXT and task.answer == "yes"
        assert tuple(colours[counts.argmax()]) in PALETTE.values() and (img == 255).all(1).any()


def test_hard_and_medium_count_white_dots_of_their_size():
    for difficulty, side, low, high in (("hard", 2, 2, 9), ("medium", 6, 1, 4)):
        for seed in range(8):
            task = generate("dots", difficulty, seed)
            white = np.all(np.asarray(task.images[0].to_pil().convert("RGB")) == 255, axis=2)
            n, _labels, stats, _c = cv2.connectedComponentsWithStats(white.astype(np.uint8))
            n, sizes = n - 1, stats[1:, cv2.CC_STAT_AREA]
            assert task.kind is AnswerKind.COUNT and task.question.startswith("How many white dots")
            assert n == int(task.answer) and low <= n <= high
            assert set(sizes.tolist()) == {side * side}
