"""Host-side process handles for the controller: pidfds (no pid-reuse races) and /proc reads.

Linux only (pidfds need 5.3+). Every function tolerates a process that is already gone.
"""

from __future__ import annotations

import contextlib
import os
import signal

# a holder's oom_score_adj where allowed and a memory cgroup bounds it: the kernel never picks it;
# the arbiter decides who pays (tests/sandbox/test_charged_restores.py pins that helpers take it
# too)
HOLDER_OOM_SCORE_ADJ = -1000


def thread_count(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        return 0
    return 0


def page_table_bytes(pid: int | None) -> int | None:
    """The page tables of ``pid`` (``VmPTE``): kernel memory no reclaim gives back; None once
    gone."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmPTE:"):
                    return int(line.split()[1]) << 10
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def kill_pidfd(pidfd: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_group_of(pidfd: int) -> None:
    """SIGKILL the process group the pidfd's process leads (steps call setpgid(0, 0))."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as handle:
            pid = next(int(line.split()[1]) for line in handle if line.startswith("Pid:"))
        if pid > 0:
            os.killpg(pid, signal.SIGKILL)
    except (StopIteration, ProcessLookupError, PermissionError, FileNotFoundError, ValueError):
        pass


def parent_pid(pid: int | None) -> int | None:
    """The parent's pid as this process sees it (None when ``pid`` is gone)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


def alive(pidfd: int | None) -> bool:
    """Whether the process ``pidfd`` pins has not exited (its pid then names it alone)."""
    if pidfd is None:
        return False
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except OSError:
        return False
    return True


def set_oom_score_adj(pid: int | None, value: int, pidfd: int | None = None) -> bool:
    """Tell the kernel's OOM killer how to rank ``pid`` (-1000: never; going below 0 needs
    CAP_SYS_RESOURCE, which a root inside a container may lack); whether it took. With the
    process's ``pidfd``, the file is opened first and written only if that process is still
    alive then: the file was then its own, never a process given the pid after it exited."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as handle:
            if pidfd is not None and not alive(pidfd):
                return False
            handle.write(str(value))
    except OSError:
        return False
    return True


def open_inodes(pid: int, device: int) -> set[int]:
    """The inodes on ``device`` that process ``pid`` holds open or has mapped (from its
    ``/proc`` descriptors, each ``stat``ed, never opened, and its ``maps``); what cannot be read
    is left out."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for name in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                info = os.stat(f"/proc/{pid}/fd/{name}")
                if info.st_dev == device:
                    found.add(info.st_ino)
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/maps", "rb") as maps:
        for line in maps:
            fields = line.split(
                None, 5
            )  # address, permissions, offset, device (hex major:minor), inode
            if len(fields) >= 5 and fields[4] != b"0":
                major, _, minor = fields[3].partition(b":")
                if os.makedev(int(major, 16), int(minor, 16)) == device:
                    found.add(int(fields[4]))
    return found
