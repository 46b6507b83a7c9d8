"""Intervals: Wilson for one sample per item, a seeded bootstrap over items for k samples."""

from __future__ import annotations

import pytest

from codedance.eval.intervals import bootstrap, outside, pass_at_k, wilson

pytestmark = pytest.mark.tier("unit")


def test_wilson_matches_the_closed_form_and_stays_in_0_1():
    low, high = wilson(0.5, 100)
    assert low == pytest.approx(0.4038, abs=1e-4) and high == pytest.approx(0.5962, abs=1e-4)
    assert (
        wilson(1.0, 6)[1] == 1.0
        and wilson(0.0, 6)[0] == 0.0
        and wilson(1.0, 6)[0] == pytest.approx(0.6097, abs=1e-4)
    )


def test_bootstrap_is_seeded_and_contains_the_mean():
    items = [[1, 1, 0], [0, 0, 0], [1, 1, 1], [1, 0, 0]] * 10
    mean, low, high = bootstrap(items)
    assert mean == pytest.approx(0.5) and low < mean < high
    assert bootstrap(items) == (mean, low, high)  # same scores, same interval
    assert bootstrap([[1]] * 5) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError):
        bootstrap([])


def test_pass_at_k_and_overlap():
    assert pass_at_k([[0, 0.5], [1, 0]]) == 0.5  # a half-right verdict is not a pass
    assert outside((0.1, 0.2), (0.3, 0.4)) is True and outside((0.1, 0.35), (0.3, 0.4)) is False
    assert outside(None, (0.3, 0.4)) is None
