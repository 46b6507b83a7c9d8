"""A mount view of its own for each trajectory, where trajectories share a uid.

Runs inside the jail, in a holder right after it is forked from the zygote, when the controller
is not root (bubblewrap then runs in a user namespace, and every trajectory has the controller's
uid: file permissions cannot keep one trajectory out of another's working directory).

`enter` puts the holder in a user and mount namespace of its own:
- the service's work root is covered by an empty read-only tmpfs on which only the trajectory's
  own working directory is mounted, at the same path: the other trajectories' directories are
  not in its view at all (not listed by ``/proc/self/mountinfo`` either);
- that working directory is a tmpfs of the trajectory's own, of the size its limits allow a
  commit to keep (`layout.workdir_tmpfs`), so a step that fills it, or a holder that keeps
  unnamed files open, fills nothing of the host's: the host's file system, where the controller
  keeps every trajectory's committed copy, is never written from the jail. The controller
  reaches it through ``/proc/<holder>/root`` (`Sandbox`); it goes when the last of the
  trajectory's processes and the controller's descriptor of it are gone;
- every other writable mount of the jail but ``/proc`` (its root, ``/tmp``, ``/dev``) is
  remounted read-only in this view, so no trajectory leaves files where another can read them;
- each input image is bound read-only from the host's directory onto its name in the working
  directory: the trajectory can neither change nor remove it (a mount point), as where a root
  controller owns them, and it takes nothing of the tmpfs's size;
- the user namespace makes every process outside the trajectory (the zygote, bubblewrap, other
  trajectories' holders and steps) unreachable through ``/proc/<pid>/root``, ``cwd``, ``fd``,
  ``map_files`` and ``mem``: the kernel grants those only to a caller in the target's own user
  namespace (or holding ``CAP_SYS_PTRACE`` over it), even at the same uid;
- then every capability the new namespace gave is dropped (the seccomp filter loaded after it
  also refuses ``mount``, ``umount2``, ``unshare`` and ``setns``).

One ``unshare`` and a few mounts per trajectory (~1 ms); a step, a fork of the holder, pays
nothing. `probe` tells the zygote once whether the host allows it (nested user namespaces may be
off: ``user.max_user_namespaces``, or bubblewrap's ``--disable-userns``).

Written with ``ctypes`` because Python has no ``mount`` or ``capset`` wrappers.
"""

from __future__ import annotations

import ctypes
import os
import stat
from dataclasses import dataclass

_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_NOATIME, _MS_NODIRATIME, _MS_BIND = 32, 1024, 2048, 4096
_MS_REC, _MS_PRIVATE, _MS_RELATIME, _MS_STRICTATIME = 1 << 14, 1 << 18, 1 << 21, 1 << 24
# statvfs's f_flag bit -> the mount flag that keeps it (flags a less privileged namespace
# inherits are locked: a remount must repeat them or the kernel refuses it)
_KEPT_FLAGS = ((os.ST_NOSUID, _MS_NOSUID), (os.ST_NODEV, _MS_NODEV), (os.ST_NOEXEC, _MS_NOEXEC),
               (os.ST_NOATIME, _MS_NOATIME), (os.ST_NODIRATIME, _MS_NODIRATIME),
               (os.ST_RELATIME, _MS_RELATIME))  # fmt: skip
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522
_NO_SUID_DEV_EXEC = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
_COVER_OPTIONS = b"size=64k,nr_inodes=64,mode=0711"
_LIBC = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(
    source: bytes | None, target: str, fstype: bytes | None, flags: int, data: bytes | None = None
) -> None:
    _check(_LIBC.mount(source, os.fsencode(target), fstype, flags, data), f"mount on {target}")


