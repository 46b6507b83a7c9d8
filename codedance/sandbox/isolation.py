"""Which isolation layers a host allows, and refusing to start below a required level.

Layers, strongest design first (``docs/sandbox.md``):
- ``namespaces``: the zygote and every trajectory run under bubblewrap in fresh PID, network,
  IPC, UTS and mount namespaces, seeing only the system's read-only directories, Python, and
  their own working directories. Needs the ``bwrap`` program.
- ``users``: each trajectory runs as its own unprivileged uid, so trajectories cannot read each
  other's files or signal each other's processes. Needs the controller to run as root.
- ``seccomp``: the syscall filter of ``guards`` (no new programs, no signals, no sockets beyond
  unix socketpairs, no namespaces or ptrace). Needs libseccomp (Debian ``libseccomp2``).
- ``cgroups``: a memory limit without swap, ``pids.max``, OOM detection and a reliable kill of
  every process of a step. Needs root and a writable cgroup hierarchy.
- ``rlimits``: address space, file size, open files, processes, no core dumps. Always on.
"""

from __future__ import annotations

import ctypes.util
import shutil
import subprocess
from dataclasses import dataclass

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


class SandboxUnavailable(RuntimeError):
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

    @property
    def layers(self) -> tuple[str, ...]:
        return tuple(name for name in LAYERS if getattr(self, name))

    @property
    def level(self) -> str:
        """``full`` when every layer is in force, else ``partial``."""
        return "full" if len(self.layers) == len(LAYERS) else "partial"

    def describe(self) -> str:
        parts = [f"isolation: {self.level} ({', '.join(self.layers) or 'none'})"]
        parts += [f"  missing {name}: {why}" for name, why in self.missing]
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
        raise ValueError(f"unknown isolation layer(s) {unknown}; choose from {', '.join(LAYERS)} or 'full'")
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
