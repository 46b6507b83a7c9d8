"""A memory cgroup's figures, read from its files: what the OOM arbiter (``arbiter``) compares.

``unreclaimable``: a group's charge less its file cache (which the kernel can reclaim) and less
kernel memory; `MemoryMeasure`: a trajectory's by kind (`TrajectoryCgroup.memory_measure`).
``arbitrate_oom`` hands the arbiter the service's parent group as it watches it:
- cgroup v1 (`ServiceMemory`): the kernel's OOM killer switched off at the parent group, and an
  eventfd the kernel signals when a process there waits for memory or the charge crosses
  ``limit - margin``; each trajectory's own group keeps the kernel's killer (a child group would
  inherit the switch), so a trajectory over its own limit still loses only its step.
- cgroup v2 (`ThrottledServiceMemory`), which has no switch for one group's OOM killer: the parent
  group gets ``memory.high`` at ``limit - margin`` below its ``memory.max`` (``limit``). Past
  ``memory.high`` the kernel reclaims and then makes every allocating process of the group sleep
  on its way back to user space (up to 2 s at a time, longer the further past: cgroup-v2.rst,
  "memory.high ... the processes of the cgroup are throttled and put under heavy reclaim
  pressure"), so the group slows down instead of reaching ``memory.max``, where the kernel's
  killer would choose. The arbiter waits on ``memory.events.local`` (its ``high``, ``max`` and
  ``oom`` counts: a modified-file event, POLLPRI) and on a PSI trigger on ``memory.pressure``
  (POLLPRI when the group's tasks stall on memory for 50 ms within 500 ms), and looks again on
  a deadline meanwhile. "Out of memory" there (v1: a process waits in the kernel's OOM wait)
  means charged past ``memory.high`` with one of those counts risen within the longest throttle
  sleep: an allocation waits in the throttle now.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from typing import NamedTuple


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


# what `unreclaimable` reads: usage, stat and (v1) the kernel memory counter
UNRECLAIMABLE_FILES = {
    1: ("memory.usage_in_bytes", "memory.stat", "memory.kmem.usage_in_bytes"),
    2: ("memory.current", "memory.stat"),
}


def unreclaimable(
    version: int, usage: bytes, stat: bytes, kmem: bytes = b"0", prefix: bytes = b""
) -> int:
    """A memory group's charge less its file cache and its kernel memory (v1: the kmem counter;
    v2: `v2_kernel`), from the texts of its files; ``prefix`` b"total_" for v1's hierarchical
    figures."""
    left_out = int(kmem) if version == 1 else v2_kernel(stat)
    names = {prefix + b"active_file", prefix + b"inactive_file"}
    for line in stat.splitlines():
        name, _, value = line.partition(b" ")
        if name in names:
            left_out += int(value)
    return int(usage) - left_out


# the parts of a v2 group's kernel memory, for kernels whose memory.stat has no "kernel" line
V2_KERNEL_PARTS = (b"slab", b"kernel_stack", b"pagetables", b"percpu", b"sock", b"vmalloc")


def v2_kernel(stat: bytes) -> int:
    """A cgroup v2 group's kernel memory, from its ``memory.stat`` text: the ``kernel`` line
    (Linux 6.0 on), else the sum of its parts. All of it is left out of what the arbiter
    compares, as v1's kmem counter is: not only reclaimable slab is cache there (a negative
    dentry's long name sits in unreclaimable slab, and goes with the dentry)."""
    figures = dict(line.split(b" ", 1) for line in stat.splitlines() if b" " in line)
    if b"kernel" in figures:
        return int(figures[b"kernel"])
    return sum(int(figures.get(name, b"0")) for name in V2_KERNEL_PARTS)


def stat_value(stat: bytes, name: bytes) -> int:
    """One figure of a ``memory.stat`` text (0 where it is not listed)."""
    for line in stat.splitlines():
        key, _, value = line.partition(b" ")
        if key == name:
            return int(value)
    return 0


