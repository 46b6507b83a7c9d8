"""Host-wide bookkeeping of sandbox services: who is alive, which uid block is whose, and the
sweep of what dead services left behind (``codedance sandbox gc``).

A service holds an exclusive ``flock`` on ``<tmp>/codedance-<pid>-<hex>.lock`` for its whole life.
The lock, not the pid, says whether a service is alive: pids are not unique across PID
namespaces (tests and CI run controllers in several), a lock is, and the kernel releases it when
the process dies, even by SIGKILL (a forked child of the controller lets go of its copy of the
lock, `forks`, so that it cannot keep a dead controller's service alive). A dead service's
leftovers are its work and store directories (``<name>-work-*``, ``<name>-store-*``,
``<name>-inputs-*``) and its cgroups (``<name>`` under each hierarchy).

Where a dead service's cgroups are: once it has created its parent groups, a service writes their
directories into its own lock file (`record_service_groups`: one absolute path per line, through
the descriptor it holds), because they sit under the cgroup its controller ran in, which need not
be the sweeping process's (a shell, another systemd unit or delegated scope). The sweep trusts
that record only from a regular file of one link, owned by its own euid and not writable by group
or others, and only lines that are normalised absolute paths under ``/sys/fs/cgroup/``, free of
symlinks, ending in the service's own name (`recorded_groups`); it ignores every other line.
A lock with no usable record (a service of an older version, one without cgroups, one killed
between creating its groups and recording them, or a forged record) falls back to the sweeping
process's own groups (`cgroups.service_parents`), as before: groups of such a service elsewhere
are not found. With a record, the lock is removed only once every recorded group is gone.

Trajectory uids come in blocks of 65,536, one block per live service, each claimed with its own
lock file, so that two services on one host never hand out the same uid.
"""

from __future__ import annotations

import fcntl
import glob
import os
import re
import secrets
import stat
import tempfile

from codedance.sandbox import cgroups, forks
from codedance.sandbox.files import remove_tree
from codedance.sandbox.mounts import unmount

PREFIX = "codedance-"
CGROUP_ROOT = "/sys/fs/cgroup"  # recorded groups must lie below it (`recorded_groups`)
_RECORD_MAX = 1 << 16  # bytes: a real record is a few hundred
_SERVICE_NAME = re.compile(r"codedance-[0-9]+-[0-9a-f]{8}")
UID_BASE = 1 << 20  # trajectory uids: UID_BASE + block * UID_BLOCK + slot; never a real account
UID_BLOCK = 1 << 16
UID_BLOCKS = 1 << 10


def _locks_dir() -> str:
    return tempfile.gettempdir()


