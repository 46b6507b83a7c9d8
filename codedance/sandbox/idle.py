"""Freezing idle trajectories: between two `Sandbox.run` calls nothing of a trajectory runs.

Honest processes of an idle trajectory only wait (the holder for its spare, the spare for the
next snippet), but a committed step may have patched the holder to keep working in the
background: burning CPU outside any step's timeout and outside the pool's bound on running steps.
So a service freezes each trajectory's cgroup shortly after each `run` returns, and `run` thaws it
first thing. The short delay (``delay_s``) lets the holder fork its next spare off the critical
path; a hostile holder gets at most that long per step.

One daemon thread per service keeps a heap of due freezes. It never waits on a sandbox: a
sandbox whose lock is taken (a step is running) is skipped, and its `run` schedules again.
Needs the cgroup freezer (v1 or v2); without it nothing is frozen (docs/sandbox.md says so).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import weakref


class IdleFreezer:
    def __init__(self, delay_s: float = 0.02):
        self.delay_s = delay_s
        self._heap: list[tuple[float, int, weakref.ref, int]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="codedance-idle-freezer", daemon=True)
        self._thread.start()

    def schedule(self, sandbox, generation: int) -> None:
        """Freeze ``sandbox`` after the delay unless it ran again (its generation changed)."""
        with self._wake:
            heapq.heappush(self._heap, (time.monotonic() + self.delay_s, next(self._order),
                                        weakref.ref(sandbox), generation))  # fmt: skip
            self._wake.notify()

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._wake.wait(None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic()))
                if self._stopped:
                    return
                _, _, ref, generation = heapq.heappop(self._heap)
            sandbox = ref()
            if sandbox is not None:
                sandbox.freeze_if_idle(generation)
