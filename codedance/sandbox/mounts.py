"""A size-bounded tmpfs for the service's work root, so that what trajectories write is memory.

Without it, a step writes to the host's disk with no bound until the controller counts the
working directory at commit time (many files of up to ``RLIMIT_FSIZE`` each). On a tmpfs every
page a trajectory writes is charged to its own memory cgroup, so a step's writes are bounded by
the trajectory's memory limit (it ends as ``oom``) and all of them together by the service's;
the mount's own ``size`` and ``nr_inodes`` bound the total once more. Needs root (``mount``);
elsewhere the work root stays a plain directory and docs/sandbox.md says what that costs.

Written with ``ctypes`` because Python has no ``mount``/``umount2`` wrappers.
"""

from __future__ import annotations

import ctypes
import os

_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_MNT_DETACH = 2
_LIBC = ctypes.CDLL(None, use_errno=True)


def mount_tmpfs(path: str, *, size_bytes: int, inodes: int, mode: int = 0o711) -> str | None:
    """Mount a tmpfs on ``path``; None on success, else why not."""
    if os.geteuid() != 0:
        return "the controller is not root"
    options = f"size={size_bytes},nr_inodes={inodes},mode={mode:o}".encode()
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    if _LIBC.mount(b"codedance", os.fsencode(path), b"tmpfs", flags, options) != 0:
        return os.strerror(ctypes.get_errno())
    return None


def unmount(path: str) -> None:
    """Detach the mount on ``path`` if there is one (its files go with it)."""
    if os.path.ismount(path):
        _LIBC.umount2(os.fsencode(path), _MNT_DETACH)
