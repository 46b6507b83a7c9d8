"""The sandbox service: one jailed zygote that forks a holder for every trajectory.

Host side. `SandboxService` starts the zygote (``runtime.zygote_main``) under bubblewrap when it
can, otherwise as a plain child process, and hands it spawn requests over a SOCK_SEQPACKET
control socket. Each spawn request carries the trajectory's own socket (``SCM_RIGHTS``), so the
zygote never relays trajectory traffic. One service serves thousands of trajectories; a
`Sandbox` without an explicit service uses a shared default one, started on first use.

The jail's file system: ``/usr`` (and the usual symlinks), ``/etc``, the Python installation,
site-packages and the codedance package read-only; fresh ``/proc`` and ``/tmp``; a ``/dev``
with only null, zero, full, random and urandom (no ``ptmx``: ptys come from a host-wide pool); and
the service's work root (the trajectories' working directories) read-write. Nothing else of the
host — no home directories, no ``/work``, no ``/run`` sockets — is visible. bwrap runs as root
with every capability dropped but ``CAP_SETUID``/``CAP_SETGID`` (which the zygote needs to hand
each holder its own uid) and ``CAP_SYS_ADMIN``, which the zygote uses once, to remount ``/proc``
so that no trajectory sees another's processes, and then drops; and ``--die-with-parent``: if the
controller dies, the jail goes too.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import replace

import codedance
from codedance.errors import CodeDanceError
from codedance.sandbox import cgroups, leftovers, mounts
from codedance.sandbox.files import StoreBudget, remove_tree
from codedance.sandbox.idle import IdleFreezer
from codedance.sandbox.isolation import (
    Isolation,
    bubblewrap_problem,
    file_table,
    file_table_needed,
    may_raise_file_max,
    seccomp_problem,
)
from codedance.sandbox.layout import SINGLE_THREADED, Limits
from codedance.sandbox.memory.arbiter import OomArbiter
from codedance.sandbox.memory.cgroup_memory import arbitrate_oom
from codedance.sandbox.memory.charged_copy import ChargedCopies, LocalWriter
from codedance.sandbox.remover import Remover
from codedance.sandbox.thaw_on_exit import ThawOnExit

# a sandbox service's url: where `Sandbox`/`SandboxPool` create sandboxes
URL_ENV = "CODEDANCE_SANDBOX_URL"
CREATION_WAIT_S = (
    60.0  # the longest closing waits for sandboxes being created (their start takes ~30 s at most)
)
INODE_BYTES = 128  # the work root's tmpfs has one inode slot per this many bytes of its size
_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "MPLBACKEND": "Agg",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    **SINGLE_THREADED,
}


class ServiceError(CodeDanceError, RuntimeError):
    """The zygote could not be started or stopped answering."""


_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def _python_paths() -> list[str]:
    """Host directories the jailed interpreter needs, outermost first, without duplicates.

    The prefixes, the codedance package and the import path — but not ``sys.path[0]`` (the
    caller's script directory or the current directory), nor ``/`` or ``/tmp`` themselves.
    """
    package_dir = os.path.dirname(os.path.abspath(codedance.__file__))
    candidates = [sys.base_prefix, sys.prefix, sys.exec_prefix, package_dir,
                  os.path.dirname(os.path.realpath(sys.executable))]  # fmt: skip
    candidates += [p for p in sys.path[1:] if p and os.path.isdir(p)]
    chosen: list[str] = []
    for path in sorted(
        {os.path.realpath(p) for p in candidates} | {os.path.abspath(p) for p in candidates}
    ):
        if path in ("/", "/tmp", "/usr", "/etc") or path.startswith(("/usr/", "/etc/")):
            continue
        if any(path == c or path.startswith(c + "/") for c in chosen):
            continue
        chosen.append(path)
    return chosen


def _ancestors(path: str) -> list[str]:
    """Directories above ``path`` that the jail's fresh root does not already have."""
    parts = path.strip("/").split("/")[:-1]
    found = ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]
    return [
        a
        for a in found
        if a not in ("/usr", "/etc", "/tmp") and not a.startswith(("/usr/", "/etc/"))
    ]


