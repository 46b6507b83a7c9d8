"""Which isolation layers a host allows, and refusing to start below a required level.

Layers, strongest design first (``docs/sandbox.md``):
- ``namespaces``: the zygote and every trajectory run under bubblewrap in fresh PID, network,
  IPC, UTS and mount namespaces, seeing only the system's read-only directories, Python, and
  their own working directories. Needs the ``bwrap`` program.
- ``users``: each trajectory runs as its own unprivileged uid, so trajectories cannot read each
  other's files or signal each other's processes. Needs the controller to run as root.
  Without it, ``private_views`` (not a layer of its own: it needs ``namespaces`` and nested user
  namespaces) gives each trajectory a user and mount namespace where only its own working
  directory exists (``private_view``).
- ``seccomp``: the syscall filter of ``guards`` (no new programs, no signals, no sockets beyond
  unix socketpairs, no namespaces or ptrace). Needs libseccomp (Debian ``libseccomp2``).
- ``cgroups``: a memory limit without swap, ``pids.max``, OOM detection and a reliable kill of
  every process of a step. Needs root and a writable cgroup hierarchy.
- ``rlimits``: address space, file size, open files, processes, no core dumps. Always on.
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from codedance.errors import CodeDanceError, SettingsError

LAYERS = ("namespaces", "users", "seccomp", "cgroups", "rlimits")

HOW_TO_GET = {
    "namespaces": "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow user "
    "namespaces, or run as root",
    "users": "run the controller as root (each trajectory then gets its own uid)",
    "seccomp": "install libseccomp (Debian/Ubuntu: apt-get install libseccomp2) and the Python "
    "package pyseccomp (a dependency of codedance)",
    "cgroups": "run the controller as root on a host with a writable /sys/fs/cgroup",
    "rlimits": "nothing: rlimits are always applied",
}


class SandboxUnavailable(CodeDanceError, RuntimeError):
    """The host cannot provide the isolation that was required."""


@dataclass(frozen=True)
class Isolation:
    """The layers in force for a sandbox, and for each missing one, why."""

    namespaces: bool
    users: bool
    seccomp: bool
    cgroups: bool
    rlimits: bool
    missing: tuple[tuple[str, str], ...] = ()
    # without root (no uid per trajectory): each trajectory sees only its own working directory,
    # in a user and mount namespace of its own (`private_view`)
    private_views: bool = False
    notes: tuple[
        str, ...
    ] = ()  # what the service changed on the host, or asks its admin to (`file_table`)

    @property
    def layers(self) -> tuple[str, ...]:
        return tuple(name for name in LAYERS if getattr(self, name))

    @property
    def level(self) -> str:
        """``full`` when every layer is in force, else ``partial``."""
        return "full" if len(self.layers) == len(LAYERS) else "partial"

    def describe(self) -> str:
        parts = [f"isolation: {self.level} ({', '.join(self.layers) or 'none'})"]
        if self.private_views:
            parts.append(
                "  private views: each trajectory sees only its own working directory "
                "(a mount view of its own)"
            )
        parts += [f"  missing {name}: {why}" for name, why in self.missing]
        parts += [f"  note: {note}" for note in self.notes]
        return "\n".join(parts)

    def require(self, required: str | tuple[str, ...] | list[str] | None) -> None:
        """Raise SandboxUnavailable naming each required layer that is not in force."""
        wanted = normalize_requirement(required)
        absent = [name for name in wanted if not getattr(self, name)]
        if absent:
            reasons = dict(self.missing)
            lines = [
                f"- {name}: {reasons.get(name, 'not available')}; to get it: {HOW_TO_GET[name]}"
                for name in absent
            ]
            raise SandboxUnavailable(
                "the sandbox cannot start at the required isolation level:\n" + "\n".join(lines)
            )


def normalize_requirement(required: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    if required is None:
        return ()
    if isinstance(required, str):
        required = LAYERS if required == "full" else tuple(p.strip() for p in required.split(","))
    unknown = [name for name in required if name not in LAYERS]
    if unknown:
        raise SettingsError(
            f"unknown isolation layer(s) {unknown}; choose from {', '.join(LAYERS)} or 'full'"
        )
    return tuple(required)


def bubblewrap_problem() -> str | None:
    """None if ``bwrap`` can create the namespaces we use here, else why not."""
    path = shutil.which("bwrap")
    if path is None:
        return "the bwrap program (bubblewrap) is not installed"
    probe = [path, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--ro-bind", "/", "/",
             "--proc", "/proc", "--dev", "/dev", "--", "true"]  # fmt: skip
    try:
        done = subprocess.run(probe, capture_output=True, timeout=20, text=True, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run: {exc}"
    if done.returncode != 0:
        return f"bwrap cannot create namespaces here: {done.stderr.strip() or done.returncode}"
    return None


def seccomp_problem() -> str | None:
    if ctypes.util.find_library("seccomp") is None:
        return "libseccomp is not installed"
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"pyseccomp cannot load libseccomp: {exc}"
    return None


FILE_MAX = "/proc/sys/fs/file-max"
MAX_MAP_COUNT = "/proc/sys/vm/max_map_count"
FILE_MAX_RAISED = (1 << 63) - 1  # LONG_MAX, systemd's default (the kernel's own is ~10 % of memory)
RAISE_FILE_MAX = (
    "CODEDANCE_RAISE_FILE_MAX"  # "1": a root service may raise fs.file-max (`raise_file_max`)
)


def _read_sysctl(path: str) -> int | None:
    try:
        with open(path) as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _write_sysctl(path: str, value: int) -> None:
    with open(path, "w") as handle:
        handle.write(f"{value}\n")


def file_table_needed(
    trajectories: int, processes: int, read: Callable[[str], int | None] = _read_sysctl
) -> int:
    """The kernel file objects ``trajectories`` of ``processes`` each could hold: a file mapped and
    then closed keeps its file object (the mapping holds it), so each process holds up to
    ``vm.max_map_count`` (65,530 by default) with a few hundred descriptors."""
    return trajectories * processes * (read(MAX_MAP_COUNT) or 65530)


def file_table(
    needed: int,
    *,
    may_raise: bool,
    read: Callable[[str], int | None] = _read_sysctl,
    write: Callable[[str, int], None] = _write_sysctl,
) -> tuple[str | None, str | None]:
    """Whether the host's file table (``fs.file-max``, one count for the whole kernel) holds
    ``needed`` file objects: past it every unprivileged process on the host gets ``ENFILE``, and
    one trajectory's processes could hold ~2.1 M (files mapped, then closed). Only where
    ``may_raise`` (the service's owner opted in, `raise_file_max`, and it is root) is a lower
    value raised to ``LONG_MAX``, which removes the host's own backstop for every process, not
    only the trajectories (each trajectory's memory cgroup, charged for its file objects, then
    bounds them); never lowered, never put back. Returns ``(note, missing)``: what was changed,
    for `Isolation.notes`, or the current value, what it means and the one line to run, for
    `Isolation.missing` (None, None where it is high enough or cannot be read: not Linux)."""
    current = read(FILE_MAX)
    if current is None or current >= needed:
        return None, None
    why = (
        (
            f"left as it is; a root service started with raise_file_max=True ({RAISE_FILE_MAX}=1) "
            "raises it itself"
        )
        if not may_raise
        else None
    )
    if may_raise:
        try:
            write(FILE_MAX, FILE_MAX_RAISED)
        except (OSError, ValueError) as exc:
            why = f"writing {FILE_MAX} failed: {exc}"
        else:
            now = read(FILE_MAX)
            if now is not None and now >= needed:
                return (
                    f"raised the host's fs.file-max from {current:,} to {now:,} "
                    "(raise_file_max: the kernel's file "
                    f"table is host-wide, trajectories could hold {needed:,} files; "
                    "each is charged to its memory "
                    "cgroup, which now bounds them; it stays raised after the service)"
                ), None
            why = f"fs.file-max is still {now} after writing {FILE_MAX_RAISED}"
    return None, (
        f"fs.file-max is {current:,}, and trajectories could hold {needed:,} files (mapped, then "
        "closed): past it every unprivileged process on the host gets ENFILE; to raise it run "
        f"`sysctl -w fs.file-max={FILE_MAX_RAISED}` as root (and set it in /etc/sysctl.d) ({why})"
    )


def may_raise_file_max(requested: bool | None) -> bool:
    """Whether a service may raise ``fs.file-max`` (`file_table`): only as root, and only when
    asked, by ``requested`` or, where that is None, ``CODEDANCE_RAISE_FILE_MAX=1``."""
    if requested is None:
        requested = os.environ.get(RAISE_FILE_MAX, "") == "1"
    return requested and os.geteuid() == 0