def _try_lock(path: str) -> int | None:
    """An open descriptor holding an exclusive lock on ``path``, or None if someone holds it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except (
        OSError
    ):  # a directory, a symlink or someone else's file in its place: not a lock of ours
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(path, follow_symlinks=False).st_ino:
            raise BlockingIOError("a sweep removed the file before it was locked")
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return None
    return fd


def claim_service_name() -> tuple[str, int]:
    """A fresh service name and the descriptor of its held lock (keep it open while alive)."""
    for _ in range(100):
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        fd = _try_lock(os.path.join(_locks_dir(), f"{name}.lock"))
        if fd is not None:
            return name, forks.hold(fd)
    raise RuntimeError(f"cannot create a lock file in {_locks_dir()}; is it writable?")


def record_service_groups(fd: int, directories: list[str]) -> None:
    """Write the directories of a live service's parent groups (one per hierarchy) into its lock
    file, through ``fd``, the lock's held descriptor, for `sweep` to find them once the service is
    dead. Symlinks are resolved here (a v1 ``cpu`` hierarchy is often a link to ``cpu,cpuacct``):
    the sweep takes only paths without any. Replaces any earlier record. Raises OSError."""
    text = "".join(os.path.realpath(directory) + "\n" for directory in dict.fromkeys(directories))
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


def recorded_groups(fd: int, name: str) -> list[str] | None:
    """The directories of service ``name``'s groups as its lock file (open on ``fd``) records
    them, or None where it records none that can be trusted: the file is not a regular file of
    one link, owned by this euid and not writable by group or others, or is too big, or has no
    valid line. A valid line is a normalised absolute path under ``CGROUP_ROOT`` whose last
    component is ``name``, with no symlink in it (``realpath`` gives it back unchanged); any
    other line is ignored. Does not check that a path is a cgroup: only root writes such a file,
    and removing a group of the service's name is all the sweep does there."""
    info = os.fstat(fd)
    if (
        not stat.S_ISREG(info.st_mode)
        or info.st_nlink != 1
        or info.st_uid != os.geteuid()
        or info.st_mode & 0o022
        or info.st_size > _RECORD_MAX
    ):
        return None
    found = []
    root = CGROUP_ROOT.rstrip("/") + "/"
    for raw in os.pread(fd, _RECORD_MAX, 0).split(b"\n"):
        try:
            path = raw.decode()
        except UnicodeDecodeError:
            continue
        if (
            path.startswith(root)
            and os.path.normpath(path) == path
            and os.path.basename(path) == name
            and "\0" not in path
            and os.path.realpath(path) == path
        ):
            found.append(path)
    return list(dict.fromkeys(found)) or None


def release_service_name(name: str, fd: int) -> None:
    """Remove a closed service's lock file, then let the lock go."""
    try:
        os.unlink(os.path.join(_locks_dir(), f"{name}.lock"))
    except FileNotFoundError:
        pass
    forks.close(fd)


def claim_uid_block() -> tuple[int, int]:
    """The first uid of a block no live service uses, and the descriptor of its held lock."""
    directory = os.path.join(_locks_dir(), f"{PREFIX}uid-blocks")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise RuntimeError(
            f"{directory} is not a private directory of this user; remove it "
            "(someone else could hold or delete its uid-block locks)"
        )
    start = secrets.randbelow(UID_BLOCKS)
    for offset in range(UID_BLOCKS):
        block = (start + offset) % UID_BLOCKS
        fd = _try_lock(os.path.join(directory, f"block-{block}.lock"))
        if fd is not None:
            return UID_BASE + block * UID_BLOCK, forks.hold(fd)
    raise RuntimeError(f"all {UID_BLOCKS} uid blocks are held by live sandbox services")


def release_uid_block(fd: int) -> None:
    """Let a closed service's uid block go."""
    forks.close(fd)


def sweep() -> list[str]:
    """Remove the directories and cgroups of every dead service; the names of those swept.

    A service's cgroups are looked for where its lock records them (`recorded_groups`), else
    under the sweeping process's own groups. Its lock stays (for a later sweep to try again)
    while a group looked for is still there. Cgroups are left alone when not run as root."""
    swept = []
    for lock in sorted(glob.glob(os.path.join(glob.escape(_locks_dir()), f"{PREFIX}*.lock"))):
        name = os.path.basename(lock)[: -len(".lock")]
        if not _SERVICE_NAME.fullmatch(name):
            # not one of ours (a name with wildcards would match live services' directories)
            continue
        fd = _try_lock(lock)
        if fd is None:
            continue  # alive
        try:
            pattern = os.path.join(glob.escape(_locks_dir()), glob.escape(name))
            for path in glob.glob(f"{pattern}-work-*") + glob.glob(f"{pattern}-store-*") + \
                    glob.glob(f"{pattern}-inputs-*"):  # fmt: skip
                unmount(path)
                remove_tree(path)
            recorded = recorded_groups(fd, name)
            parents = None if recorded is None else [os.path.dirname(path) for path in recorded]
            if os.geteuid() == 0 and not cgroups.remove_service_groups(name, parents):
                continue  # a group is still busy: its lock stays, for the next sweep to try again
            os.unlink(lock)
            swept.append(name)
        finally:
            os.close(fd)
    return swept