def _bwrap_command(
    work_root: str, control_fd: int, as_root: bool, inputs_root: str | None = None
) -> list[str]:
    command = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
               "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox",
               "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]  # fmt: skip
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = os.path.join("/", name)
        if os.path.islink(path):
            command += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            command += ["--ro-bind", path, path]
    # a minimal /dev: no ptmx (ptys come from one host-wide pool), no shm, no tty
    command += ["--proc", "/proc", "--tmpfs", "/dev"]
    for device in _DEVICES:
        command += ["--dev-bind", device, device]
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        command += ["--symlink", target, f"/dev/{name}"]
    command += ["--tmpfs", "/tmp"]
    bound = _python_paths() + ([inputs_root] if inputs_root else []) + [work_root]
    for ancestor in sorted({a for path in bound for a in _ancestors(path)}):
        command += ["--perms", "0755", "--dir", ancestor]  # bwrap would make them 0700
    for path in bound[:-1]:
        command += ["--ro-bind", path, path]
    command += ["--bind", work_root, work_root, "--clearenv"]
    jail_env = {**_ENV, "HOME": "/tmp", "MPLCONFIGDIR": "/tmp/matplotlib"}
    # the controller's PYTHONPATH (its directories are bound above): the jail runs the same
    # codedance as the controller, also where an interpreter without an install finds it there
    python_path = os.pathsep.join(
        p
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if os.path.isabs(p) and os.path.isdir(p)
    )
    if python_path:
        jail_env["PYTHONPATH"] = python_path
    for key, value in jail_env.items():
        command += ["--setenv", key, value]
    if as_root:
        command += [
            "--cap-drop",
            "ALL",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
            "--cap-add",
            "CAP_SYS_ADMIN",
        ]  # the zygote's /proc remount only (guards.hide_other_processes)
    command += [
        "--",
        sys.executable,
        "-m",
        "codedance.sandbox.jail.runtime",
        "--control-fd",
        str(control_fd),
    ]
    # as root each trajectory has its own uid; otherwise its own mount view (`private_view`)
    return command + (["--hide-processes"] if as_root else ["--private-views", work_root])


