"""One cgroup per trajectory: a process limit, a memory limit without swap, and a kill switch.

Host side, used by the controller (which runs as root for this layer). Supports cgroup v2 (one
unified hierarchy with ``pids`` and ``memory`` enabled for our subtree) and cgroup v1 (separate
``pids`` and ``memory`` hierarchies), creating our groups under the controller's own cgroup in
each hierarchy so that an outer limit (a container's) still applies.

``kill_all(except_pid)`` repeats "list, SIGKILL" until only ``except_pid`` is left: a process
forked between the list and the kill is caught by the next round, and ``pids.max`` bounds how
many can appear. Not handled: hosts where the controller may not write cgroups (the sandbox then
runs without this layer and says so).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass

_ROOT = "/sys/fs/cgroup"


@dataclass(frozen=True)
class CgroupLayout:
    """Where our groups live: one directory per controller (a single one on cgroup v2)."""

    version: int
    pids_parent: str
    memory_parent: str


def _own_path(controller: str) -> str | None:
    with open("/proc/self/cgroup") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                return path
    return None


def detect_layout(service_name: str) -> tuple[CgroupLayout | None, str]:
    """Create the service's parent groups; returns (layout, "") or (None, why not)."""
    if os.geteuid() != 0:
        return None, "the controller is not root, so it cannot create cgroups"
    try:
        if os.path.exists(os.path.join(_ROOT, "cgroup.controllers")):
            own = _own_path("") or "/"
            parent = os.path.join(_ROOT, own.lstrip("/"), service_name)
            os.makedirs(parent, exist_ok=True)
            with open(os.path.join(parent, "..", "cgroup.subtree_control"), "w") as handle:
                handle.write("+pids +memory")
            with open(os.path.join(parent, "cgroup.subtree_control"), "w") as handle:
                handle.write("+pids +memory")
            return CgroupLayout(2, parent, parent), ""
        parents = []
        for controller in ("pids", "memory"):
            own = _own_path(controller)
            if own is None or not os.path.isdir(os.path.join(_ROOT, controller)):
                return None, f"the cgroup v1 '{controller}' controller is not mounted"
            parent = os.path.join(_ROOT, controller, own.lstrip("/"), service_name)
            os.makedirs(parent, exist_ok=True)
            parents.append(parent)
        return CgroupLayout(1, parents[0], parents[1]), ""
    except OSError as exc:
        return None, f"cgroups are not writable here: {exc}"


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


class TrajectoryCgroup:
    """The cgroup(s) of one trajectory: create, add a process, list, kill, detect OOM, remove."""

    def __init__(self, layout: CgroupLayout, *, memory_bytes: int, max_processes: int):
        name = f"t{uuid.uuid4().hex[:12]}"
        self.layout = layout
        self.pids_dir = os.path.join(layout.pids_parent, name)
        self.memory_dir = os.path.join(layout.memory_parent, name)
        os.mkdir(self.pids_dir)
        if self.memory_dir != self.pids_dir:
            os.mkdir(self.memory_dir)
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
        self._oom_seen = self.oom_kills()

    def add(self, pid: int) -> None:
        for directory in {self.pids_dir, self.memory_dir}:
            _write(os.path.join(directory, "cgroup.procs"), str(pid))

    def pids(self) -> set[int]:
        try:
            with open(os.path.join(self.pids_dir, "cgroup.procs")) as handle:
                return {int(line) for line in handle if line.strip()}
        except FileNotFoundError:
            return set()

    def kill_all(self, except_pid: int | None = None, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process but ``except_pid`` until none is left; False if time ran out."""
        deadline = time.monotonic() + timeout_s
        while True:
            others = self.pids() - {except_pid}
            if not others:
                return True
            if time.monotonic() > deadline:
                return False
            for pid in others:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.0005)

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

    def new_oom_kill(self) -> bool:
        """True if the OOM killer struck since the last call (or since creation)."""
        seen, self._oom_seen = self._oom_seen, self.oom_kills()
        return self._oom_seen > seen

    def remove(self) -> None:
        self.kill_all()
        for directory in {self.pids_dir, self.memory_dir}:
            for _ in range(200):
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy for a moment while the last process exits
                    time.sleep(0.005)


def remove_parent(layout: CgroupLayout) -> None:
    for directory in {layout.pids_parent, layout.memory_parent}:
        try:
            os.rmdir(directory)
        except OSError:
            pass