def enter(
    work_root: str, workdir: str, inputs: tuple[str, ...] | list[str], tmpfs: WorkdirTmpfs
) -> None:
    """Make ``workdir`` (below ``work_root``) the only directory of the work root this process
    and its children see, a tmpfs of its own of ``tmpfs``'s size laid out as the host's
    directory is (`_own_tmpfs`), with nothing else of the jail writable (its ``inputs``, the
    input images' names, read-only and unremovable: each is a mount point of its own), and
    drop the capabilities that took. Raises OSError naming the step that failed."""
    uid, gid = os.getuid(), os.getgid()
    _check(_LIBC.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare(CLONE_NEWUSER | CLONE_NEWNS)")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")  # the same ids inside: files stay the caller's
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing done here reaches the jail's view
    # a bind mount's source must be in this namespace: open the directory only now
    own = os.open(workdir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _mount(b"codedance", work_root, b"tmpfs", _NO_SUID_DEV_EXEC, _COVER_OPTIONS)
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        _own_tmpfs(own, workdir, inputs, tmpfs)
    finally:
        os.close(own)
    for point in _writable_mount_points():
        if point != workdir and point != "/proc" and not point.startswith("/proc/"):
            _remount_read_only(point)
    _drop_capabilities()


@dataclass(frozen=True)
class WorkdirTmpfs:
    """The size of a trajectory's own working directory (a tmpfs) and the directories the host's
    working directory has that it starts with (``.tmp``)."""

    size_bytes: int
    inodes: int
    directories: tuple[str, ...] = ()


def _own_tmpfs(host_dir: int, workdir: str, inputs, tmpfs: WorkdirTmpfs) -> None:
    """Mount the trajectory's own size-bounded tmpfs on ``workdir`` and lay it out as the host's
    directory (``host_dir``, an ``O_PATH`` descriptor of it) is: each of ``tmpfs.directories``
    made with its mode, each input bound from the host onto an empty file of its name (made
    read-only with the rest in `enter`; on the host's disk, outside the tmpfs's size).

    Every byte a step writes, unlinked files kept open included, then counts against this
    trajectory's ``size_bytes`` alone: a step that fills it gets ``ENOSPC`` in its own
    directory, and the host's file system (where the controller keeps every trajectory's
    committed copy) is never written by the jail."""
    sources = [os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=host_dir)
               for name in inputs]  # fmt: skip
    try:
        options = f"size={tmpfs.size_bytes},nr_inodes={tmpfs.inodes},mode=0700".encode()
        _mount(b"codedance", workdir, b"tmpfs", _NO_SUID_DEV_EXEC, options)
        for name in tmpfs.directories:
            mode = os.stat(name, dir_fd=host_dir, follow_symlinks=False).st_mode
            os.mkdir(os.path.join(workdir, name), stat.S_IMODE(mode))
        for name, source in zip(inputs, sources, strict=True):
            path = os.path.join(workdir, name)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o400))
            _mount(f"/proc/self/fd/{source}".encode(), path, None, _MS_BIND)
    finally:
        for source in sources:
            os.close(source)


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _writable_mount_points() -> list[str]:
    """Mount points of this namespace not mounted read-only, each once (parents first)."""
    points: list[str] = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            point, options = _unescape(fields[4]), fields[5].split(",")
            if "ro" not in options and point not in points:
                points.append(point)
    return points


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (``\\040``)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _remount_read_only(point: str) -> None:
    kept = os.statvfs(point).f_flag
    flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
    for bit, flag in _KEPT_FLAGS:
        if kept & bit:
            flags |= flag
    if not kept & (os.ST_NOATIME | os.ST_RELATIME):
        flags |= _MS_STRICTATIME
    _mount(None, point, None, flags)


def _drop_capabilities() -> None:
    """The new user namespace gave this process every capability inside it: give them all up
    (bounding set, ambient, effective, permitted, inheritable)."""
    with open("/proc/sys/kernel/cap_last_cap") as handle:
        last = int(handle.read())
    for capability in range(last + 1):
        _check(
            _LIBC.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), f"dropping capability {capability}"
        )
    _check(
        _LIBC.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0),
        "clearing ambient capabilities",
    )
    header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_LIBC.capset(ctypes.byref(header), data), "capset")


def probe(work_root: str) -> str | None:
    """None when `enter` works here (tried once, in a throwaway child), else why not."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            enter(work_root, work_root, (), WorkdirTmpfs(size_bytes=64 << 10, inodes=16))
            message = b""
        except BaseException as exc:  # noqa: BLE001 - reported to the zygote, which reports it
            message = f"{type(exc).__name__}: {exc}".encode()[:500]
        os.write(write, message)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        message = handle.read()
    os.waitpid(pid, 0)
    return message.decode("utf-8", "replace") or None
