"""Who pays when the service's memory runs out: a userspace OOM arbiter for ``memory_total``.

Why it exists: a trajectory's files on the tmpfs work root are charged to its memory cgroup but
sit in no process's RSS, and the kernel's OOM killer ranks processes by RSS. When all the
trajectories together reach ``memory_total`` it would kill whichever process is largest: an
honest neighbour's running step, or an idle neighbour's holder (its whole state), for another
trajectory's files. So where it can (cgroup v1) the service switches the kernel's killer off at
its parent group (`cgroups.arbitrate_oom`; each trajectory's own group keeps it, so a trajectory
over its *own* limit still loses only its step) and this thread decides instead.

While the parent group is out of memory, processes that allocate wait (a page fault sleeps; a
write to a file may fail with ENOMEM). The kernel signals an eventfd; the arbiter then picks the
live trajectory whose unreclaimable memory grew most since its last commit (its running step's
growth, and anything its holder added between steps: `Sandbox.memory_growth`; committed state is
never taken) and makes it give memory back (`Sandbox.yield_memory`):
- a step running: the step is killed; its `run` returns ``oom`` with the state rolled back, and
  if the rollback does not give the growth back (its holder grew: a committed step patched it),
  the trajectory is lost;
- no step running: its memory grew outside any step, which only a patched holder does: the
  trajectory is lost.
- a step that has answered: left alone (what it answered with becomes committed state), unless
  it grew by more than ``SLACK_BYTES`` *after* answering (only a runtime the step patched does
  that): the trajectory is lost.
While the victim is being rolled back (its files are freed only by the restore) the arbiter
waits for it rather than choosing someone else; if it is still the largest grower
``ESCALATE_S`` after its step was stopped and still holds more than ``SLACK_BYTES`` of growth
(its holder keeps the memory, or stopped answering), its holder is killed too and the
trajectory is lost. A victim chosen again in a later `run` is stopped again (when the service
is full of committed state, every growing step ends as ``oom``). It acts for as long as the
group stays out of memory.

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

from codedance.sandbox.cgroups import under_oom

SETTLE_S = 0.005  # between two looks at the group while a victim gives its memory back
IDLE_LOOK_S = 0.05  # between two looks while no trajectory qualifies (the waiters' deadlines will free memory)
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
    """A daemon thread that waits on the kernel's "out of memory" eventfd for the service's
    parent group and makes the trajectory that grew most give memory back."""

    def __init__(self, event_fd: int, control_fd: int, sandboxes: Callable[[], list]):
        self._event, self._control = event_fd, control_fd
        self._sandboxes = sandboxes
        self._stop = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self.victims = 0  # how many times a trajectory was made to give memory back
        self.last_error: str | None = None  # the last failure while settling (kept for inspection)
        self._thread = threading.Thread(target=self._loop, name="codedance-oom-arbiter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        os.eventfd_write(self._stop, 1)
        self._thread.join(timeout=5)
        for fd in (self._event, self._control, self._stop):
            os.close(fd)

    def _loop(self) -> None:
        while True:
            readable, _, _ = select.select([self._event, self._stop], [], [])
            if self._stop in readable:
                return
            try:
                os.eventfd_read(self._event)
            except BlockingIOError:
                continue
            try:
                self._settle()
            except Exception as exc:  # noqa: BLE001 - e.g. a trajectory closed under it: act at the next event
                self.last_error = f"{type(exc).__name__}: {exc}"

    def _stopping(self) -> bool:
        return bool(select.select([self._stop], [], [], 0)[0])

    def _settle(self) -> None:
        """Act until the group is no longer out of memory (or the service stops)."""
        waiting_for, since, escalated = None, 0.0, False  # waiting_for: (victim, its run number)
        while under_oom(self._control) and not self._stopping():
            growths = {}
            for sandbox in self._sandboxes():
                growth = sandbox.memory_growth()
                if growth is not None:
                    growths[sandbox] = (growth, sandbox.running)
            victim = choose_victim((sandbox, *value) for sandbox, value in growths.items())
            if victim is None:
                time.sleep(IDLE_LOOK_S)
            elif waiting_for != (victim, victim.runs):  # a new victim, or a new run of the last one
                if victim.yield_memory():
                    self.victims += 1
                    waiting_for, since, escalated = (victim, victim.runs), time.monotonic(), False
            elif (not escalated and time.monotonic() - since > ESCALATE_S
                  and growths[victim][0] > SLACK_BYTES):  # it did not give its growth back
                escalated = victim.yield_memory(whole_trajectory=True)
            time.sleep(SETTLE_S)
