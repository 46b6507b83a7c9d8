"""Copy a restore's file data so that the memory is charged to the trajectory it restores.

Why: a page written to a file on the tmpfs work root is charged to the memory cgroup of the
*process* that writes it, and cgroup v1 charges whole processes (a controller thread moved into a
trajectory's group is still charged to the controller: measured). A restore written by the
controller was therefore charged to the controller, outside ``memory_total`` and unseen by the OOM
arbiter: a hostile trajectory could commit files, fail steps that delete them, and so move its
committed files out of its own charge, then fill the tmpfs pool until an honest neighbour's
restore failed with ENOSPC and that neighbour was lost.

So a restore writes through a helper process: it creates the files and directories the restore
puts back (one name at a time, relative to a directory descriptor the controller opened, with the
trajectory's file-system identity, never following a link) and hands their descriptors back, and
it copies each file's data between two descriptors (the store's file, opened by the controller
read-only, and the new or rewritten one). It has joined the trajectory's memory cgroup for the
restore (writing its own pid to the group's ``cgroup.procs``, about 0.1 ms) and goes back to the
controller's group after. Pages, inodes and dentries it made stay charged to the trajectory (v1
moves no charge with a process: entries the controller re-created would be charged to the
controller, outside ``memory_total``). The helper is ours (root,
outside the jail, started with ``python -I -S`` on this file, which imports only the standard
library); it resolves no path and is sent descriptors only by the controller. Every reply is
awaited until the restore's deadline: a helper that has not answered by then (asleep in the
kernel's OOM wait, say) is killed and the restore fails (`TimeoutError`).
Idle helpers are kept for the next restore (up to ``KEEP_IDLE``); one that failed is never reused.

Where it applies: wherever the service has cgroups. On v1 the helper joins the trajectory's
memory group (the freezer is a hierarchy of its own); on v2, where joining a group means joining
its freezer too, the trajectory's group has two leaves, its processes in one (frozen) and the
helper joins the other (`TrajectoryCgroup.charge_dir`): the group above carries the limits and
the charge. Without cgroups the controller copies in its own thread (`LocalWriter`), charged to
the controller.
Written by hand because no library writes files on behalf of a cgroup.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

if __name__ != "__main__":  # the helper itself imports only the standard library
    from codedance.sandbox import forks

KEEP_IDLE = 4  # helpers kept between restores (each about 10 MB; restores run one per helper)
_FULL = (
    errno.ENOMEM,
    errno.ENOBUFS,
    errno.ENOSPC,
)  # the service's memory, or the work root's tmpfs, is full
FULL_RETRY_S = (
    0.01  # between two tries of a copy the full service refused (the arbiter looks every 20 ms)
)
_JOIN, _LEAVE, _COPY, _FILE, _DIRECTORY = b"J", b"L", b"C", b"F", b"D"
_IDENTITY = struct.Struct("<ii")  # the uid and gid a new entry is made with (-1: the helper's own)
# a name is one component of at most 255 bytes (NAME_MAX); room for longer ones, so that the
# kernel refuses them (ENAMETOOLONG) rather than the packet arriving cut
_MAX_REQUEST = 1 + _IDENTITY.size + 4 * 255
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LIBC = ctypes.CDLL(None, use_errno=True)
_STARTED = b"R"


def copy_data(source_fd: int, target_fd: int) -> None:
    """Copy a regular file's data; holes stay holes (a sparse file costs the copy only its data,
    where the file system can say where the data is)."""
    size = os.fstat(source_fd).st_size
    offset = 0
    while offset < size:
        try:
            start = os.lseek(source_fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                break
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            start = offset  # no SEEK_DATA here: copy densely
            end = size
        else:
            end = min(size, os.lseek(source_fd, start, os.SEEK_HOLE))
        _copy_range(source_fd, target_fd, start, end - start)
        offset = end
    os.ftruncate(target_fd, size)


def _copy_range(source_fd: int, target_fd: int, offset: int, count: int) -> None:
    """Copy ``count`` bytes at ``offset`` to the same offset (in the kernel: copy_file_range, or
    sendfile across file systems)."""
    end = offset + count
    while offset < end:
        try:
            copied = os.copy_file_range(
                source_fd, target_fd, min(end - offset, 1 << 30), offset, offset
            )
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            os.lseek(target_fd, offset, os.SEEK_SET)
            while offset < end:
                sent = os.sendfile(target_fd, source_fd, offset, min(end - offset, 1 << 24))
                if sent == 0:
                    return  # the file shrank: what is left is a hole (the size is set after)
                offset += sent
            return
        if copied == 0:
            return
        offset += copied


class _ControllerGone(Exception):
    """The controller's end of the channel is closed (it died, perhaps mid-request)."""


