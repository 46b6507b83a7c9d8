"""A memory cgroup's figures, read from its files: what the OOM arbiter (``arbiter``) compares.

``unreclaimable``: a group's charge less its file cache (which the kernel can reclaim) and less
kernel memory; `MemoryMeasure`: a trajectory's by kind (`TrajectoryCgroup.memory_measure`).
``arbitrate_oom`` (cgroup v1 only) switches the kernel's OOM killer off at the service's parent
group and returns the descriptors the arbiter waits on (`ServiceMemory`); each trajectory's own
group keeps the kernel's killer (a child group would inherit the switch), so a trajectory over
its own limit still loses only its step.
"""

from __future__ import annotations

import os
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
    v2: reclaimable slab only), from the texts of its files; ``prefix`` b"total_" for v1's
    hierarchical figures."""
    left_out = int(kmem) if version == 1 else 0
    names = {prefix + b"active_file", prefix + b"inactive_file"} | (
        {b"slab_reclaimable"} if version == 2 else set()
    )
    for line in stat.splitlines():
        name, _, value = line.partition(b" ")
        if name in names:
            left_out += int(value)
    return int(usage) - left_out


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

    other: int  # what the kernel cannot reclaim without swap besides tmpfs files and locked pages: anonymous memory above all
    files: int  # tmpfs files (shmem): the working directory
    kernel: int  # v1: kernel memory, left out of the two above; v2: 0 (only reclaimable slab is left out)

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


def arbitrate_oom(version: int, memory_parent: str, limit: int) -> ServiceMemory | None:
    """Switch the kernel's OOM killer off for the service's parent memory group (cgroup
    ``version``, at ``memory_parent``) and watch it (`ServiceMemory`); None where this is not
    possible (cgroup v2 has no such switch; or the files are not writable)."""
    if version != 1:
        return None
    try:
        return ServiceMemory(memory_parent, limit)
    except OSError:
        return None
