"""`Eta`: elapsed and remaining time of a stage counted in steps, for the one-line logs of the
training stages (the batch commands show `codedance.runs.batch.BatchProgress`, rich's bar).

    >>> eta = Eta(total=100, start=40, now=lambda: 0.0)
    >>> eta.now = lambda: 30.0
    >>> eta.text(50)
    'elapsed 0:00:30, ETA 0:02:30'
"""

from __future__ import annotations

import time
from collections.abc import Callable


def clock(seconds: float) -> str:
    """``H:MM:SS``, as rich's progress columns write it."""
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Eta:
    """Elapsed time since the stage (re)started at step ``start`` of ``total``, and the time left
    at this run's pace (a resumed stage's earlier steps do not count toward the pace)."""

    def __init__(
        self, total: int, start: int = 0, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.total, self.start, self.now = total, start, now
        self.began = now()

    def text(self, done: int) -> str:
        elapsed = self.now() - self.began
        ran = done - self.start
        left = (
            clock(elapsed / ran * max(0, self.total - done)) if ran > 0 and self.total > 0 else "?"
        )
        return f"elapsed {clock(elapsed)}, ETA {left}"
