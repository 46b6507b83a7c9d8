"""One cgroup per trajectory: a process limit, a memory limit without swap, a CPU bandwidth limit,
a freezer and a kill switch.

Host side, used by the controller (which runs as root for this layer). Supports cgroup v2 (one
unified hierarchy with ``pids``, ``memory`` and, where offered, ``cpu`` enabled for our subtree;
``cgroup.freeze``) and cgroup v1 (separate ``pids``, ``memory``, ``freezer`` and ``cpu``
hierarchies; the last two optional), creating our groups under
the controller's own cgroup in each hierarchy so that an outer limit (a container's) still applies.
The service's parent group also carries a memory limit for all its trajectories together.

``freeze``/``thaw``: the controller freezes every process of a trajectory (holder and spare
included) before it touches the trajectory's files, so nothing in the jail can race it. On v1 a
SIGKILL sent to a frozen process takes effect only once it is thawed; ``kill_all`` thaws first.

``kill_all(except_pid)`` repeats "list, SIGKILL" until only ``except_pid`` is left: a process
forked between the list and the kill is caught by the next round, and ``pids.max`` bounds how
many can appear. Each listed pid is signalled through a pidfd opened *after* the listing and
only once ``/proc/<pid>/cgroup`` shows it still in this group, so a pid reused meanwhile (by
another trajectory's process, or the host's) is never signalled. No freezing is needed for
that: a process sleeping in the kernel's OOM wait never freezes, but dies of SIGKILL
(``kill_members`` is one such round, safe from another thread). Not handled: hosts where the
controller may not write cgroups (the sandbox then runs without this layer and says so).

``memory_measure`` is what the OOM arbiter compares (read as ``memory.cgroup_memory`` says): the
group's charge less its file cache (which the kernel can reclaim) and less kernel memory, and
that kernel memory apart.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from codedance.sandbox.memory.cgroup_memory import (
    UNRECLAIMABLE_FILES,
    MemoryMeasure,
    read_bytes,
    stat_value,
    unreclaimable,
    v2_kernel,
)
from codedance.sandbox.thaw_on_exit import thaw

_ROOT = "/sys/fs/cgroup"
# cgroup v2: the controller's own leaf, where it must make room (`_v2_make_room`)
CONTROLLER_LEAF = "codedance-controller"


@dataclass(frozen=True)
class CgroupLayout:
    """Where our groups live: one directory per controller (a single one on cgroup v2)."""

    version: int
    pids_parent: str
    memory_parent: str
    freezer_parent: str | None  # None: no freezer on this host (v1 without the freezer hierarchy)
    cpu_parent: str | None = None  # None: no CPU bandwidth control here


def _own_path(controller: str) -> str | None:
    with open("/proc/self/cgroup") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                return path
    return None


def own_memory_limit() -> int | None:
    """The smallest memory limit of this process's memory cgroup and every group above it (as
    far as this cgroup namespace shows them); None where none is set or readable."""
    v2 = os.path.exists(os.path.join(_ROOT, "cgroup.controllers"))
    own = _own_path("" if v2 else "memory")
    if own is None:
        return None
    base = _ROOT if v2 else os.path.join(_ROOT, "memory")
    name = "memory.max" if v2 else "memory.limit_in_bytes"
    limits = []
    path = own.strip("/")
    while True:
        try:
            with open(os.path.join(base, path, name)) as handle:
                text = handle.read().strip()
            if text.isdigit():
                limits.append(int(text))
        except OSError:
            pass
        if not path:
            break
        path = os.path.dirname(path)
    finite = [limit for limit in limits if limit < 1 << 62]  # v1 "unlimited" is ~2**63
    return min(finite) if finite else None


def _v2_base() -> str:
    """The v2 group under which services create theirs: the controller's own group, or that
    group's once the controller moved itself into its leaf (`_v2_make_room`)."""
    own = (_own_path("") or "/").rstrip("/") or "/"
    if os.path.basename(own) == CONTROLLER_LEAF:
        own = os.path.dirname(own)
    return os.path.join(_ROOT, own.lstrip("/"))