def _on_channel(call: Callable, *args):
    """``call(*args)`` on the channel; a reset or broken pipe (the controller died with a request
    or answer unread) is `_ControllerGone`, as end of file is."""
    try:
        return call(*args)
    except (ConnectionResetError, BrokenPipeError) as exc:
        raise _ControllerGone from exc


def serve(channel_fd: int, home_fd: int) -> None:
    """The helper's loop: join a group, make an entry, copy, leave, each answered with ``0`` (and
    the new entry's descriptor) or an errno; ends when the controller closes its end (or dies:
    ``ECONNRESET`` and ``EPIPE`` on the channel end it quietly, as end of file does).
    Leaving is writing to ``home_fd``, the ``cgroup.procs`` of the group it was started in. A
    request that fails (ENOMEM in a full group) leaves the group *before* it answers, since in a
    full group even the answer may not fit (ENOBUFS): so ``0`` means "done, still in the group"
    and an errno "back home"."""
    with contextlib.suppress(_ControllerGone):
        _serve(socket.socket(fileno=channel_fd), home_fd)


def _serve(channel: socket.socket, home_fd: int) -> None:
    me = str(os.getpid()).encode()
    _on_channel(channel.send, _STARTED)
    while True:
        message, fds, _, _ = _on_channel(socket.recv_fds, channel, _MAX_REQUEST, 2)
        if not message:
            return
        made: list[int] = []
        try:
            op = message[:1]
            if op == _JOIN and len(fds) == 1:
                os.write(fds[0], me)
            elif op == _LEAVE and not fds:
                os.write(home_fd, me)
            elif op == _COPY and len(fds) == 2:
                copy_data(fds[0], fds[1])
            elif op in (_FILE, _DIRECTORY) and len(fds) == 1 and len(message) > 1 + _IDENTITY.size:
                uid, gid = _IDENTITY.unpack_from(message, 1)
                made.append(
                    _make(
                        fds[0], message[1 + _IDENTITY.size :], uid, gid, directory=op == _DIRECTORY
                    )
                )
            else:
                raise OSError(errno.EPROTO, "unexpected request")
            _on_channel(socket.send_fds, channel, [b"0"], made)
        except OSError as exc:
            os.write(home_fd, me)  # if even this fails, the helper ends and the controller sees it
            _on_channel(channel.send, str(exc.errno or errno.EIO).encode())
        finally:
            for fd in fds + made:
                os.close(fd)


def _make(dir_fd: int, name: bytes, uid: int, gid: int, *, directory: bool) -> int:
    """Create ``name`` (one component) in ``dir_fd`` as ``uid``/``gid`` (the file-system
    identity, as the controller's own writes use); its descriptor. An entry left by an earlier
    try of the same request (made, but its answer did not fit the full group, so it was tried
    again; the trajectory is frozen, nothing else can have made it) is taken as made if it is a
    regular file or directory, never followed if it is a link."""
    if not name or b"/" in name or b"\0" in name or name in (b".", b".."):
        raise OSError(errno.EINVAL, "not a single name")
    if uid >= 0:
        _LIBC.setfsgid(gid)
        _LIBC.setfsuid(uid)
        if _LIBC.setfsuid(-1) != uid or _LIBC.setfsgid(-1) != gid:  # -1 only reads it
            raise OSError(errno.EPERM, "could not act as the trajectory's user")
    try:
        if directory:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=dir_fd)
            return os.open(name, _OPEN_DIR, dir_fd=dir_fd)
        try:
            return os.open(name, _NEW_FILE, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            fd = os.open(name, _NEW_FILE & ~(os.O_CREAT | os.O_EXCL), dir_fd=dir_fd)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise
            return fd
    finally:
        if uid >= 0:
            _LIBC.setfsuid(0)
            _LIBC.setfsgid(0)


class LocalWriter:
    """A restore's writes made by the calling thread, charged to its own process (where no helper
    can join the trajectory's memory group: cgroup v2, or no cgroups; the store's writes)."""

    def copy(self, source_fd: int, target_fd: int) -> None:
        copy_data(source_fd, target_fd)

    def create_file(self, dir_fd: int, name: str) -> int:
        return os.open(name, _NEW_FILE, 0o600, dir_fd=dir_fd)

    def make_dir(self, dir_fd: int, name: str) -> int:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
        return os.open(name, _OPEN_DIR, dir_fd=dir_fd)


class _Helper:
    """One helper process and the controller's end of its channel."""

    def __init__(self, home_procs_fd: int, deadline: float):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        forks.hold(ours.fileno())  # a forked child of the controller would keep the helper alive
        try:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    __file__,
                    str(theirs.fileno()),
                    str(home_procs_fd),
                    str(_holders_rank()),
                ],
                pass_fds=(theirs.fileno(), home_procs_fd),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                user=0,
                group=0,
            )  # root's file-system identity: the calling thread may be acting as a trajectory
        except BaseException:
            forks.release(ours.fileno())
            ours.close()
            raise
        finally:
            theirs.close()
        self.channel = ours
        try:
            if self._reply(deadline)[0] != _STARTED:
                raise OSError(errno.EPROTO, "the copying helper did not start")
        except BaseException:
            self.kill()
            raise

    def ask(
        self, request: bytes, fds: list[int], deadline: float, interrupt_fd: int | None = None
    ) -> int | None:
        """Send one request and wait for its answer until ``deadline``; the descriptor it made,
        if it made one. Raises OSError (or its `TimeoutError`) if the helper failed, is gone or is
        late, `InterruptedError` once ``interrupt_fd`` is readable (the sandbox is being closed)."""
        socket.send_fds(self.channel, [request], fds)
        reply, made = self._reply(deadline, interrupt_fd)
        if reply != b"0" or len(made) > 1:
            for fd in made:
                os.close(fd)
            code = int(reply) if reply.isdigit() else errno.EPROTO
            raise OSError(code, f"the copying helper failed: {os.strerror(code)}")
        return made[0] if made else None

    def _reply(self, deadline: float, interrupt_fd: int | None = None) -> tuple[bytes, list[int]]:
        ready = _wait([self.channel.fileno()], deadline - time.monotonic(), interrupt_fd)
        if not ready:
            raise TimeoutError(errno.ETIMEDOUT, "the copying helper did not answer in time")
        reply, made, _, _ = socket.recv_fds(self.channel, 16, 2)
        if not reply:
            raise OSError(errno.EPIPE, "the copying helper is gone")
        return reply, made

    def kill(self) -> None:
        if self.channel.fileno() >= 0:
            forks.release(self.channel.fileno())
        self.channel.close()
        self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL ends even the OOM wait
            self.process.wait(timeout=5)


