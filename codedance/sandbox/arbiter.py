"""Who pays when the service's memory runs out: a userspace OOM arbiter for ``memory_total``.

Why it exists: a trajectory's files on the tmpfs work root are charged to its memory cgroup but
sit in no process's RSS, and the kernel's OOM killer ranks processes by RSS. When all the
trajectories together reach ``memory_total`` it would kill whichever process is largest: an
honest neighbour's running step, or an idle neighbour's holder (its whole state), for another
trajectory's files. So where it can (cgroup v1) the service switches the kernel's killer off at
its parent group (`cgroups.arbitrate_oom`; each trajectory's own group keeps it, so a trajectory
over its *own* limit still loses only its step) and this thread decides instead.

While the parent group is out of memory, processes that allocate wait (a page fault sleeps; a
write to a file fails with ENOMEM, and wakes no one). The kernel signals an eventfd when a process
starts waiting, and when the group's charge crosses ``memory_total`` less a margin (3 %, at least
16 MiB). The arbiter then picks the live trajectory whose unreclaimable memory grew most since
its last committed step answered (`Sandbox.memory_growth`: what its running step added, and
anything after that answer or between steps; committed state is never taken) — any trajectory
while the group is *out of memory*, only one grown past ``SLACK_BYTES`` while it is merely
*nearly full* (what it holds less its file cache within the margin) — and makes it give memory
back (`Sandbox.yield_memory`):
- a step running: every process of the step is killed; its `run` returns ``oom`` with the state
  rolled back, and if the rollback does not give the growth back (its holder, or a process the
  step left, kept it), the trajectory is lost;
- a step that has answered: left alone (what it answered with becomes committed state), unless
  it grew by more than ``SLACK_BYTES`` *after* answering (only a runtime the step patched does
  that): the trajectory is lost;
- no step running, grown past ``SLACK_BYTES`` (only a patched holder runs between steps): the
  trajectory is lost.
While the victim is rolled back (its files are freed only by the restore) the arbiter waits for
it rather than choosing someone else; if it is still the largest grower ``ESCALATE_S`` after its
step was stopped and still holds more than ``SLACK_BYTES`` of growth, its holder is killed too
and the trajectory is lost. A victim chosen again in a later `run` is stopped again (when the
service is full of committed state, every growing step ends as ``oom``). While pressure remains
with no one to choose, it looks again every ``LOOK_AGAIN_S`` rather than spinning.

Not handled: cgroup v2, which has no switch for one group's OOM killer (there the kernel still
chooses at ``memory.max``; docs/sandbox.md says how to rule the case out), and hosts where the
parent group's files cannot be written. Written by hand because no tool does this: systemd-oomd
and earlyoom act on whole services or the host, not on one trajectory's rollback.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable, Iterable

from codedance.sandbox.cgroups import ServiceMemory

SETTLE_S = 0.005  # between two looks at the group while a victim gives its memory back
LOOK_AGAIN_S = 0.5  # between two looks while the group stays under pressure with no one to choose
SLACK_BYTES = 32 << 20  # growth that is no one's fault: a fresh spare's pages, kernel caches
ESCALATE_S = 2.0  # a victim still the largest grower this long after its step was stopped loses its holder


def choose_victim(growths: Iterable[tuple[object, int, bool]]) -> object | None:
    """The trajectory to give memory back: the largest growth, whether its step runs or not
    (``(sandbox, growth in bytes, running)``); an idle trajectory grown by no more than
    ``SLACK_BYTES`` holds only committed state and is never chosen. None when none qualifies."""
    best, best_growth = None, None
    for sandbox, growth, running in growths:
        if not running and growth <= SLACK_BYTES:
            continue
        if best_growth is None or growth > best_growth:
            best, best_growth = sandbox, growth
    return best


class OomArbiter:
    """A daemon thread that waits on the kernel's word about the service's parent group (out of
    memory, or nearly full) and makes the trajectory that grew most give memory back."""

    def __init__(self, memory: ServiceMemory, sandboxes: Callable[[], list]):
        self._memory = memory
        self._sandboxes = sandboxes
        self._stop = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self.victims = 0  # how many times a trajectory was made to give memory back
        self.last_error: str | None = None  # the last failure while settling (kept for inspection)
        self._thread = threading.Thread(target=self._loop, name="codedance-oom-arbiter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        os.eventfd_write(self._stop, 1)
        self._thread.join(timeout=5)
        self._memory.close()
        os.close(self._stop)

    def _loop(self) -> None:
        pressure = False
        while True:
            # while under pressure, look again now and then even without a new word from the kernel
            # (it says "out of memory" once per episode, and "nearly full" only when crossing)
            readable, _, _ = select.select([self._memory.event, self._stop], [], [], LOOK_AGAIN_S if pressure else None)
            if self._stop in readable:
                return
            if readable:
                try:
                    os.eventfd_read(self._memory.event)
                except BlockingIOError:
                    pass
            try:
                pressure = self._settle()
            except Exception as exc:  # noqa: BLE001 - e.g. a trajectory closed under it: look again soon
                self.last_error, pressure = f"{type(exc).__name__}: {exc}", True

    def _stopping(self) -> bool:
        return bool(select.select([self._stop], [], [], 0)[0])

    def _settle(self) -> bool:
        """Act while the group is out of memory (any victim) or nearly full (only a victim grown
        past the slack); True if pressure remains with no one left to choose."""
        waiting_for, since, escalated = None, 0.0, False  # waiting_for: (victim, its run number)
        while not self._stopping():
            out_of_memory = self._memory.under_oom()
            if not out_of_memory and not self._memory.nearly_full():
                return False
            growths = {}
            for sandbox in self._sandboxes():
                growth = sandbox.memory_growth()
                if growth is not None and (out_of_memory or growth > SLACK_BYTES):
                    growths[sandbox] = (growth, sandbox.running)
            victim = choose_victim((sandbox, *value) for sandbox, value in growths.items())
            if victim is None:
                return True
            if waiting_for != (victim, victim.runs):  # a new victim, or a new run of the last one
                if victim.yield_memory():
                    self.victims += 1
                    waiting_for, since, escalated = (victim, victim.runs), time.monotonic(), False
            elif (not escalated and time.monotonic() - since > ESCALATE_S
                  and growths[victim][0] > SLACK_BYTES):  # it did not give its growth back
                escalated = victim.yield_memory(whole_trajectory=True)
            time.sleep(SETTLE_S)
        return False