def _v2_make_room(base: str) -> None:
    """Enable the pids and memory controllers for ``base``'s child groups. cgroup v2 allows
    that only in a group that holds no process itself (the root aside): where ``base`` holds
    this process alone (a `systemd-run --scope -p Delegate=yes` command, a container's only
    process), it first moves into a leaf of its own, ``base/CONTROLLER_LEAF``, as systemd asks
    of a delegated group's processes. Raises OSError with what to do otherwise."""
    control = os.path.join(base, "cgroup.subtree_control")
    try:
        _write(control, "+pids +memory")
        return
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise OSError(
                exc.errno,
                f"the pids and memory controllers are not enabled for {base} (its parent's "
                "cgroup.subtree_control lacks them); run the controller in a cgroup "
                "delegated to it, e.g. "
                "`systemd-run --scope -p Delegate=yes <command>`",
            ) from None
        if exc.errno != errno.EBUSY:
            raise
    with open(os.path.join(base, "cgroup.procs")) as handle:
        procs = {int(line) for line in handle if line.strip()}
    if procs != {os.getpid()}:
        raise OSError(
            errno.EBUSY,
            f"{base} holds other processes too ({len(procs)} in all), and cgroup v2 gives "
            "controllers to child groups only in a group without processes; run the "
            "controller alone in a "
            "cgroup delegated to it, e.g. `systemd-run --scope -p Delegate=yes <command>`",
        )
    leaf = os.path.join(base, CONTROLLER_LEAF)
    os.makedirs(leaf, exist_ok=True)
    _write(os.path.join(leaf, "cgroup.procs"), str(os.getpid()))  # every thread of this process
    _write(control, "+pids +memory")


def own_group_dir(layout: CgroupLayout) -> str:
    """The controller's own memory group (where a restore's copying helper starts and returns)."""
    if layout.version == 2:
        return os.path.join(_ROOT, (_own_path("") or "/").lstrip("/"))
    return os.path.dirname(layout.memory_parent)


def service_parents() -> list[str]:
    """The directories under which services create their groups (one per hierarchy we use)."""
    if os.path.exists(os.path.join(_ROOT, "cgroup.controllers")):
        return [_v2_base()]
    found = []
    for controller in ("pids", "memory", "freezer", "cpu"):
        own = _own_path(controller)
        if own is not None and os.path.isdir(os.path.join(_ROOT, controller)):
            found.append(os.path.join(_ROOT, controller, own.lstrip("/")))
    return found


def delegated_v2_group() -> str | None:
    """This process's cgroup v2 group where it may create groups and move processes in it (a
    `systemd-run --user --scope -p Delegate=yes` scope, a Slurm job's group), else None."""
    if not os.path.exists(os.path.join(_ROOT, "cgroup.controllers")):
        return None
    base = _v2_base()
    writable = all(os.access(os.path.join(base, name), os.W_OK)
                   for name in ("", "cgroup.procs", "cgroup.subtree_control"))  # fmt: skip
    return base if writable else None


def detect_layout(
    service_name: str, memory_total: int | None = None
) -> tuple[CgroupLayout | None, str]:
    """Create the service's parent groups (with ``memory_total`` as the limit of all its
    trajectories together); returns (layout, "") or (None, why not). A controller that is not
    root does so in the cgroup v2 group delegated to it (`delegated_v2_group`: the directory and
    its ``cgroup.procs`` and ``cgroup.subtree_control`` its own, as cgroup-v2.rst's delegation
    asks), as root does in its own: the groups it creates there are its own."""
    if os.geteuid() != 0 and delegated_v2_group() is None:
        return None, (
            "the controller is not root and its cgroup is not a cgroup v2 group delegated to it; "
            "run it in one, e.g. `systemd-run --user --scope -p Delegate=yes <command>`"
        )
    try:
        if os.path.exists(os.path.join(_ROOT, "cgroup.controllers")):
            base = _v2_base()
            _v2_make_room(base)
            parent = os.path.join(base, service_name)
            os.makedirs(parent, exist_ok=True)
            _write(os.path.join(parent, "cgroup.subtree_control"), "+pids +memory")
            if memory_total:
                _write(os.path.join(parent, "memory.max"), str(memory_total))
            try:
                _write(os.path.join(parent, "..", "cgroup.subtree_control"), "+cpu")
                _write(os.path.join(parent, "cgroup.subtree_control"), "+cpu")
                cpu_parent = parent
            except OSError:
                cpu_parent = None
            return CgroupLayout(2, parent, parent, parent, cpu_parent), ""
        parents = {}
        for controller in ("pids", "memory", "freezer", "cpu"):
            own = _own_path(controller)
            if own is None or not os.path.isdir(os.path.join(_ROOT, controller)):
                if controller in ("freezer", "cpu"):
                    continue
                return None, f"the cgroup v1 '{controller}' controller is not mounted"
            parent = os.path.join(_ROOT, controller, own.lstrip("/"), service_name)
            os.makedirs(parent, exist_ok=True)
            parents[controller] = parent
        if memory_total:
            _write(os.path.join(parents["memory"], "memory.limit_in_bytes"), str(memory_total))
        return CgroupLayout(
            1, parents["pids"], parents["memory"], parents.get("freezer"), parents.get("cpu")
        ), ""
    except OSError as exc:
        return None, f"cgroups are not writable here: {exc}"


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