class ChargedCopies:
    """The controller's helpers: ``charged_to(memory_dir, deadline)`` gives the copy
    function for one restore. ``home_memory_dir``: the memory group helpers start in and return
    to (the controller's own)."""

    def __init__(
        self,
        home_memory_dir: str,
        waiting_for_memory: Callable[
            [], contextlib.AbstractContextManager
        ] = contextlib.nullcontext,
    ):
        self._home_procs = _open_procs(home_memory_dir)
        self._waiting_for_memory = waiting_for_memory
        self._idle: list[_Helper] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextlib.contextmanager
    def charged_to(
        self,
        memory_dir: str,
        deadline: float,
        interrupt_fd: int | None = None,
        owner: tuple[int, int] | None = None,
        give_up: Callable[[], bool] = lambda: False,
        on_full: Callable[[], None] = lambda: None,
    ) -> Iterator[_ChargedWriter]:
        """A writer (as `LocalWriter`) whose pages, inodes and dentries are charged to the memory
        group ``memory_dir``, and whose new entries belong to ``owner``'s file-system identity;
        the helper is taken (and joins the group) at the first write, so a restore that writes
        nothing costs nothing. Raises OSError (`TimeoutError` past ``deadline``;
        `InterruptedError` once ``interrupt_fd`` is readable; ECANCELED once ``give_up()`` is
        true: no write is made, nor tried again, after that) from a write or on leaving.
        ``on_full()`` runs once, in the writing thread, when the full service first refuses a
        write, before the wait for memory begins."""
        writer = _ChargedWriter(self, memory_dir, deadline, interrupt_fd, owner, give_up, on_full)
        try:
            yield writer
        except BaseException:
            writer.abandon()
            raise
        finally:
            writer.close_descriptors()
        writer.finish()

    def _take(self, deadline: float) -> _Helper:
        with self._lock:
            if self._closed:
                raise OSError(errno.ESHUTDOWN, "the sandbox service is closed")
            while self._idle:
                helper = self._idle.pop()
                if helper.process.poll() is None:
                    return helper
                helper.kill()  # ended while idle (killed from outside): reap it, start another
        return _Helper(self._home_procs, deadline)

    def _give_back(self, helper: _Helper) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < KEEP_IDLE:
                self._idle.append(helper)
                return
        helper.kill()

    @property
    def helper_pids(self) -> list[int]:
        """The idle helpers' process ids (for tests and diagnostics)."""
        with self._lock:
            return [helper.process.pid for helper in self._idle]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for helper in idle:
            helper.kill()
        os.close(self._home_procs)


