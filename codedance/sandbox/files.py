"""Atomic files for a trajectory's working directory: checkpoint after a good step, restore after
a failed one, without ever trusting the directory's contents.

Host side, run by the controller (root, outside the jail) while every process of the trajectory is
frozen where the host has a freezer (see ``cgroups``). A step changes files in place (PIL and cv2
rewrite files, so hard links are unsafe), hence a private copy of the last good state lives in a
store outside the jail. ``checkpoint`` copies only what changed since the previous checkpoint, so a
step that touches nothing costs one ``scandir``; ``restore`` makes the directory equal to the
checkpoint again. A file counts as changed when its size, mtime, ctime or inode differ (ctime
cannot be set by user code).

What makes it safe against a hostile trajectory (one whose processes race the controller):
- **A restore writes with the trajectory's own rights**: the controller's thread switches its
  file-system identity (``setfsuid``/``setfsgid``, per thread) to the trajectory's uid while it
  writes into the working directory, so even a mistake could not touch a file the trajectory
  could not (the store it reads from is searchable by that identity only through the
  controller's descriptor; the jail never sees it). Directories whose mode locks their owner out
  are opened up for the restore and their mode put back after. The entries are made and the data
  written by the ``writer`` the caller passes (`charged_copy`: a helper process in the trajectory's
  memory cgroup, so the trajectory, not the controller, is charged for its restored files).
- **The trajectory is frozen whenever the controller writes.** Both operations first look
  (unfrozen: reading cannot be abused) and only when something must be copied or removed call
  ``before_writing`` (the caller freezes every process of the trajectory) and look again.
- **Nothing is resolved by string.** Every operation is relative to a directory descriptor and
  names one component (never ``/`` or ``..``), opened with ``O_NOFOLLOW`` (and ``O_DIRECTORY`` for
  directories): a walk that is ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` one component at
  a time, written with plain ``os`` calls because Python has no ``openat2``. A symlink anywhere on
  a path fails the open instead of being followed, at every component, not only the last.
- **Only regular files and directories are kept.** A step that leaves a symlink, FIFO, socket or
  device refuses its commit (`Unkeepable`); a restore removes them. Opens are non-blocking and
  checked with ``fstat``, so a FIFO swapped in cannot block the controller.
- **Every entry is counted** (of any type) against the entry limit, directories are bounded in
  depth, and files must belong to the trajectory's uid (a hard link to someone else's file is
  refused). A file with more than one name (hard links) is refused too: the store would keep a
  copy per name and a restore write one (a thousand links to one file take a thousand copies of the
  host's disk; a byte appended to a file with n links needs n copies to roll back). A file counts
  its length plus any space allocated past its end (``fallocate`` with ``KEEP_SIZE``).
- **After a restore the manifest is what the controller wrote** (``fstat`` of the files it
  created), never a re-scan of a directory the trajectory can change.
- Long operations check a deadline (`DeadlinePassed`), so a step that left millions of entries
  cannot hold the controller past the end of its ``run()``.
Not handled: extended attributes and ACLs (not kept; seccomp denies setting them in the jail).
A restored file gets back its modification time, not its access time; sparse files stay sparse.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from codedance.sandbox.memory.charged_copy import LocalWriter

MAX_DEPTH = 32  # directory levels a committed working directory may have
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_REWRITE = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KEPT_MODE = 0o777  # permission bits kept; setuid, setgid and sticky bits are never restored
_CHECK_EVERY = 256  # entries between deadline checks
_MAX_OPEN_LEVELS = (
    24  # directory levels held open at once while removing a tree (two descriptors each)
)
_OWNER_RWX = 0o700  # what the owner needs on a directory to list, enter and change it
_STORE_DIR_MODE, _STORE_FILE_MODE = 0o755, 0o644  # the store's own modes (real ones: the manifest)
_LIBC = ctypes.CDLL(None, use_errno=True)
LOCAL = LocalWriter()  # the store's writes, and a restore's where no helper can be charged


@dataclass(frozen=True)
class Entry:
    kind: str  # "file", "dir" or "other" (restore only: something to remove)
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    mode: int

    @classmethod
    def of(cls, info: os.stat_result) -> Entry:
        kind = (
            "dir"
            if stat.S_ISDIR(info.st_mode)
            else "file"
            if stat.S_ISREG(info.st_mode)
            else "other"
        )
        return cls(
            kind, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_mode
        )


class LimitExceeded(Exception):
    """The working directory is over a limit (entries, bytes, depth): the commit is refused."""


class Unkeepable(LimitExceeded):
    """The working directory holds something other than the trajectory's own files and
    directories."""


class SnapshotBroken(Exception):
    """The store no longer holds a complete good state: the trajectory's files are lost."""


class DeadlinePassed(Exception):
    """The operation could not finish before its deadline."""