class TrajectoryCgroup:
    """The cgroup(s) of one trajectory: create, add a process, list, kill, detect OOM, remove."""

    def __init__(
        self, layout: CgroupLayout, *, memory_bytes: int, max_processes: int, cpus: float = 1.0
    ):
        name = f"t{uuid.uuid4().hex[:12]}"
        self.layout = layout
        self.pids_dir = os.path.join(layout.pids_parent, name)
        self.memory_dir = os.path.join(layout.memory_parent, name)
        self.freezer_dir = (
            os.path.join(layout.freezer_parent, name) if layout.freezer_parent else None
        )
        self.cpu_dir = os.path.join(layout.cpu_parent, name) if layout.cpu_parent else None
        # where the trajectory's processes live, and the group a restore's copying helper joins
        # to charge the trajectory (`charged_copy`): v1, the pids and memory groups; v2 (one
        # hierarchy, where joining the group would freeze the helper with the trajectory) two
        # leaves of the trajectory's group, which alone carries the limits: "run" (frozen) and
        # "restore"
        if layout.version == 2:
            self.procs_dir, self.charge_dir = (
                os.path.join(self.pids_dir, "run"),
                os.path.join(self.pids_dir, "restore"),
            )
            self.freezer_dir = self.procs_dir if self.freezer_dir else None
        else:
            self.procs_dir, self.charge_dir = self.pids_dir, self.memory_dir
        self._frozen = False
        self._doomed = False  # every process killed for good (`kill_for_good`): never frozen again
        # the frozen flag and the freezer's state change together: a run's thread, the idle
        # freezer and the OOM arbiter's escalation may race (a thaw between the
        # flag and the write would leave the group frozen with the flag saying thawed, and its
        # killed processes alive until the controller exited)
        self._freeze_lock = threading.Lock()
        self._freezer: tuple[int, int, bytes, bytes, bytes] | None = None
        self._memory_files: tuple[int, int] | None = None
        for directory in self.directories():
            os.mkdir(directory)
        if layout.version == 2:
            _write(os.path.join(self.pids_dir, "pids.max"), str(max_processes))
            _write(os.path.join(self.memory_dir, "memory.max"), str(memory_bytes))
            swap = os.path.join(self.memory_dir, "memory.swap.max")
            if os.path.exists(swap):
                _write(swap, "0")
        else:
            _write(os.path.join(self.pids_dir, "pids.max"), str(max_processes))
            _write(os.path.join(self.memory_dir, "memory.limit_in_bytes"), str(memory_bytes))
            swap = os.path.join(self.memory_dir, "memory.memsw.limit_in_bytes")
            if os.path.exists(swap):
                _write(swap, str(memory_bytes))
            # inherited from the parent, where the arbiter may have switched it off
            _write(os.path.join(self.memory_dir, "memory.oom_control"), "0")
        if self.cpu_dir is not None and cpus > 0:
            period = 100_000
            if layout.version == 2:
                _write(os.path.join(self.cpu_dir, "cpu.max"), f"{int(cpus * period)} {period}")
            else:
                _write(os.path.join(self.cpu_dir, "cpu.cfs_period_us"), str(period))
                _write(os.path.join(self.cpu_dir, "cpu.cfs_quota_us"), str(int(cpus * period)))
        self._oom_seen = self.oom_kills()

    def directories(self) -> list[str]:
        """This trajectory's group in each hierarchy, parents first (cgroup v2: one group and
        its two leaves)."""
        found = (
            self.pids_dir,
            self.memory_dir,
            self.freezer_dir,
            self.cpu_dir,
            self.procs_dir,
            self.charge_dir,
        )
        return list(dict.fromkeys(d for d in found if d))

    @property
    def can_freeze(self) -> bool:
        return self.freezer_dir is not None

    def add(self, pid: int) -> None:
        for directory in [self.procs_dir] if self.layout.version == 2 else self.directories():
            _write(os.path.join(directory, "cgroup.procs"), str(pid))

    def _freezer_files(self) -> tuple[int, int, bytes, bytes, bytes]:
        """Descriptors kept open (a write to a cgroup file is one syscall, not open+write+close):
        (control, state, freeze command, thaw command, the state text once frozen)."""
        if self._freezer is None:
            if self.layout.version == 2:
                control = os.open(
                    os.path.join(self.freezer_dir, "cgroup.freeze"), os.O_WRONLY | os.O_CLOEXEC
                )
                state = os.open(
                    os.path.join(self.freezer_dir, "cgroup.events"), os.O_RDONLY | os.O_CLOEXEC
                )
                self._freezer = (control, state, b"1", b"0", b"frozen 1")
            else:
                control = os.open(
                    os.path.join(self.freezer_dir, "freezer.state"), os.O_RDWR | os.O_CLOEXEC
                )
                self._freezer = (control, control, b"FROZEN", b"THAWED", b"FROZEN\n")
        return self._freezer

    def freeze(self, deadline: float, give_up: Callable[[], bool] | None = None) -> bool:
        """Stop every process of the group; True once all are frozen, False at ``deadline`` (or
        as soon as ``give_up()`` is true, or once the group is doomed: `kill_for_good`)."""
        if self.freezer_dir is None:
            return False
        with self._freeze_lock:
            if self._doomed:
                return False
            control, state, command, _, frozen = self._freezer_files()
            self._frozen = True
            os.pwrite(control, command, 0)
        spins = 0
        while True:
            text = os.pread(state, 256, 0)
            if (frozen in text.splitlines()) if self.layout.version == 2 else text == frozen:
                return True
            if time.monotonic() > deadline or self._doomed or (give_up is not None and give_up()):
                return False
            spins += 1
            if spins < 50:
                os.sched_yield()
            else:
                time.sleep(0.0002)

    def kill_for_good(self) -> None:
        """SIGKILL every process (one round, `kill_members`), thaw the group (on v1 a frozen
        process acts on SIGKILL only once thawed; dying, it runs nothing) and never freeze it
        again, whichever thread asks."""
        with self._freeze_lock:
            self._doomed = True
            self.kill_members()
        self.thaw()

    def thaw(self) -> None:
        with self._freeze_lock:
            if self.freezer_dir is None or not self._frozen:
                return
            self._frozen = False
            control, _, _, command, _ = self._freezer_files()
            os.pwrite(control, command, 0)

    def pids(self) -> set[int]:
        try:
            with open(os.path.join(self.procs_dir, "cgroup.procs")) as handle:
                # a process outside our PID namespace reads as 0: never a pid to signal
                return {pid for pid in (int(line) for line in handle if line.strip()) if pid > 0}
        except FileNotFoundError:
            return set()

    def kill_all(self, except_pid: int | None = None, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process but ``except_pid`` until none is left; False if time ran out.
        Thaws the group first (on v1 a frozen process dies only once thawed)."""
        deadline = time.monotonic() + timeout_s
        self.thaw()
        while self.kill_members(except_pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0005)
        return True

    def kill_members(self, except_pid: int | None = None) -> int:
        """One round: SIGKILL every process listed in the group but ``except_pid``, each through
        a pidfd and only if it is still a member; how many were listed."""
        others = self.pids() - {except_pid}
        group = _Membership(self.procs_dir) if others else None
        for pid in others:
            _kill_if_member(pid, group)
        return len(others)

    def kill_steps_together(self) -> None:
        """cgroup v2: a kernel OOM kill in this trajectory (at its own ``memory.max``, or the
        service's when memory.high could not hold it) takes every process of the group at once,
        but those at ``oom_score_adj`` -1000 (``memory.oom.group``: "tasks with the OOM
        protection are never killed"). Called once the holder is at -1000, so that the kill takes
        the running step and every process it made, never the holder or its spare. Nothing on v1,
        or where the file is missing (kernels before 4.19)."""
        if self.layout.version == 2:
            with contextlib.suppress(OSError):
                _write(os.path.join(self.memory_dir, "memory.oom.group"), "1")

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in this group so far."""
        if self.layout.version == 2:
            path, key = os.path.join(self.memory_dir, "memory.events"), "oom_kill"
        else:
            path, key = os.path.join(self.memory_dir, "memory.oom_control"), "oom_kill"
        try:
            with open(path) as handle:
                for line in handle:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except FileNotFoundError:
            pass
        return 0

    def unreclaimable_bytes(self, *, kept_open: bool = True) -> int | None:
        """The group's memory charge less its file cache and kernel memory: its anonymous memory
        and tmpfs files, which the kernel cannot reclaim without swap; None once removed (see
        `memory_measure`)."""
        measure = self.memory_measure(kept_open=kept_open)
        return None if measure is None else measure.held

    def memory_measure(self, *, kept_open: bool = True) -> MemoryMeasure | None:
        """The group's unreclaimable memory by kind (`MemoryMeasure`; ``held`` is
        `unreclaimable_bytes`), and its kernel memory apart; None once removed.
        On v1 all kernel memory is left out of the first two figures, because much of it is
        reclaimable cache (a step's negative dentries alone can reach hundreds of MiB, and
        outlive it) that v1 does not tell apart from what is not (inodes of files that exist,
        pipe and socket buffers, page tables): ``kernel`` is v1's kmem counter, which the
        arbiter adds only where the kernel has already reclaimed what it could (out of memory).
        v2 the same (`cgroup_memory.v2_kernel`): its unreclaimable slab holds cache too (the
        long names of negative dentries).
        Unevictable pages (``unevictable``: locked memory) are left out too. No process of a
        trajectory can lock memory (``RLIMIT_MEMLOCK`` 0 and the seccomp filter, `guards`), so
        those in its group were locked by a process outside it, in pages it was charged for
        first: a shared file's page cache it read before a host process (or, without the filter,
        a neighbour) locked it. Counted, that would be growth the trajectory never made, and the
        arbiter would stop or lose it for it; ``memory_total`` still counts them
        (`ServiceMemory`), as nobody can reclaim them.
        ``kept_open``: through descriptors kept for the thread that runs steps (a few preads,
        ~8 µs); other threads read by path."""
        names = UNRECLAIMABLE_FILES[self.layout.version]
        try:
            if kept_open:
                if self._memory_files is None:
                    self._memory_files = tuple(
                        os.open(os.path.join(self.memory_dir, name), os.O_RDONLY | os.O_CLOEXEC)
                        for name in names
                    )
                texts = [os.pread(fd, 8192, 0) for fd in self._memory_files]
            else:
                texts = [read_bytes(os.path.join(self.memory_dir, name)) for name in names]
            held = unreclaimable(self.layout.version, *texts)
            files = stat_value(texts[1], b"shmem")
            other = max(0, held - files - stat_value(texts[1], b"unevictable"))
            kernel = int(texts[2]) if self.layout.version == 1 else v2_kernel(texts[1])
            return MemoryMeasure(other, files, kernel)
        except (OSError, ValueError):
            return None

    def new_oom_kill(self) -> bool:
        """True if the OOM killer struck since the last call (or since creation)."""
        seen, self._oom_seen = self._oom_seen, self.oom_kills()
        return self._oom_seen > seen

    def remove(self) -> None:
        self.kill_all()
        if self._freezer is not None:
            for fd in set(self._freezer[:2]):
                os.close(fd)
            self._freezer = None
        if self._memory_files is not None:
            for fd in self._memory_files:
                os.close(fd)
            self._memory_files = None
        for directory in reversed(self.directories()):  # leaves first
            _rmdir_when_empty(directory)


def _rmdir_when_empty(directory: str) -> None:
    for _ in range(200):
        try:
            os.rmdir(directory)
            return
        except FileNotFoundError:
            return
        except OSError:  # busy for a moment while the last process exits
            time.sleep(0.005)


def parent_directories(layout: CgroupLayout) -> list[str]:
    """The service's own group in each hierarchy it uses (one on cgroup v2)."""
    found = (layout.pids_parent, layout.memory_parent, layout.freezer_parent, layout.cpu_parent)
    return list(dict.fromkeys(d for d in found if d))


def remove_parent(layout: CgroupLayout) -> None:
    for directory in parent_directories(layout):
        try:
            os.rmdir(directory)
        except OSError:
            pass


def _kill_if_member(pid: int, group: _Membership) -> None:
    """SIGKILL ``pid`` through a pidfd, and only if the process the pidfd pins is in ``group``
    (a pid listed there may have exited and been given to another process since)."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # gone already
        return
    try:
        if group.has(pid):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        os.close(pidfd)


class _Membership:
    """How ``/proc/<pid>/cgroup`` names one group (a directory under ``_ROOT``: cgroup v2's, or
    v1's under the hierarchy named by its first component); worked out once per group."""

    def __init__(self, group_dir: str) -> None:
        relative = os.path.relpath(group_dir, _ROOT)
        if os.path.exists(os.path.join(_ROOT, "cgroup.controllers")):
            self._controllers, path = None, "/" + relative  # v2: the line with no controllers
        else:
            hierarchy, _, rest = relative.partition("/")
            self._controllers, path = frozenset(hierarchy.encode().split(b",")), "/" + rest
        self._path = os.path.normpath(path).encode()

    def has(self, pid: int) -> bool:
        """Whether ``pid`` is in the group, as ``/proc/<pid>/cgroup`` says."""
        try:
            with open(f"/proc/{pid}/cgroup", "rb") as handle:
                lines = handle.read().splitlines()
        except OSError:
            return False
        for line in lines:
            _, controllers, listed = line.split(b":", 2)
            if (
                (controllers == b"")
                if self._controllers is None
                else bool(self._controllers & set(controllers.split(b",")))
            ):
                return listed == self._path
        return False


def remove_service_groups(service_dir_name: str, parents: list[str] | None = None) -> bool:
    """Kill every process left in a dead service's groups and remove them; True once none of the
    groups looked for is left. They are looked for as ``service_dir_name`` under each of
    ``parents`` (the parents recorded in the service's lock: `leftovers.recorded_groups`), by
    default under the caller's own groups (`service_parents`), where they are only if the dead
    service's controller ran in the caller's cgroup: True then says nothing of groups elsewhere.
    Used by the sweep of leftovers (``codedance sandbox gc``). Every group is thawed first: on v1
    a frozen process does not act on SIGKILL (idle trajectories are frozen)."""
    groups = []
    for parent in service_parents() if parents is None else dict.fromkeys(parents):
        service_dir = os.path.join(parent, service_dir_name)
        if os.path.isdir(service_dir):
            # every group below it, leaves before their parents, then the service's own
            groups += [
                os.path.join(top, name)
                for top, names, _ in os.walk(service_dir, topdown=False)
                for name in names
            ] + [service_dir]
    for directory in groups:
        thaw(directory)
    for directory in groups:
        membership = _Membership(directory)
        for _ in range(100):
            try:
                with open(os.path.join(directory, "cgroup.procs")) as handle:
                    pids = [p for p in (int(line) for line in handle if line.strip()) if p > 0]
            except FileNotFoundError:  # gone, or not a cgroup (left for the rmdir to say)
                break
            if not pids:
                break
            for pid in pids:
                _kill_if_member(pid, membership)
            time.sleep(0.005)
        _rmdir_when_empty(directory)
    return not any(os.path.exists(directory) for directory in groups)