class _ChargedWriter:
    """One restore's writes through a helper in the trajectory's memory group (`charged_to`)."""

    def __init__(
        self,
        copies: ChargedCopies,
        memory_dir: str,
        deadline: float,
        interrupt_fd: int | None,
        owner: tuple[int, int] | None,
        give_up: Callable[[], bool],
        on_full: Callable[[], None],
    ):
        self._copies, self._deadline, self._interrupt_fd = copies, deadline, interrupt_fd
        self._give_up, self._on_full = give_up, on_full
        self._identity = _IDENTITY.pack(*(owner if owner is not None else (-1, -1)))
        self._join = _open_procs(
            memory_dir
        )  # now: the restore then runs with the trajectory's rights
        self._helper: _Helper | None = None
        self._joined = self._waited = False
        self._waiting = contextlib.ExitStack()  # held from the first write the full service refuses

    def copy(self, source_fd: int, target_fd: int) -> None:
        self._ask(_COPY, [source_fd, target_fd])

    def create_file(self, dir_fd: int, name: str) -> int:
        return self._ask(_FILE + self._identity + os.fsencode(name), [dir_fd])

    def make_dir(self, dir_fd: int, name: str) -> int:
        return self._ask(_DIRECTORY + self._identity + os.fsencode(name), [dir_fd])

    def _ask(self, request: bytes, fds: list[int]):
        """``request`` done in the trajectory's group; a write the full service refuses (it
        leaves the group before it answers) is tried again every ``FULL_RETRY_S`` until the
        deadline, while the service counts as out of memory so its OOM arbiter frees some."""
        if self._give_up():  # the trajectory is being lost: what it would write back stays free
            raise OSError(errno.ECANCELED, "the restore was given up")
        if self._helper is None:
            self._helper = self._copies._take(self._deadline)
        while True:
            try:
                if not self._joined:
                    self._helper.ask(_JOIN, [self._join], self._deadline, self._interrupt_fd)
                    self._joined = True
                return self._helper.ask(request, fds, self._deadline, self._interrupt_fd)
            except OSError as exc:
                self._joined = False  # a helper that answers with an error has gone home
                if exc.errno not in _FULL:
                    raise
                if time.monotonic() + FULL_RETRY_S > self._deadline:
                    raise TimeoutError(
                        errno.ETIMEDOUT, "no memory for the restore before its deadline"
                    ) from exc
                if self._give_up():
                    raise OSError(
                        errno.ECANCELED, "the restore was given up while it waited for memory"
                    ) from exc
                if not self._waited:
                    self._on_full()
                    self._waiting.enter_context(self._copies._waiting_for_memory())
                    self._waited = True
                _wait([], FULL_RETRY_S, self._interrupt_fd)

    def close_descriptors(self) -> None:
        os.close(self._join)
        self._waiting.close()

    def abandon(self) -> None:
        """The restore failed: its helper is never reused."""
        if self._helper is not None:
            self._helper.kill()

    def finish(self) -> None:
        """Send the helper home and keep it for the next restore."""
        if self._helper is None:
            return
        try:
            if self._joined:
                self._helper.ask(_LEAVE, [], self._deadline)
        except BaseException:
            self._helper.kill()
            raise
        self._copies._give_back(self._helper)


def _holders_rank() -> int:
    """The ``oom_score_adj`` holders are given where allowed (`_rank_self`)."""
    # imported here, not at the top: the helper itself imports only the standard library
    from codedance.sandbox import procs

    return procs.HOLDER_OOM_SCORE_ADJ


def _wait(fds: list[int], timeout_s: float, interrupt_fd: int | None) -> list[int]:
    """The descriptors among ``fds`` readable within ``timeout_s``; `InterruptedError` as soon as
    ``interrupt_fd`` is readable."""
    poller = (
        select.poll()
    )  # not select(): a controller with thousands of sandboxes has fds above 1024
    for fd in fds if interrupt_fd is None else [*fds, interrupt_fd]:
        poller.register(fd, select.POLLIN)
    ready = [fd for fd, _ in poller.poll(max(0, int(timeout_s * 1000) + 1))]
    if interrupt_fd is not None and interrupt_fd in ready:
        raise InterruptedError(errno.EINTR, "the restore was interrupted: the sandbox is closing")
    return ready


def _open_procs(memory_dir: str) -> int:
    return os.open(os.path.join(memory_dir, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)


def _rank_self(oom_score_adj: int) -> None:
    """Take the holders' ``oom_score_adj`` (-1000 where allowed: with CAP_SYS_RESOURCE; else it
    stays at 0, as holders do): in a trajectory's group during a restore, a helper at 0 beside
    holders at -1000 would be the kernel's only OOM choice there, a root process outside the jail
    killed for the trajectory. Done by the helper itself, before its first
    answer: the controller's thread that starts it may be acting as a trajectory (its file-system
    uid), which /proc refuses (the helper would stay at 0).
    Pinned by
    `tests/sandbox/test_charged_restores.py::test_the_helper_ranks_with_the_holders_for_the_oom_killer`."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as handle:
        handle.write(str(oom_score_adj))


if __name__ == "__main__":
    _rank_self(int(sys.argv[3]))
    serve(int(sys.argv[1]), int(sys.argv[2]))
