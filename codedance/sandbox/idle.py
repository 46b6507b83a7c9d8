"""Freezing idle trajectories: between two `Sandbox.run` calls nothing of a trajectory runs.

Honest processes of an idle trajectory only wait (the holder for its spare, the spare for the
next snippet), but a committed step may have patched the holder to keep working in the
background: burning CPU outside any step's timeout and outside the pool's bound on running steps.
So a service freezes each trajectory's cgroup shortly after each `run` returns, and `run` thaws it
first thing. The short delay (``delay_s``) lets the holder fork its next spare off the critical
path; a hostile holder gets at most that long per step.

One daemon thread per service keeps a heap of due freezes, at most one entry per sandbox: a
sandbox that ran again before its entry came due is put back with its new due time (so a busy
trajectory costs the thread one wake-up per delay, not one per step). It never waits on a
sandbox: one whose lock is taken (a step is running) is put back too.
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
        self._thread = threading.Thread(
            target=self._loop, name="codedance-idle-freezer", daemon=True
        )
        self._thread.start()

    def schedule(self, sandbox) -> None:
        """Freeze ``sandbox`` once it has been idle for the delay (one pending entry per
        sandbox)."""
        with self._wake:
            if sandbox.freeze_pending:
                return
            sandbox.freeze_pending = True
            heapq.heappush(
                self._heap,
                (time.monotonic() + self.delay_s, next(self._order), weakref.ref(sandbox)),
            )
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
                    self._wake.wait(
                        None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic())
                    )
                if self._stopped:
                    return
                _, _, ref = heapq.heappop(self._heap)
            sandbox = ref()
            if sandbox is None:
                continue
            idle_since = sandbox.freeze_if_idle(self.delay_s)
            with self._wake:
                if idle_since is None:  # frozen, closed or lost: no entry left
                    sandbox.freeze_pending = False
                else:  # it ran again (or is running): look again a delay after its last run
                    heapq.heappush(self._heap, (idle_since + self.delay_s, next(self._order), ref))
            # no reference kept while waiting: a sandbox its caller dropped stays collectable
            # (a held reference kept the last one looked at alive, unclosed, until the next look)
            # pinned by `tests/sandbox/test_api.py::`
            # `test_a_dropped_idle_sandbox_is_not_kept_alive_by_the_idle_freezer`
            del sandbox