class MemoryMeasure(NamedTuple):
    """A trajectory's memory by kind, in bytes (`TrajectoryCgroup.memory_measure`). Kept apart
    so that one kind shrinking never hides another growing: a step that deletes committed files
    while its patched holder allocates as much shows no net growth, yet its rollback must write
    the files back into memory the holder took."""

    # what the kernel cannot reclaim without swap besides tmpfs files and locked pages: anonymous
    # memory above all
    other: int
    files: int  # tmpfs files (shmem): the working directory
    kernel: int  # kernel memory (v1: kmem; v2: `v2_kernel`), left out of the two above

    @property
    def held(self) -> int:
        """Unreclaimable memory: ``other`` and ``files``."""
        return self.other + self.files

    def lowered_to(self, now: MemoryMeasure) -> MemoryMeasure:
        """Each kind at most what ``now`` shows."""
        return MemoryMeasure(*(min(mark, current) for mark, current in zip(self, now, strict=True)))

    def growth_since(self, mark: MemoryMeasure) -> tuple[int, int, int]:
        """(unreclaimable growth, the same plus the kernel memory gained, net unreclaimable
        memory freed) since ``mark``: each kind's growth counts alone (when positive); what was
        freed net is what a rollback would need back beyond what killing the step frees."""
        grown = max(0, self.other - mark.other) + max(0, self.files - mark.files)
        return grown, grown + max(0, self.kernel - mark.kernel), max(0, mark.held - self.held)


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


class ServiceMemory:
    """The service's parent memory group as the OOM arbiter watches it (cgroup v1): the kernel's
    OOM killer switched off there, and one eventfd the kernel signals when the group runs out of
    memory or its charge crosses ``limit - margin``. Descriptors are kept open; `close` them."""

    def __init__(self, directory: str, limit: int):
        self.limit = limit
        self.margin = max(16 << 20, limit // 32)
        self.event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._fds = [self.event]
        try:
            self._oom = self._open(os.path.join(directory, "memory.oom_control"))
            self._usage = self._open(os.path.join(directory, "memory.usage_in_bytes"))
            self._stat = self._open(os.path.join(directory, "memory.stat"))
            self._kmem = self._open(os.path.join(directory, "memory.kmem.usage_in_bytes"))
            control = os.path.join(directory, "cgroup.event_control")
            _write(control, f"{self.event} {self._oom}")
            _write(control, f"{self.event} {self._usage} {limit - self.margin}")
            _write(os.path.join(directory, "memory.oom_control"), "1")
        except OSError:
            self.close()
            raise

    def _open(self, path: str) -> int:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._fds.append(fd)
        return fd

    def watched(self) -> list[tuple[int, int]]:
        """(descriptor, poll events) the arbiter waits on."""
        return [(self.event, select.POLLIN)]

    def drain(self) -> None:
        """Take the kernel's word (read the eventfd)."""
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.event)

    def under_oom(self) -> bool:
        """Whether processes of the group wait for memory now."""
        for line in os.pread(self._oom, 4096, 0).splitlines():
            name, _, value = line.partition(b" ")
            if name == b"under_oom":
                return value.strip() != b"0"
        return False

    def fullness(self) -> tuple[bool, bool]:
        """(charged within ``margin`` of the limit, what the group holds less its file cache and
        kernel memory (see `TrajectoryCgroup.memory_measure`) within it: nearly full, writes
        to files may soon fail with ENOMEM without anyone waiting)."""
        usage = os.pread(self._usage, 64, 0)
        held = unreclaimable(
            1, usage, os.pread(self._stat, 8192, 0), os.pread(self._kmem, 64, 0), prefix=b"total_"
        )
        return int(usage) >= self.limit - self.margin, held >= self.limit - self.margin

    def held(self) -> int:
        """What the group holds less its file cache and kernel memory (as `fullness` measures)."""
        return unreclaimable(
            1,
            os.pread(self._usage, 64, 0),
            os.pread(self._stat, 8192, 0),
            os.pread(self._kmem, 64, 0),
            prefix=b"total_",
        )

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


# the kernel's longest single throttle sleep past memory.high (MEMCG_MAX_HIGH_DELAY_JIFFIES, 2 s),
# and a little: a throttled allocation counts as waiting this long after its group's last event
THROTTLE_S = 2.5
# a PSI trigger: some task of the group stalled on memory for 50 ms within a 500 ms window (the
# shortest window a privileged trigger may take); an unprivileged one needs a multiple of 2 s
PSI_TRIGGERS = (b"some 50000 500000", b"some 100000 2000000")


