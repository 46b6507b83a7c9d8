"""Atomic files for a trajectory's working directory: checkpoint after a good step, restore after
a failed one.

Host side. A step changes files in place (PIL and cv2 rewrite files, so hard links are unsafe),
hence a private copy of the last good state lives outside the jail. ``checkpoint`` copies only
what changed since the previous checkpoint, so a step that touches nothing costs one
``scandir``; ``restore`` makes the directory equal to the checkpoint again. A file counts as
changed when its size, mtime, ctime or inode differ (ctime cannot be set by user code).

It never follows a symlink (links are recorded and restored as links), never opens anything but
regular files (a FIFO planted by user code cannot block it), and runs only while no process of
the trajectory is running. Files listed as ``protected`` (the read-only input images, owned by
root) are left alone. Not handled: extended attributes and ACLs.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    kind: str  # "file", "dir" or "link"
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    mode: int


class LimitExceeded(Exception):
    """The working directory holds more files or bytes than the sandbox allows."""


def scan(root: str, protected: frozenset[str], *, max_entries: int, max_bytes: int) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    total = 0
    pending = [""]
    while pending:
        relative_dir = pending.pop()
        with os.scandir(os.path.join(root, relative_dir)) as iterator:
            for item in iterator:
                relative = os.path.join(relative_dir, item.name)
                if relative in protected:
                    continue
                info = item.stat(follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    kind = "link"
                elif stat.S_ISDIR(info.st_mode):
                    kind = "dir"
                    pending.append(relative)
                elif stat.S_ISREG(info.st_mode):
                    kind = "file"
                    total += info.st_size
                else:
                    continue  # FIFOs, sockets, devices are not state we keep
                entries[relative] = Entry(
                    kind, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_mode
                )
                if len(entries) > max_entries:
                    raise LimitExceeded(f"more than {max_entries} files in the working directory")
                if total > max_bytes:
                    raise LimitExceeded(f"more than {max_bytes >> 20} MiB in the working directory")
    return entries


class WorkdirSnapshot:
    """The last good state of ``workdir``, kept in ``store`` (a directory the jail cannot see)."""

    def __init__(self, workdir: str, store: str, *, protected: frozenset[str], owner: tuple[int, int] | None,
                 max_entries: int, max_bytes: int):
        self.workdir, self.store, self.protected, self.owner = workdir, store, protected, owner
        self.max_entries, self.max_bytes = max_entries, max_bytes
        os.makedirs(store, mode=0o700, exist_ok=True)
        self.manifest: dict[str, Entry] = {}
        self.checkpoint()

    def checkpoint(self) -> None:
        """Record the directory as the new good state; raises LimitExceeded (state unchanged)."""
        current = scan(self.workdir, self.protected, max_entries=self.max_entries, max_bytes=self.max_bytes)
        for relative in sorted(set(self.manifest) - set(current), reverse=True):
            _remove(os.path.join(self.store, relative))
        for relative, entry in sorted(current.items()):
            if not _same(self.manifest.get(relative), entry):
                _copy_entry(os.path.join(self.workdir, relative), os.path.join(self.store, relative), entry, None)
        self.manifest = current

    def restore(self) -> None:
        """Put the directory back exactly as it was at the last checkpoint."""
        try:
            current = scan(self.workdir, self.protected, max_entries=1 << 62, max_bytes=1 << 62)
        except OSError:
            current = {}
        for relative, entry in sorted(current.items(), reverse=True):
            if not _same(self.manifest.get(relative), entry):
                _remove(os.path.join(self.workdir, relative))
        for relative, entry in sorted(self.manifest.items()):
            target = os.path.join(self.workdir, relative)
            if not _same(current.get(relative), entry) or not os.path.lexists(target):
                _copy_entry(os.path.join(self.store, relative), target, entry, self.owner)
        # restored files have new inodes and times but the store's contents: only the record changes
        self.manifest = scan(self.workdir, self.protected, max_entries=1 << 62, max_bytes=1 << 62)


def _same(old: Entry | None, new: Entry) -> bool:
    """A directory is unchanged while it stays a directory with the same mode (its own times move
    whenever a child changes, and children are compared one by one)."""
    if old is None or old.kind != new.kind:
        return False
    if new.kind == "dir":
        return old.mode == new.mode
    return old == new


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _copy_entry(source: str, target: str, entry: Entry, owner: tuple[int, int] | None) -> None:
    if os.path.lexists(target) and (entry.kind != "dir" or os.path.islink(target)):
        _remove(target)
    if entry.kind == "dir":
        os.makedirs(target, exist_ok=True)
        os.chmod(target, stat.S_IMODE(entry.mode))
    elif entry.kind == "link":
        os.symlink(os.readlink(source), target)
    else:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
        source_fd = os.open(source, flags)
        try:
            target_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                while os.sendfile(target_fd, source_fd, None, 1 << 24) > 0:
                    pass
                os.fchmod(target_fd, stat.S_IMODE(entry.mode))
                if owner is not None:
                    os.fchown(target_fd, *owner)
            finally:
                os.close(target_fd)
        finally:
            os.close(source_fd)
    if owner is not None and entry.kind != "file":
        os.lchown(target, *owner)