class SandboxService:
    """A running zygote plus the host resources shared by its trajectories.

    ``use_namespaces``/``use_cgroups``/``use_seccomp``: None means "when the host allows it".
    ``memory_total``: the memory limit of all its trajectories together (cgroups only; default
    85 % of the host's memory or of the controller's own cgroup limit, whichever is smaller, so no
    set of trajectories can exhaust the host or container: `default_memory_total`), and the size of
    the tmpfs their working directories live on (as root; see ``mounts``).
    ``raise_file_max``: True lets a root service raise a host-wide ``fs.file-max`` lower than its
    trajectories could fill to ``LONG_MAX`` (`isolation.file_table`; kept after it closes); None
    reads ``CODEDANCE_RAISE_FILE_MAX=1``. Otherwise a low value is only reported in
    ``isolation.missing``, with the line to run.
    Starting a service first sweeps what dead services left behind (`leftovers.sweep`).
    """

    def __init__(
        self,
        *,
        use_namespaces: bool | None = None,
        use_cgroups: bool | None = None,
        use_seccomp: bool | None = None,
        start_timeout_s: float = 120.0,
        memory_total: int | None = None,
        raise_file_max: bool | None = None,
    ):
        self.as_root = os.geteuid() == 0
        self.private_views = (
            False  # each holder in a mount view of its own (`private_view`): set by `_start`
        )
        self._owner_pid = os.getpid()  # a forked child of the controller never closes the service
        self._lock = threading.Lock()  # the sandboxes, the uids, closing
        self._spawn_lock = threading.Lock()  # one spawn request on the control socket at a time
        self._closed = False
        self._next_slot = 0
        self._sandboxes: weakref.WeakSet = weakref.WeakSet()
        self._creating = 0  # sandboxes registered whose creation has not ended (`register`)
        # sandboxes registered and not yet released: the weak set forgets one the garbage
        # collector found before its closing thread has closed it
        # pinned by `tests/sandbox/test_api.py::`
        # `test_closing_a_service_waits_for_the_sandboxes_its_caller_dropped`
        self._unreleased = 0
        self._counts_changed = threading.Condition(self._lock)
        self._running: set = set()  # sandboxes with a run in progress (`running_changed`)
        self.remover = (
            Remover()
        )  # closed sandboxes' directories, removed off their close() (`remover`)
        _raise_descriptor_limit()
        leftovers.sweep()
        name, self._name_lock = leftovers.claim_service_name()
        self.name = name
        self._uid_block, self._uid_lock = leftovers.claim_uid_block() if self.as_root else (0, None)
        missing: list[tuple[str, str]] = []
        bwrap_why = (
            bubblewrap_problem() if use_namespaces is not False else "disabled by the caller"
        )
        self.namespaces = bwrap_why is None
        if bwrap_why:
            missing.append(("namespaces", bwrap_why))
        seccomp_why = seccomp_problem() if use_seccomp is not False else "disabled by the caller"
        self.seccomp = seccomp_why is None
        if seccomp_why:
            missing.append(("seccomp", seccomp_why))
        if not self.as_root:
            missing.append(("users", "the controller is not root"))
        self.cgroup_layout = None
        self.memory_total = memory_total if memory_total is not None else default_memory_total()
        if use_cgroups is not False:
            self.cgroup_layout, cgroup_why = cgroups.detect_layout(name, self.memory_total)
        else:
            cgroup_why = "disabled by the caller"
        notes = []
        if self.cgroup_layout is None:
            missing.append(("cgroups", cgroup_why))
        else:  # where `gc` finds our groups once we are dead, from whichever cgroup it runs in
            try:
                leftovers.record_service_groups(
                    self._name_lock, cgroups.parent_directories(self.cgroup_layout)
                )
            except OSError as exc:
                notes.append(
                    f"the service's cgroups are not recorded in its lock file ({exc}): if it dies "
                    "unclosed, only a sweep run from this controller's own cgroup finds them"
                )

        # the host's file table: the most trajectories of a service (one uid each, from its block)
        # x their default pids.max x vm.max_map_count
        needed = file_table_needed(leftovers.UID_BLOCK, Limits().processes)
        note, file_table_why = file_table(needed, may_raise=may_raise_file_max(raise_file_max))
        if file_table_why:
            missing.append(("file table", file_table_why))
        self.isolation = Isolation(
            namespaces=self.namespaces, users=self.as_root, seccomp=self.seccomp,
            cgroups=self.cgroup_layout is not None, rlimits=True, missing=tuple(missing),
            notes=tuple(notes) + ((note,) if note else ()),
        )  # fmt: skip
        self.work_root = tempfile.mkdtemp(prefix=f"{name}-work-")
        total = self.memory_total
        if (
            self.cgroup_layout is not None
        ):  # every page on the pool is charged to a trajectory, so the
            total += total // 4  # memory cgroups stop writes first and the arbiter decides
        # the pool's inode slots are shared, and each name takes one (a hard link too, for a
        # ~200 B dentry charged to the trajectory's memory cgroup): one slot per 128 bytes means
        # no trajectory can take them all before its memory runs out and the arbiter decides
        # (with a fixed count, hard links alone took every slot with the service far from its
        # memory limit, and an honest neighbour's restore failed with ENOSPC)
        inodes = total // INODE_BYTES
        self.work_on_tmpfs = (
            mounts.mount_tmpfs(self.work_root, size_bytes=total, inodes=inodes) is None
        )
        self.store_root = tempfile.mkdtemp(prefix=f"{name}-store-")
        self.store_budget = StoreBudget.of_free_space(self.store_root)
        os.chmod(self.work_root, 0o711)
        # input images stay on disk (read-only in the jail): on the tmpfs they would be memory
        self.inputs_root = (
            tempfile.mkdtemp(prefix=f"{name}-inputs-") if self.work_on_tmpfs else None
        )
        if self.inputs_root:
            os.chmod(self.inputs_root, 0o711)
        self._idle_freezer: IdleFreezer | None = None
        self.oom_arbiter: OomArbiter | None = None
        self._charged_copies = (
            ChargedCopies(cgroups.own_group_dir(self.cgroup_layout), self._restore_waiting)
            if self.cgroup_layout is not None
            else None
        )
        freezer = self.cgroup_layout.freezer_parent if self.cgroup_layout is not None else None
        self._thaw_on_exit = (
            ThawOnExit(freezer) if freezer else None
        )  # frozen trajectories die with us
        self._start(start_timeout_s)  # closes the service if the zygote does not start
        self.oom_arbiter = self._start_oom_arbiter()
        atexit.register(self.close)

    def _start_oom_arbiter(self) -> OomArbiter | None:
        """The thread that decides who gives memory back when all trajectories together reach
        ``memory_total`` (cgroup v1; see ``arbiter``); None where the kernel decides."""
        if self.cgroup_layout is None:
            return None
        memory = arbitrate_oom(
            self.cgroup_layout.version, self.cgroup_layout.memory_parent, self.memory_total
        )
        return (
            None
            if memory is None
            else OomArbiter(memory, sandboxes=self._live_sandboxes, freeing=self.remover.busy)
        )

    def _live_sandboxes(self) -> list:
        with self._lock:
            return [sandbox for sandbox in self._sandboxes if sandbox.alive]

    def _restore_waiting(self) -> contextlib.AbstractContextManager:
        """Held while a restore's copy waits for the full service (the arbiter then acts)."""
        arbiter = self.oom_arbiter
        return arbiter.restore_waiting() if arbiter is not None else contextlib.nullcontext()

    def restore_writer(
        self,
        memory_dir: str | None,
        deadline: float,
        interrupt_fd: int | None = None,
        owner: tuple[int, int] | None = None,
        give_up: Callable[[], bool] = lambda: False,
        on_full: Callable[[], None] = lambda: None,
    ) -> contextlib.AbstractContextManager:
        """The writer for one restore of the trajectory whose memory group is ``memory_dir`` (new
        entries made as ``owner``): charged to that group where the host allows (`charged_copy`;
        it stops with `InterruptedError` once ``interrupt_fd`` is readable, writes nothing more
        once ``give_up()``, and calls ``on_full()`` once when the full service first refuses a
        write), else the controller's own writes."""
        if self._charged_copies is None or memory_dir is None:
            return contextlib.nullcontext(LocalWriter())
        return self._charged_copies.charged_to(
            memory_dir, deadline, interrupt_fd, owner, give_up, on_full
        )

    @property
    def idle_freezer(self) -> IdleFreezer:
        """The thread that freezes idle trajectories (started on first use)."""
        with self._lock:
            if self._idle_freezer is None:
                self._idle_freezer = IdleFreezer()
            return self._idle_freezer

    def _start(self, timeout_s: float) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._control = ours
        log_path = os.path.join(self.store_root, "zygote.log")
        self._log = open(log_path, "wb")  # noqa: SIM115 - the zygote's log while it lives; closed in close()
        fd = theirs.fileno()
        if self.namespaces:
            command = _bwrap_command(self.work_root, fd, self.as_root, self.inputs_root)
            env = None
        else:
            command = [
                sys.executable,
                "-m",
                "codedance.sandbox.jail.runtime",
                "--control-fd",
                str(fd),
            ]
            env = {
                **_ENV,
                "HOME": self.work_root,
                "MPLCONFIGDIR": os.path.join(self.store_root, "mpl"),
                "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            }
        self._process = self._start_in_keeper_thread(
            command, pass_fds=(fd,), stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
            env=env, start_new_session=True)  # fmt: skip
        theirs.close()
        self._control.settimeout(timeout_s)
        try:
            reply = json.loads(self._control.recv(1 << 16) or b"{}")
        except (OSError, ValueError) as exc:
            reply = {"error": str(exc)}
        if reply.get("op") != "zygote_ready":
            with open(log_path, "rb") as handle:
                tail = handle.read()[-3000:].decode("utf-8", "replace")
            self.close()
            raise ServiceError(f"the sandbox zygote did not start ({reply}); its log:\n{tail}")
        self._control.settimeout(30.0)
        self.private_views = reply.get("private_views") is True
        if self.namespaces and not self.as_root and not self.private_views:
            why = str(reply.get("private_views") or "the zygote did not try")[:300]
            self.isolation = replace(
                self.isolation, missing=(*self.isolation.missing, ("private views", why))
            )
        self.isolation = replace(self.isolation, private_views=self.private_views)
        # a memfd is memory no address-space rlimit sees: refused where no memory cgroup counts
        # it (`guards`) and a step's captured outputs can be unnamed files in its working
        # directory instead (a private view's own tmpfs, or a work root that takes O_TMPFILE)
        self.refuse_memfd = self.cgroup_layout is None and (
            self.private_views or takes_unnamed_files(self.work_root)
        )
        if reply.get("processes_hidden") is not True:
            why = (
                reply.get("processes_hidden")
                or "the jail's /proc is remounted only by a root controller"
            )
            self.isolation = replace(
                self.isolation, missing=(*self.isolation.missing, ("private /proc", str(why)[:200]))
            )

    def _start_in_keeper_thread(self, command: list[str], **options) -> subprocess.Popen:
        """Start the zygote from a thread that lives as long as the service: bwrap's
        ``--die-with-parent`` (``PR_SET_PDEATHSIG``) fires when the *thread* that started it
        ends, so a service first used from a worker thread (an executor's) would lose its jail
        when that thread finished."""
        started: queue.Queue = queue.Queue()

        def keep() -> None:
            try:
                started.put(subprocess.Popen(command, **options))
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                started.put(exc)
                return
            self._keeper_stop.wait()

        self._keeper_stop = threading.Event()
        threading.Thread(target=keep, name=f"{self.name}-keeper", daemon=True).start()
        process = started.get()
        if isinstance(process, BaseException):
            raise process
        return process

    def allocate_uid(self) -> int | None:
        """A fresh uid for a new trajectory (None when the controller is not root)."""
        with self._lock:
            self._next_slot += 1
            if self._next_slot >= leftovers.UID_BLOCK:
                raise ServiceError(
                    "this service has handed out all its uids; start a new SandboxService"
                )
            return self._uid_block + self._next_slot if self.as_root else None

    def running_changed(self, sandbox, running: bool) -> None:
        """A sandbox's run starts (True) or ends (False)."""
        with self._lock:
            (self._running.add if running else self._running.discard)(sandbox)

    def commit_takes_what_is_owed(
        self, sandbox, grown: int, page_tables: Callable[[], int]
    ) -> bool:
        """Whether ``sandbox``'s step, about to commit what it grew, would take memory a running
        neighbour's rollback needs (see `OomArbiter.commit_takes_what_is_owed`); False without an
        arbiter."""
        arbiter = self.oom_arbiter
        with self._lock:
            running = list(self._running)
        if arbiter is None or len(running) < 2:
            return False
        return arbiter.commit_takes_what_is_owed(sandbox, grown, page_tables, running)

    def register(self, sandbox) -> None:
        """Remember a sandbox being created, so that closing the service closes it too; its
        creation is in progress until `created` (closing waits for it: a sandbox
        made while the service closed would leave the service's groups behind). ServiceError
        once the service is closed.
        Pinned by
        `tests/sandbox/test_api.py::test_closing_a_service_while_a_sandbox_is_being_made_leaves_nothing_behind`."""
        with self._lock:
            if self._closed:
                raise ServiceError("the sandbox service is closed")
            self._sandboxes.add(sandbox)
            self._creating += 1
            self._unreleased += 1

    def created(self) -> None:
        """A registered sandbox's creation has ended (made, or failed and closed)."""
        with self._lock:
            self._creating -= 1
            self._counts_changed.notify_all()

    def released(self) -> None:
        """A registered sandbox has released its processes, groups and files (`Sandbox.close`)."""
        with self._lock:
            self._unreleased -= 1
            self._counts_changed.notify_all()

    def spawn(self, request: dict, holder_socket: socket.socket) -> None:
        """Ask the zygote to fork a holder that serves ``holder_socket``."""
        request = {
            **request,
            "op": "spawn",
            "seccomp": self.seccomp,
            "private_view": self.private_views,
            "work_root": self.work_root,
            "refuse_memfd": self.refuse_memfd,
        }
        # its own lock, not the service's: the zygote's fork may wait for memory, and the OOM
        # arbiter, which frees it, lists the sandboxes under the service's lock
        with self._spawn_lock:
            if self._closed:
                raise ServiceError("the sandbox service is closed")
            try:
                socket.send_fds(
                    self._control, [json.dumps(request).encode()], [holder_socket.fileno()]
                )
                reply = json.loads(self._control.recv(1 << 16) or b"{}")
            except (OSError, ValueError) as exc:
                raise ServiceError(f"the sandbox zygote stopped answering: {exc}") from exc
        if reply.get("op") != "spawned":
            raise ServiceError(f"the sandbox zygote refused to spawn: {reply}")

    @property
    def alive(self) -> bool:
        return not self._closed and self._process.poll() is None

    def close(self) -> None:
        """Stop the zygote and every process in its jail; remove the service's directories.
        Does nothing in a forked child of the controller (its ``atexit`` runs this too): the
        service, its zygote and its directories are the parent's."""
        if os.getpid() != self._owner_pid:
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._counts_changed.wait_for(lambda: self._creating == 0, timeout=CREATION_WAIT_S)
            sandboxes = list(self._sandboxes)
        for (
            sandbox
        ) in sandboxes:  # every run in flight is woken first, so closing waits for none twice
            sandbox.begin_closing()
        for sandbox in sandboxes:
            sandbox.close()
        with self._lock:  # dropped ones the closing thread is closing (`Sandbox.__del__`)
            self._counts_changed.wait_for(lambda: self._unreleased <= 0, timeout=CREATION_WAIT_S)
        self.remover.stop()  # what it has not removed goes with the work root below
        if self._idle_freezer is not None:
            self._idle_freezer.stop()
        if self.oom_arbiter is not None:
            self.oom_arbiter.stop()
        if self._charged_copies is not None:
            self._charged_copies.close()
        if self._thaw_on_exit is not None:
            self._thaw_on_exit.stop()
        try:
            self._control.close()
        except OSError:
            pass
        if self._process.poll() is None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._keeper_stop.set()
        self._log.close()
        if self.cgroup_layout is not None:
            cgroups.remove_parent(self.cgroup_layout)
        mounts.unmount(self.work_root)
        for path in (self.work_root, self.store_root, self.inputs_root):
            if path:
                remove_tree(path)
        leftovers.release_service_name(self.name, self._name_lock)
        if self._uid_lock is not None:
            leftovers.release_uid_block(self._uid_lock)
        atexit.unregister(self.close)


def takes_unnamed_files(directory: str) -> bool:
    """Whether ``directory``'s file system makes ``O_TMPFILE`` files (overlayfs only from Linux
    6.6 on)."""
    try:
        os.close(os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600))
    except OSError:
        return False
    return True


def _raise_descriptor_limit() -> None:
    """Each live trajectory holds about seven descriptors in the controller (socket, eventfd,
    pidfd, its directories, its freezer): lift the soft limit to the hard one (often 1,024 vs
    hundreds of thousands), so thousands of trajectories fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def default_memory_total() -> int:
    """85 % of what this controller may use: the host's memory, or less where the controller's
    own memory cgroup (or one above it: a container's) is limited. Past an outer limit the
    kernel's OOM killer would choose among the container's processes before the service's
    arbiter could."""
    available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    outer = cgroups.own_memory_limit()
    return int(0.85 * min(available, outer if outer is not None else available))


_default: SandboxService | None = None
_default_lock = threading.Lock()


def default_service() -> SandboxService:
    """The process-wide service used by sandboxes created without one (started on first use)."""
    global _default
    with _default_lock:
        if _default is None or not _default.alive:
            _default = SandboxService()
        return _default


def wait_gone(pid: int, timeout_s: float = 5.0) -> bool:
    """True once ``pid`` no longer exists (or is a zombie), within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.001)
    return False