class ThrottledServiceMemory:
    """The service's parent memory group as the OOM arbiter watches it on cgroup v2:
    ``memory.high`` set ``margin`` below ``limit`` (the group's ``memory.max``), so allocations
    past it are throttled rather than killed, and the descriptors the arbiter polls (`watched`):
    an eventfd written to make it look now, ``memory.events.local`` and a PSI trigger on
    ``memory.pressure`` (both POLLPRI). Descriptors are kept open; `close` them."""

    def __init__(self, directory: str, limit: int):
        self.limit = limit
        self.margin = max(16 << 20, limit // 32)
        self.high = limit - self.margin
        self.event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._fds = [self.event]
        self._events_seen, self._event_at = -1, float("-inf")
        try:
            self._current = self._open(os.path.join(directory, "memory.current"))
            self._stat = self._open(os.path.join(directory, "memory.stat"))
            self._events = self._open(os.path.join(directory, "memory.events.local"))
            self._pressure = self._psi_trigger(os.path.join(directory, "memory.pressure"))
            _write(os.path.join(directory, "memory.high"), str(self.high))
            self._events_seen = self._event_count()  # what happened before is no event now
        except OSError:
            self.close()
            raise

    def _open(self, path: str, flags: int = os.O_RDONLY) -> int:
        fd = os.open(path, flags | os.O_CLOEXEC)
        self._fds.append(fd)
        return fd

    def _psi_trigger(self, path: str) -> int | None:
        """A PSI trigger's descriptor on ``path``, or None where the kernel offers none (PSI off,
        or no trigger this process may make): the other descriptors and the deadline remain."""
        for trigger in PSI_TRIGGERS:
            try:
                fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                return None
            try:
                os.write(fd, trigger)
            except OSError:
                os.close(fd)
                continue
            self._fds.append(fd)
            return fd
        return None

    def watched(self) -> list[tuple[int, int]]:
        """(descriptor, poll events) the arbiter waits on."""
        found = [(self.event, select.POLLIN), (self._events, select.POLLPRI)]
        if self._pressure is not None:
            found.append((self._pressure, select.POLLPRI))
        return found

    def drain(self) -> None:
        """Take the kernel's word: the eventfd read, ``memory.events.local`` read again (a
        kernfs file polls POLLPRI until read; a PSI trigger clears at the poll)."""
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.event)
        self._count_events()

    def _event_count(self) -> int:
        text = os.pread(self._events, 4096, 0)
        return sum(stat_value(text, name) for name in (b"high", b"max", b"oom"))

    def _count_events(self) -> None:
        count = self._event_count()
        if count != self._events_seen:
            self._events_seen, self._event_at = count, time.monotonic()

    def under_oom(self) -> bool:
        """Whether an allocation of the group waits now: charged past ``memory.high`` with an
        event (throttled, or reclaiming at ``memory.max``) within the longest throttle sleep."""
        self._count_events()
        recent = time.monotonic() - self._event_at < THROTTLE_S
        return recent and int(os.pread(self._current, 64, 0)) > self.high

    def fullness(self) -> tuple[bool, bool]:
        """As `ServiceMemory.fullness`, from v2's files (``memory.stat`` is hierarchical)."""
        usage = os.pread(self._current, 64, 0)
        held = unreclaimable(2, usage, os.pread(self._stat, 8192, 0))
        return int(usage) >= self.high, held >= self.high

    def held(self) -> int:
        """What the group holds less its file cache and kernel memory."""
        return unreclaimable(2, os.pread(self._current, 64, 0), os.pread(self._stat, 8192, 0))

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


def arbitrate_oom(
    version: int, memory_parent: str, limit: int
) -> ServiceMemory | ThrottledServiceMemory | None:
    """Set up the service's parent memory group (cgroup ``version``, at ``memory_parent``) for
    the arbiter and watch it: v1, the kernel's OOM killer switched off there (`ServiceMemory`);
    v2, allocations throttled ``margin`` below ``limit`` (`ThrottledServiceMemory`). None where
    the group's files are not writable."""
    try:
        if version == 1:
            return ServiceMemory(memory_parent, limit)
        return ThrottledServiceMemory(memory_parent, limit)
    except OSError:
        return None
