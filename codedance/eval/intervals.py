"""Uncertainty of a benchmark number: 95 % intervals, Avg@k and pass@k.

- `wilson`: the binomial (Wilson score) interval of one run's accuracy over n items; used when
  each item has one sample.
- `bootstrap`: with k samples per item, the mean over items of each item's mean verdict (Avg@k),
  and the percentile interval of that mean over ``resamples`` resamplings of the *items*
  (seeded, so the same scores give the same interval).
- `pass_at_k`: share of items with at least one fully right sample among their k.
- `outside`: whether two runs' intervals do not overlap (a delta that is not noise by this
  conservative test). Verdicts may be fractions (CharXiv's 0.5).
Hand-written: a few lines of arithmetic; scipy is not a dependency.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

Z95 = 1.959963984540054


def wilson(mean: float, n: int) -> tuple[float, float]:
    """The 95 % Wilson interval of a proportion ``mean`` over ``n`` trials.

    >>> [round(x, 3) for x in wilson(0.5, 100)]
    [0.404, 0.596]
    """
    if n <= 0:
        return 0.0, 1.0
    z2 = Z95 * Z95
    centre = (mean + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(mean * (1 - mean) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, round(centre - half, 12)), min(1.0, round(centre + half, 12))


def bootstrap(
    per_item: Sequence[Sequence[float]], resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """(Avg@k, low, high): the mean of item means and its 95 % percentile bootstrap interval."""
    means = [sum(v) / len(v) for v in per_item if v]
    if not means:
        raise ValueError("bootstrap needs at least one item with a verdict")
    rng = random.Random(seed)
    n = len(means)
    stats = sorted(sum(means[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    low = stats[int(0.025 * (resamples - 1))]
    high = stats[math.ceil(0.975 * (resamples - 1))]
    return sum(means) / n, low, high


def pass_at_k(per_item: Sequence[Sequence[float]]) -> float:
    """Share of items with a fully right sample (a verdict of 1).

    >>> pass_at_k([[0, 1], [0, 0], [1, 1]])
    0.6666666666666666
    """
    return sum(1 for v in per_item if any(x >= 1 for x in v)) / len(per_item)


def outside(a: Sequence[float] | None, b: Sequence[float] | None) -> bool | None:
    """True when intervals ``a`` and ``b`` do not overlap; None when either is missing."""
    if not a or not b:
        return None
    return a[1] < b[0] or b[1] < a[0]