class _Clock:
    """Counts entries; every ``_CHECK_EVERY`` of them, raises `DeadlinePassed` past ``deadline``
    and InterruptedError once ``stop()`` (the sandbox is closing: otherwise a restore
    of half a million directories runs on for the run's whole recovery time after close()).
    Pinned by
    `tests/sandbox/test_units.py::test_a_closing_sandboxs_checkpoint_and_restore_stop_walking`."""

    def __init__(self, deadline: float | None, stop: Callable[[], bool] | None = None):
        self.deadline, self.stop, self.count = deadline, stop, 0

    def tick(self) -> None:
        self.count += 1
        if self.count % _CHECK_EVERY:
            return
        if self.stop is not None and self.stop():
            raise InterruptedError("stopped: the sandbox is closing")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DeadlinePassed("the working directory could not be processed in time")


def open_dir(root_fd: int, relative: str) -> int:
    """A descriptor of ``root_fd``'s subdirectory ``relative`` (``""``: a duplicate of the root),
    opened one component at a time with no symlink followed."""
    fd = os.dup(root_fd)
    for name in _parts(relative):
        try:
            child = os.open(name, _DIR, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


def open_own_dir(parent_fd: int, name: str, opened_up: list[tuple[int, int]] | None = None) -> int:
    """Open the directory ``name`` of ``parent_fd`` (no symlink followed) with full rights for
    its owner: a mode that locks the owner out is widened (allowed to the owner, and the thread
    may be acting as it); with ``opened_up``, ``(descriptor, old mode)`` is appended for the
    caller to put back (the descriptor is then a duplicate the caller closes)."""
    try:
        fd = os.open(name, _DIR, dir_fd=parent_fd)
    except PermissionError:  # not even readable: change its mode through an O_PATH descriptor
        handle = os.open(
            name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd
        )
        try:
            old_mode = stat.S_IMODE(os.fstat(handle).st_mode)
            os.chmod(f"/proc/self/fd/{handle}", old_mode | _OWNER_RWX)
            fd = os.open(name, _DIR, dir_fd=parent_fd)
        finally:
            os.close(handle)
        if opened_up is not None:
            opened_up.append((os.dup(fd), old_mode))
        return fd
    old_mode = stat.S_IMODE(os.fstat(fd).st_mode)
    if old_mode & _OWNER_RWX != _OWNER_RWX:
        os.fchmod(fd, old_mode | _OWNER_RWX)
        if opened_up is not None:
            opened_up.append((os.dup(fd), old_mode))
    return fd


_acting = (
    threading.local()
)  # .owner: whom this thread acts as (`acting_as`); .paused: during a collection
_NO_CHANGE = 0xFFFFFFFF  # setfsuid(-1) and setfsgid(-1) change nothing and return the current id
_ROOT_AT_START = os.geteuid() == 0  # only root switches identities (`acting_as`)


def _become(uid: int, gid: int) -> None:
    """Set this thread's file-system identity (``setfsgid`` first: changing it needs fsuid 0)."""
    _LIBC.setfsgid(gid)
    _LIBC.setfsuid(uid)


@contextlib.contextmanager
def acting_as(owner: tuple[int, int] | None) -> Iterator[None]:
    """Run the block with this thread's file-system identity set to ``owner`` (uid, gid); a
    no-op without an owner or when the controller is not root. Per thread: other threads of
    the controller keep root's rights. Nests: the identity before is put back after.
    Finalizers the cyclic garbage collector runs in this thread meanwhile run as root
    (`_collect_as_root`): any object of the controller's process may be collected in any thread,
    and a `Sandbox` dropped unclosed closed itself as the trajectory, could not remove its
    cgroups and files, and left them."""
    if owner is None or os.geteuid() != 0:
        yield
        return
    uid, gid = owner
    before = getattr(_acting, "owner", None)
    _become(uid, gid)
    _acting.owner = owner
    try:
        if _LIBC.setfsuid(_NO_CHANGE) != uid or _LIBC.setfsgid(_NO_CHANGE) != gid:
            raise OSError(errno.EPERM, "could not act as the trajectory's user")
        yield
    finally:
        _acting.owner = before
        _become(*(before or (0, 0)))


def _collect_as_root(phase: str, _info: dict) -> None:
    """A `gc.callbacks` hook: a collection in a thread whose file-system identity is not root's
    (`acting_as`, read from the kernel, so that no moment on the way in or out is missed) runs
    as root (finalizers run between "start" and "stop"; collections do not nest), then the
    thread takes that identity back. Nothing when the controller is not root."""
    if _ROOT_AT_START:
        if phase == "start":
            current = (_LIBC.setfsuid(_NO_CHANGE), _LIBC.setfsgid(_NO_CHANGE))
            _acting.paused = None if current == (0, 0) else current
            if _acting.paused is not None:
                _become(0, 0)
        elif (paused := getattr(_acting, "paused", None)) is not None:
            _acting.paused = None
            _become(*paused)


gc.callbacks.append(_collect_as_root)


def _parts(relative: str) -> list[str]:
    parts = [p for p in relative.split("/") if p]
    if any(p in (".", "..") or "\0" in p for p in parts):
        raise ValueError(f"not a plain relative path: {relative!r}")
    return parts


def _split(relative: str) -> tuple[str, str]:
    parent, _, name = relative.rpartition("/")
    return parent, name


def scan(
    root_fd: int,
    *,
    protected: frozenset[str] = frozenset(),
    owner_uid: int | None = None,
    max_entries: int,
    max_bytes: int,
    deadline: float | None = None,
    stop: Callable[[], bool] | None = None,
) -> dict[str, Entry]:
    """Every entry below ``root_fd`` as ``relative path -> Entry``, refusing what cannot be kept:
    raises `Unkeepable` or `LimitExceeded` (limits checked as entries are found, so the cost of
    a refusal is bounded by the limits), `DeadlinePassed`, or InterruptedError once ``stop()``."""
    entries: dict[str, Entry] = {}
    total = 0
    clock = _Clock(deadline, stop)
    pending = [("", 0)]
    while pending:
        relative_dir, depth = pending.pop()
        fd = open_dir(root_fd, relative_dir)
        try:
            with os.scandir(fd) as iterator:
                for item in iterator:
                    clock.tick()
                    relative = f"{relative_dir}/{item.name}" if relative_dir else item.name
                    if not relative_dir and item.name in protected:
                        continue
                    if len(entries) >= max_entries:
                        raise LimitExceeded(
                            f"more than {max_entries} entries in the working directory"
                        )
                    info = item.stat(follow_symlinks=False)
                    entry = Entry.of(info)
                    if entry.kind == "other":
                        raise Unkeepable(
                            f"{relative!r} is a {_kind_name(info.st_mode)}; only regular files "
                            "and directories are kept in the working directory"
                        )
                    if owner_uid is not None and info.st_uid != owner_uid:
                        raise Unkeepable(
                            f"{relative!r} does not belong to the sandbox (a hard link?)"
                        )
                    if entry.kind == "dir":
                        if depth + 1 >= MAX_DEPTH:
                            raise LimitExceeded(
                                f"directories nested deeper than {MAX_DEPTH} levels"
                            )
                        pending.append((relative, depth + 1))
                    else:
                        if info.st_nlink != 1:
                            raise Unkeepable(
                                f"{relative!r} is one file with {info.st_nlink} names (hard "
                                "links); keep one name per file (copy it rather than link it)"
                            )
                        total += info.st_size + _allocated_past_end(info)
                        if total > max_bytes:
                            raise LimitExceeded(
                                f"more than {max_bytes >> 20} MiB in the working directory"
                            )
                    entries[relative] = entry
        finally:
            os.close(fd)
    return entries


def _allocated_past_end(info: os.stat_result) -> int:
    """Space allocated to a file beyond its last block (``fallocate`` with ``KEEP_SIZE``)."""
    block = info.st_blksize or 4096
    return max(0, info.st_blocks * 512 - -(-info.st_size // block) * block)


def _kind_name(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


def remove(dir_fd: int, name: str, clock: _Clock | None = None, is_dir: bool = False) -> None:
    """Remove the entry ``name`` of ``dir_fd``, whatever it is, a tree of any depth included,
    following no symlink and holding at most ``2 * _MAX_OPEN_LEVELS`` descriptors. ``is_dir``:
    it was listed as a directory (tried with ``rmdir`` first; a wrong guess costs a call).

    Each directory is listed once, as it is emptied (a listing is held open per level while
    a subdirectory is removed, not started over: that cost one read of a whole batch of names per
    subdirectory, and a wide tree of them many times the time); an empty
    subdirectory goes with one ``rmdir``. Entries that appear behind a listing (a subtree lifted
    to the top, or a process still writing) are found by listing again when the directory will
    not go."""
    clock = clock or _Clock(None)
    if _remove_entry(dir_fd, name, is_dir):
        return
    try:
        top = open_own_dir(dir_fd, name)
    except FileNotFoundError:  # removed meanwhile (another removal of the same tree)
        return
    stack: list[tuple[int, str, Iterator[os.DirEntry] | None]] = [(top, name, None)]
    try:
        while stack:
            fd, level_name, listing = stack[-1]
            if listing is None:
                listing = os.scandir(fd)
                stack[-1] = (fd, level_name, listing)
            deeper = None
            for item in listing:
                clock.tick()
                if not _remove_entry(fd, item.name, item.is_dir(follow_symlinks=False)):
                    deeper = item.name
                    break
            if deeper is None:
                listing.close()
                if _remove_entry(stack[-2][0] if len(stack) > 1 else dir_fd, level_name, True):
                    os.close(fd)
                    stack.pop()
                else:  # not empty yet: list it again
                    clock.tick()
                    stack[-1] = (fd, level_name, None)
            elif (
                len(stack) >= _MAX_OPEN_LEVELS
            ):  # flatten: lift the subtree to the top of this removal
                lifted = f".lifted-{time.monotonic_ns()}"
                try:
                    os.rename(deeper, lifted, src_dir_fd=fd, dst_dir_fd=stack[0][0])
                except FileNotFoundError:  # removed meanwhile
                    continue
                for level_fd, _, level_listing in stack[1:]:
                    if level_listing is not None:
                        level_listing.close()
                    os.close(level_fd)
                del stack[1:]
            else:
                with contextlib.suppress(
                    FileNotFoundError
                ):  # if removed meanwhile, the listing goes on
                    stack.append((open_own_dir(fd, deeper), deeper, None))
    finally:
        for level_fd, _, level_listing in stack:
            if level_listing is not None:
                level_listing.close()
            os.close(level_fd)


_OTHER_KIND = (errno.EISDIR, errno.EPERM, errno.ENOTDIR)  # unlink of a directory, rmdir of a file


def _remove_entry(dir_fd: int, name: str, is_dir: bool) -> bool:
    """Remove ``name`` of ``dir_fd`` if it is not a directory, or an empty one (gone already:
    done); False for a directory that is not empty. ``is_dir`` says which call to try first; the
    other is tried when the first says the entry is of the other kind."""
    first, second = (os.rmdir, os.unlink) if is_dir else (os.unlink, os.rmdir)
    try:
        return _removed(first, dir_fd, name)
    except OSError as exc:
        if exc.errno not in _OTHER_KIND:
            raise
        try:
            return _removed(second, dir_fd, name)
        except OSError as again:
            # both say "the other kind": the first one's error is the real one (EPERM from
            # unlink in a sticky directory, say); otherwise the second call's
            raise (exc if again.errno in _OTHER_KIND else again) from None


def _removed(call: Callable[..., None], dir_fd: int, name: str) -> bool:
    """``call(name, dir_fd=dir_fd)``: True once gone, False for a directory not empty."""
    try:
        call(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


def remove_tree(
    path: str, deadline: float | None = None, stop: Callable[[], bool] | None = None
) -> None:
    """Remove ``path`` (a directory the controller created) and everything below it, safely;
    `DeadlinePassed` at ``deadline`` (None: none), InterruptedError once ``stop()``, with what
    is left still there."""
    if not path or not os.path.isabs(path):
        raise ValueError(f"remove_tree needs an absolute path, got {path!r}")
    parent, name = os.path.split(path.rstrip("/"))
    try:
        parent_fd = os.open(parent, _DIR)
    except FileNotFoundError:
        return
    try:
        remove(parent_fd, name, _Clock(deadline, stop))
    finally:
        os.close(parent_fd)


def _copy_file(
    source_dir: int,
    target_dir: int,
    name: str,
    expected_inode: int | None,
    mode: int,
    owner: tuple[int, int] | None,
    writer: LocalWriter = LOCAL,
    mtime_ns: int | None = None,
) -> os.stat_result:
    """Copy the regular file ``name`` into a new file of the same name; the new file's fstat."""
    source = os.open(name, _READ, dir_fd=source_dir)
    try:
        info = os.fstat(source)
        if not stat.S_ISREG(info.st_mode) or (
            expected_inode is not None and info.st_ino != expected_inode
        ):
            raise Unkeepable(f"{name!r} changed while it was being saved")
        target = writer.create_file(target_dir, name)
        try:
            writer.copy(source, target)
            return _own(target, mode, owner, mtime_ns)
        finally:
            os.close(target)
    finally:
        os.close(source)


def _rewrite_file(
    source_dir: int,
    target_dir: int,
    name: str,
    expected_inode: int,
    mode: int,
    owner: tuple[int, int] | None,
    writer: LocalWriter,
    mtime_ns: int,
) -> os.stat_result | None:
    """Put the stored ``name`` back into the existing file of that name, in place, so descriptors
    the holder keeps open on it stay attached to the working directory's file; its fstat. None
    (nothing written) unless it is still the regular file ``expected_inode`` with no other link."""
    target = _open_in_place(target_dir, name, expected_inode)
    if target is None:
        return None
    try:
        source = os.open(name, _READ, dir_fd=source_dir)
        try:
            os.ftruncate(target, 0)
            writer.copy(source, target)
        finally:
            os.close(source)
        return _own(target, mode, owner, mtime_ns)
    finally:
        os.close(target)


def _open_in_place(dir_fd: int, name: str, expected_inode: int) -> int | None:
    """``name`` opened for writing if it is still the regular file ``expected_inode`` with no
    other link (else None: it is then removed and copied afresh)."""
    try:
        fd = os.open(name, _REWRITE, dir_fd=dir_fd)
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_ino != expected_inode or info.st_nlink != 1:
        os.close(fd)
        return None
    return fd


def _make_dir(
    parent_fd: int, name: str, mode: int, owner: tuple[int, int] | None, writer: LocalWriter = LOCAL
) -> os.stat_result:
    fd = writer.make_dir(parent_fd, name)
    try:
        return _own(fd, mode, owner)
    finally:
        os.close(fd)


def _own(
    fd: int, mode: int, owner: tuple[int, int] | None, mtime_ns: int | None = None
) -> os.stat_result:
    """Give the new entry ``fd`` its owner, kept mode bits and (a restored file) its modification
    time from the checkpoint; its fstat."""
    if owner is not None:
        os.fchown(fd, *owner)
    os.fchmod(fd, mode & _KEPT_MODE)
    if mtime_ns is not None:
        os.utime(fd, ns=(mtime_ns, mtime_ns))
    return os.fstat(fd)


class StoreBudget:
    """What the stores of all a service's trajectories may hold together on their file system
    (the host's disk under ``TMPDIR``, not the memory-charged work root): entries and bytes.
    Each checkpoint claims its trajectory's new totals before it copies anything; a claim that
    does not fit refuses the commit (the trajectory is kept). Without it, n trajectories may keep
    n × ``Limits.workdir_files`` entries there (on a small disk, some
    thousand trajectories of empty files use up the host's inodes, and then every checkpoint,
    and the host, fail)."""

    SHARE = 0.5  # of the file system's free space and free inodes when the service starts
    NAME_ALLOWANCE = (
        64  # bytes a name takes in its directory, besides twice its length (see `cost`)
    )

    def __init__(self, entries: int, size: int, block: int = 4096):
        self.entries, self.size, self.block = entries, size, max(1, block)
        self._claims: dict[int, tuple[int, int]] = {}
        self._claimed = (0, 0)  # the sums of all claims
        self._lock = threading.Lock()

    @classmethod
    def of_free_space(cls, path: str) -> StoreBudget:
        info = os.statvfs(path)
        return cls(
            int(info.f_favail * cls.SHARE),
            int(info.f_bavail * info.f_frsize * cls.SHARE),
            info.f_frsize,
        )

    def cost(self, entries: dict[str, Entry]) -> int:
        """The bytes a store holding ``entries`` (relative path: entry) may take on its file
        system, at least: each entry's data rounded up to whole blocks and never less than one
        block (an empty file or a directory takes one too), one more block per 256 for the
        file system's own map of a large file, the store's own directory, and for each name its
        directory's space: 64 bytes plus twice the name's length (ext4 keeps 8 bytes plus the
        name per entry, and a split of an indexed directory leaves its blocks half full). File
        lengths alone are not it (thousands of one-byte entries with long names claim a few KB
        and take tens of MB of the host's disk)."""
        block = self.block
        total = block
        for relative, entry in entries.items():
            blocks = max(1, -(-entry.size // block)) if entry.kind == "file" else 1
            name = len(os.fsencode(relative.rsplit("/", 1)[-1]))
            total += (blocks + blocks // 256) * block + self.NAME_ALLOWANCE + 2 * name
        return total

    def claim(self, owner: int, entries: int, size: int) -> bool:
        """Make (``entries``, ``size``) ``owner``'s claim if all claims then fit; False (its claim
        unchanged) if not."""
        with self._lock:
            old_entries, old_size = self._claims.get(owner, (0, 0))
            total = (self._claimed[0] - old_entries + entries, self._claimed[1] - old_size + size)
            if total[0] > self.entries or total[1] > self.size:
                return False
            self._claims[owner], self._claimed = (entries, size), total
            return True

    def release(self, owner: int) -> None:
        with self._lock:
            entries, size = self._claims.pop(owner, (0, 0))
            self._claimed = (self._claimed[0] - entries, self._claimed[1] - size)


class WorkdirSnapshot:
    """The last good state of ``workdir``, kept in ``store`` (a directory the jail cannot see).

    ``protected``: top-level names (the read-only inputs) that are neither kept nor touched.
    ``owner``: the trajectory's (uid, gid); files must be its own and are restored as its own.
    ``budget``: shared with the service's other trajectories (`StoreBudget`), claimed per
    checkpoint. ``stop``: checked as entries are walked; once it says so, a checkpoint or restore
    raises InterruptedError (the directory is then in no defined state, as past a deadline).
    """

    def __init__(
        self,
        workdir: str,
        store: str,
        *,
        protected: frozenset[str],
        owner: tuple[int, int] | None,
        max_entries: int,
        max_bytes: int,
        budget: StoreBudget | None = None,
    ):
        self.workdir, self.store, self.protected, self.owner = workdir, store, protected, owner
        self.max_entries, self.max_bytes, self.budget = max_entries, max_bytes, budget
        self.stop: Callable[[], bool] | None = None
        os.makedirs(store, mode=_STORE_DIR_MODE, exist_ok=True)
        os.chmod(store, _STORE_DIR_MODE)  # searchable by the trajectory's identity (see acting_as)
        self._work_fd = os.open(workdir, _DIR)
        self._store_fd = os.open(store, _DIR)
        self.manifest: dict[str, Entry] = {}
        self.broken = False
        self.checkpoint()

    def close(self) -> None:
        if self.budget is not None:
            self.budget.release(id(self))
        self.drop_workdir()
        if self._store_fd >= 0:
            os.close(self._store_fd)
        self._store_fd = -1

    def drop_workdir(self) -> None:
        """Close the working directory (a lost trajectory's): where it is a tmpfs of the
        trajectory's own, this descriptor is what keeps its files once its processes are gone."""
        if self._work_fd >= 0:
            os.close(self._work_fd)
        self._work_fd = -1

    def _scan(self, deadline: float | None) -> dict[str, Entry]:
        return scan(
            self._work_fd,
            protected=self.protected,
            owner_uid=self.owner[0] if self.owner else None,
            max_entries=self.max_entries,
            max_bytes=self.max_bytes,
            deadline=deadline,
            stop=self.stop,
        )

    def checkpoint(
        self, deadline: float | None = None, before_writing: Callable[[], None] = lambda: None
    ) -> None:
        """Record the directory as the new good state. Raises `LimitExceeded` (and its
        `Unkeepable`) or `DeadlinePassed` before the store is touched, the good state unchanged;
        `SnapshotBroken` if copying failed halfway (the store then matches neither state).

        ``before_writing`` runs (and the directory is scanned again) only when something must be
        copied: the caller freezes the trajectory there, and an unchanged directory costs no
        freeze."""
        current = self._scan(deadline)
        if not any(_needs_copy(self.manifest.get(r), e) for r, e in current.items()) and not any(
            _needs_copy(e, current.get(r)) for r, e in self.manifest.items()
        ):
            self.manifest = current
            return
        before_writing()
        current = self._scan(deadline)
        self._claim(current)
        clock = _Clock(deadline, self.stop)
        try:
            for relative in sorted(self.manifest, reverse=True):  # children before their parents
                if _needs_copy(self.manifest[relative], current.get(relative)):
                    clock.tick()
                    self._remove_in(self._store_fd, relative, clock)
            for relative in sorted(current):  # parents before their children
                entry = current[relative]
                if not _needs_copy(self.manifest.get(relative), entry):
                    continue
                clock.tick()
                parent, name = _split(relative)
                source_dir, target_dir = (
                    open_dir(self._work_fd, parent),
                    open_dir(self._store_fd, parent),
                )
                try:
                    if entry.kind == "dir":
                        _make_dir(target_dir, name, _STORE_DIR_MODE, None)
                    else:
                        _copy_file(
                            source_dir, target_dir, name, entry.inode, _STORE_FILE_MODE, None
                        )
                finally:
                    os.close(source_dir)
                    os.close(target_dir)
        except (OSError, LimitExceeded, DeadlinePassed) as exc:
            self.broken = True
            raise SnapshotBroken(f"saving the working directory failed halfway: {exc}") from exc
        self.manifest = current

    def _claim(self, entries: dict[str, Entry]) -> None:
        if self.budget is not None and not self.budget.claim(
            id(self), len(entries), self.budget.cost(entries)
        ):
            raise LimitExceeded(
                f"the service's store of committed files is full ({self.budget.entries:,} entries, "
                f"{self.budget.size >> 20:,} MiB for all its sandboxes, on the host's "
                "disk under TMPDIR): "
                "keep fewer or smaller files, or close idle sandboxes"
            )

    def restore(
        self,
        deadline: float | None = None,
        before_writing: Callable[[], None] = lambda: None,
        writer: LocalWriter = LOCAL,
    ) -> None:
        """Put the directory back exactly as it was at the last checkpoint (`DeadlinePassed` if
        that takes past ``deadline``; the directory is then in no defined state). ``writer``
        makes each entry and writes each file's data (`charged_copy`: so that the trajectory is
        charged for them).

        ``before_writing`` runs only when the directory differs from the checkpoint (found by a
        walk that stops at the first difference): a failed step that touched no file costs no
        freeze."""
        if self.broken:
            raise SnapshotBroken("the saved state is incomplete; the trajectory's files are lost")
        if not self._differs(deadline):
            return
        before_writing()
        opened_up: list[tuple[int, int]] = []  # directories whose mode locked their owner out
        try:
            with acting_as(self.owner):
                self._restore_as_owner(deadline, opened_up, writer)
        finally:
            for fd, mode in opened_up:
                try:
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)

    def _restore_as_owner(
        self, deadline: float | None, opened_up: list[tuple[int, int]], writer: LocalWriter
    ) -> None:
        clock = _Clock(deadline, self.stop)
        self._remove_strays(clock, opened_up)
        # directories the first pass opened up are compared with their mode from before: an
        # untouched read-only directory is not re-copied (a log the holder keeps
        # open in one would then write to a removed file)
        # pinned by `tests/sandbox/test_contract.py::`
        # `test_a_file_kept_open_in_a_read_only_directory_survives_a_rollback`
        modes_before = {os.fstat(fd).st_ino: mode for fd, mode in opened_up}
        children: dict[str, list[str]] = {}
        for relative in self.manifest:
            children.setdefault(_split(relative)[0], []).append(relative)
        restored: dict[str, Entry] = {}
        pending = [""]
        while pending:
            relative_dir = pending.pop()
            work_dir, store_dir = (
                self._enter(relative_dir, opened_up),
                open_dir(self._store_fd, relative_dir),
            )
            try:
                present: dict[str, Entry] = {}
                with os.scandir(work_dir) as iterator:
                    for item in iterator:
                        clock.tick()
                        if relative_dir or item.name not in self.protected:
                            present[item.name] = _with_mode_before(
                                Entry.of(item.stat(follow_symlinks=False)), modes_before
                            )
                for name, entry in present.items():
                    relative = f"{relative_dir}/{name}" if relative_dir else name
                    kept = self.manifest.get(relative)
                    if _same(kept, entry):
                        restored[relative] = kept
                        continue
                    if (
                        kept is not None
                        and kept.kind == entry.kind == "file"
                        and kept.inode == entry.inode
                    ):
                        made = _rewrite_file(
                            store_dir,
                            work_dir,
                            name,
                            entry.inode,
                            kept.mode,
                            self.owner,
                            writer,
                            kept.mtime_ns,
                        )
                        if made is not None:  # changed in place: open descriptors stay attached
                            restored[relative] = Entry.of(made)
                            continue
                    remove(work_dir, name, clock)
                for relative in children.get(relative_dir, ()):
                    entry = self.manifest[relative]
                    clock.tick()
                    name = _split(relative)[1]
                    if relative not in restored:
                        made = (
                            _make_dir(work_dir, name, entry.mode, self.owner, writer)
                            if entry.kind == "dir"
                            else _copy_file(
                                store_dir,
                                work_dir,
                                name,
                                None,
                                entry.mode,
                                self.owner,
                                writer,
                                entry.mtime_ns,
                            )
                        )
                        restored[relative] = Entry.of(made)
                    if entry.kind == "dir":
                        pending.append(relative)
            finally:
                os.close(work_dir)
                os.close(store_dir)
        self.manifest = restored

    def _remove_strays(self, clock: _Clock, opened_up: list[tuple[int, int]]) -> None:
        """First pass of a restore, over the whole tree: remove what the checkpoint does not have
        (new entries, replaced files, other kinds) and empty the files changed in place, so that
        the copies of the second pass never need more memory than the checkpoint holds (a
        step that deleted top-level files and wrote into a subdirectory, or emptied one committed
        file and filled another, would otherwise peak at both while it is restored). Directories
        whose mode changed are left to the second pass."""
        pending = [""]
        while pending:
            relative_dir = pending.pop()
            work_dir = self._enter(relative_dir, opened_up)
            try:  # each entry handled as it is listed: the controller holds no list of a directory
                # (a list of a million names costs hundreds of MiB and seconds past the deadline);
                # one that the listing misses as others are removed is the second pass's
                with os.scandir(work_dir) as iterator:
                    for item in iterator:
                        clock.tick()
                        if not relative_dir and item.name in self.protected:
                            continue
                        self._remove_stray(work_dir, relative_dir, item, clock, pending)
            finally:
                os.close(work_dir)

    def _remove_stray(
        self, work_dir: int, relative_dir: str, item: os.DirEntry, clock: _Clock, pending: list[str]
    ) -> None:
        relative = f"{relative_dir}/{item.name}" if relative_dir else item.name
        kept = self.manifest.get(relative)
        if kept is None:  # a name the checkpoint lacks goes without a look at what it is (a step
            # can make directories faster than a restore that looks at each removes them)
            remove(work_dir, item.name, clock, is_dir=item.is_dir(follow_symlinks=False))
            return
        entry = Entry.of(item.stat(follow_symlinks=False))
        if kept.kind == entry.kind == "dir":
            pending.append(relative)
        elif kept.kind != entry.kind or (kept.kind == "file" and kept.inode != entry.inode):
            remove(work_dir, item.name, clock)
        elif not _same(kept, entry):  # changed in place: emptied now, rewritten by the second pass
            fd = _open_in_place(work_dir, item.name, entry.inode)
            if fd is not None:
                os.ftruncate(fd, 0)
                os.close(fd)

    def _enter(self, relative_dir: str, opened_up: list[tuple[int, int]]) -> int:
        """A descriptor of the working directory's ``relative_dir``, opened up for its owner
        (its ancestors were entered before it, so they are open to the owner already)."""
        if not relative_dir:
            return os.dup(self._work_fd)
        parent, name = _split(relative_dir)
        parent_fd = open_dir(self._work_fd, parent)
        try:
            return open_own_dir(parent_fd, name, opened_up)
        finally:
            os.close(parent_fd)

    @property
    def device(self) -> int:
        """The device of the working directory's file system."""
        return os.fstat(self._work_fd).st_dev

    def bytes_to_restore(
        self, deadline: float | None = None, held_open: frozenset[int] = frozenset()
    ) -> int:
        """The memory a restore in progress still needs: for each committed file, its data less
        what the working directory's file of that name holds now (nothing when missing or not
        a regular file), when more; in 512-byte blocks as the kernel counts them, so a sparse
        file counts its data. Looks at names only (``fstatat``, no link followed), as root (a
        directory the trajectory shut is looked into too): safe during a restore, from its thread.
        Files the restore removes and rewrites in place count as needing all their data.
        Committed files whose inode is in ``held_open`` (kept open or mapped by the trajectory's
        processes: a deleted one freed nothing, and its copy is memory the rollback needs on top
        of the committed state, e.g. ``np.load(mmap_mode="r")``) are left out."""
        by_dir: dict[str, list[str]] = {}
        for relative, entry in self.manifest.items():
            if entry.kind == "file" and entry.inode not in held_open:
                parent, name = _split(relative)
                by_dir.setdefault(parent, []).append(name)
        clock, needed = _Clock(deadline, self.stop), 0
        with acting_as((0, 0)):
            for relative_dir, names in by_dir.items():
                store_dir = open_dir(self._store_fd, relative_dir)
                try:
                    work_dir = open_dir(self._work_fd, relative_dir)
                except OSError:  # gone, or not a directory now
                    work_dir = -1
                try:
                    for name in names:
                        clock.tick()
                        kept = os.stat(name, dir_fd=store_dir, follow_symlinks=False).st_blocks
                        now = 0
                        if work_dir >= 0:
                            with contextlib.suppress(OSError):
                                info = os.stat(name, dir_fd=work_dir, follow_symlinks=False)
                                now = info.st_blocks if stat.S_ISREG(info.st_mode) else 0
                        needed += max(0, kept - now) * 512
                finally:
                    os.close(store_dir)
                    if work_dir >= 0:
                        os.close(work_dir)
        return needed

    def _differs(self, deadline: float | None) -> bool:
        """Whether the directory differs from the manifest (stops at the first difference)."""
        clock = _Clock(deadline, self.stop)
        seen = 0
        pending = [""]
        while pending:
            relative_dir = pending.pop()
            try:
                fd = open_dir(self._work_fd, relative_dir)
            except OSError:
                return True
            try:
                with os.scandir(fd) as iterator:
                    for item in iterator:
                        clock.tick()
                        relative = f"{relative_dir}/{item.name}" if relative_dir else item.name
                        if not relative_dir and item.name in self.protected:
                            continue
                        entry = Entry.of(item.stat(follow_symlinks=False))
                        if not _same(self.manifest.get(relative), entry):
                            return True
                        seen += 1
                        if entry.kind == "dir":
                            pending.append(relative)
            finally:
                os.close(fd)
        return seen != len(self.manifest)

    @staticmethod
    def _remove_in(root_fd: int, relative: str, clock: _Clock) -> None:
        parent, name = _split(relative)
        try:
            fd = open_dir(root_fd, parent)
        except FileNotFoundError:
            return
        try:
            remove(fd, name, clock)
        finally:
            os.close(fd)


def _with_mode_before(entry: Entry, modes_before: dict[int, int]) -> Entry:
    """``entry`` with the permission bits its directory had before a restore opened it up."""
    if entry.kind != "dir" or entry.inode not in modes_before:
        return entry
    return replace(entry, mode=stat.S_IFMT(entry.mode) | modes_before[entry.inode])


def _needs_copy(old: Entry | None, new: Entry | None) -> bool:
    """Whether the store's copy of an entry must be replaced (a directory whose mode alone changed
    keeps its stored children; its new mode is in the manifest)."""
    if old is None or new is None or old.kind != new.kind:
        return True
    return old.kind == "file" and old != new


def _same(old: Entry | None, new: Entry | None) -> bool:
    """A directory is unchanged while it stays a directory with the same mode (its own times move
    whenever a child changes, and children are compared one by one)."""
    if old is None or new is None or old.kind != new.kind:
        return False
    if new.kind == "dir":
        return old.mode == new.mode
    return old == new
