"""What the sandbox promises, and which promises hold on which kind of host.

One source for both ``codedance sandbox check`` (the verdicts for the host it runs on, from the
service it started: `host_of`) and the table in docs/sandbox.md (`docs_table`, the same rules for
the kinds of host users train on; tests/sandbox/test_promises.py pins that the docs show it).
A verdict is `HOLDS`, `BOUNDED` (holds within the bound it states) or `NO` (with why). A promise
with a check (``checks.CHECKS``, by number) is claimed by the host when its verdict is not `NO`:
``sandbox check`` fails when a claimed promise's check fails.
"""

from __future__ import annotations

from dataclasses import dataclass

HOLDS, BOUNDED, NO = "holds", "holds with a bound", "does not hold"


@dataclass(frozen=True)
class Host:
    """What decides the verdicts."""

    root: bool  # the controller is root: a uid per trajectory
    namespaces: bool  # the bubblewrap jail
    # a user and mount namespace per trajectory (non-root, `private_view`), its working directory
    # a size-bounded tmpfs of its own there
    private_views: bool
    seccomp: bool
    cgroups: int | None  # the cgroup version in force, None: no cgroups
    arbiter: bool  # the service's OOM arbiter (cgroup v1: the kernel's killer off; v2: memory.high)
    tmpfs: bool  # the working directories on the service's tmpfs
    processes_hidden: bool  # the jail's /proc remounted with hidepid


@dataclass(frozen=True)
class Verdict:
    state: str  # HOLDS, BOUNDED or NO
    why: str = ""

    @property
    def claimed(self) -> bool:
        return self.state != NO

    def text(self) -> str:
        return f"{self.state} ({self.why})" if self.why else self.state


def _private_workdir(h: Host) -> Verdict:
    if h.root:
        return Verdict(HOLDS, "a uid per trajectory; its directories shut to the others")
    if h.private_views:
        return Verdict(
            HOLDS,
            "a user and mount namespace per trajectory: no other working directory in its view",
        )
    if h.namespaces:
        return Verdict(
            NO,
            (
                "trajectories share the controller's uid and one mount view: nested user "
                "namespaces refused"
            ),
        )
    return Verdict(NO, "trajectories share the controller's uid and the host's file system")


def _atomic(h: Host) -> Verdict:
    if h.cgroups:
        return Verdict(HOLDS)
    return Verdict(
        BOUNDED,
        "no freezer: a holder patched by a committed step can race its own rollback, "
        "inside its own working directory only",
    )


def _reaped(h: Host) -> Verdict:
    if h.cgroups:
        return Verdict(HOLDS)
    return Verdict(BOUNDED, "no cgroup: a process that left the step's process group is not found")


def _denied(h: Host) -> Verdict:
    if not h.seccomp:
        return Verdict(
            NO, "no seccomp filter: snippets can start programs, and without the jail open sockets"
        )
    if not h.cgroups:
        return Verdict(BOUNDED, "memory bounded by the address-space rlimit only")
    return Verdict(HOLDS)


def _independent(h: Host) -> Verdict:
    if not (h.root or h.seccomp):
        return Verdict(
            BOUNDED,
            "trajectories share a uid and no seccomp filter refuses it: a step can lower any "
            "jailed process's CPU priority, affinity or scheduling class, a "
            "neighbour's toward its timeout",
        )
    if not (h.tmpfs or h.private_views):
        return Verdict(
            BOUNDED,
            "trajectories share the controller's temporary file system: a step that fills it, or "
            "a holder that keeps unnamed files open, makes a neighbour's next commit fail, and "
            "that neighbour's state is lost",
        )
    return Verdict(HOLDS)  # the filter refuses scheduling any process but the caller


def _memory(h: Host) -> Verdict:
    # a tmpfs page is charged to the memory group of the process that writes it: a private
    # view's own tmpfs, written by the trajectory's steps, counts in the trajectory's group
    if h.cgroups and (h.tmpfs or h.private_views):
        return Verdict(HOLDS, "Limits.memory, files written included")
    if h.cgroups:
        return Verdict(BOUNDED, "Limits.memory; files go to disk, bounded at each commit")
    rlimit = (
        "the address-space rlimit, memfds refused"
        if h.seccomp
        else "the address-space rlimit; memfds unbounded"
    )
    if h.private_views:
        return Verdict(BOUNDED, f"{rlimit}; its working directory's own tmpfs adds {_OWN_TMPFS}")
    if h.seccomp:  # the captured outputs need unnamed files where memfds are refused
        rlimit += " where the work root's file system makes O_TMPFILE files"
    shm = "" if h.namespaces else "; the host's /dev/shm is bounded by its own size only"
    return Verdict(BOUNDED, f"{rlimit}; files go to disk, bounded at each commit{shm}")


_OWN_TMPFS = "Limits.workdir_bytes and a page per Limits.workdir_files"


def _processes(h: Host) -> Verdict:
    if h.cgroups:
        return Verdict(HOLDS, "pids.max")
    if h.root:
        return Verdict(HOLDS, "RLIMIT_NPROC on the trajectory's own uid")
    if h.private_views:
        return Verdict(HOLDS, "RLIMIT_NPROC in the trajectory's own user namespace")
    return Verdict(NO, "trajectories share one uid: no per-trajectory process limit")


def _who_pays(h: Host) -> Verdict:
    if h.arbiter and h.cgroups == 1:
        return Verdict(HOLDS)
    if h.arbiter and h.root:
        return Verdict(
            BOUNDED,
            "memory.high throttles the service while the arbiter stops the grower; an allocation "
            "that jumps the whole margin at once meets the kernel's OOM killer, which kills a "
            "running step (holders are at -1000), not always the grower's",
        )
    if h.arbiter:
        return Verdict(
            BOUNDED,
            "memory.high throttles the service while the arbiter stops the grower; an allocation "
            "that jumps the whole margin at once meets the kernel's OOM killer, which prefers "
            "running steps (adj 1000) but may take an idle holder (a non-root "
            "controller cannot set -1000)",
        )
    if h.cgroups:
        return Verdict(
            NO,
            "the kernel's OOM killer chooses, a neighbour's holder possibly; keep memory_total "
            ">= Limits.memory x live trajectories",
        )
    return Verdict(NO, "no memory_total: the host's OOM killer chooses")


def _files_are_memory(h: Host) -> Verdict:
    if h.cgroups and (h.tmpfs or h.private_views):
        return Verdict(HOLDS)
    if h.private_views:
        return Verdict(
            BOUNDED,
            f"a tmpfs of the trajectory's own: its writes, unnamed files kept open included, stop "
            f"at {_OWN_TMPFS}; no memory cgroup counts it",
        )
    return Verdict(
        BOUNDED,
        "working directories on disk: a step writes there until its commit is refused"
        "; each file at most Limits.file_size",
    )


def _processes_hidden(h: Host) -> Verdict:
    if h.processes_hidden:
        return Verdict(
            BOUNDED, "pids can still be probed with getsid or getpgid; nothing can be done to them"
        )
    where = "one /proc for the jail" if h.namespaces else "the host's /proc"
    if h.root or h.private_views:
        return Verdict(
            NO,
            f"{where} lists every trajectory's processes; their root, cwd, fds and memory stay "
            "closed by separate uids or user namespaces",
        )
    return Verdict(
        NO,
        f"{where} lists every process; trajectories share a uid, so each reads the others' entries",
    )


def _idle_frozen(h: Host) -> Verdict:
    if h.cgroups:
        return Verdict(HOLDS)
    return Verdict(
        NO, "no freezer: a holder patched by a committed step keeps running between steps"
    )


# (key, the promise, the check that tests it (``checks.CHECKS`` number) or None, its rule)
PROMISES = (
    ("private", "private working directory", 1, _private_workdir),
    ("persist", "state persists across steps", 2, lambda h: Verdict(HOLDS)),
    ("atomic", "atomic steps (exact rollback)", 3, _atomic),
    ("timeout", "undefeatable wall-clock timeout", 4, _reaped),
    ("output", "bounded output", 5, lambda h: Verdict(HOLDS)),
    ("images", "image capture", 6, lambda h: Verdict(HOLDS)),
    ("denied", "no network, programs, signals; bounded resources", 7, _denied),
    ("independent", "independent instances", 8, _independent),
    ("leaks", "no leaks after close", 9, _reaped),
    ("memory", "memory bounded per trajectory", None, _memory),
    ("processes", "processes bounded per trajectory", None, _processes),
    ("who_pays", "memory_total full: the trajectory that grew most pays", None, _who_pays),
    (
        "files_memory",
        "files written are memory (a step cannot fill the disk)",
        None,
        _files_are_memory,
    ),
    ("idle_frozen", "nothing of a trajectory runs between steps", None, _idle_frozen),
    ("processes_hidden", "other trajectories' processes not listed", None, _processes_hidden),
)


def verdicts(host: Host) -> list[tuple[str, str, int | None, Verdict]]:
    """(key, promise, check number or None, verdict) for every promise."""
    return [(key, name, check, rule(host)) for key, name, check, rule in PROMISES]


def host_of(service) -> Host:
    """The host a running `SandboxService` achieved."""
    isolation = service.isolation
    layout = service.cgroup_layout
    return Host(
        root=isolation.users,
        namespaces=isolation.namespaces,
        private_views=isolation.private_views,
        seccomp=isolation.seccomp,
        cgroups=layout.version if layout is not None else None,
        arbiter=service.oom_arbiter is not None,
        tmpfs=service.work_on_tmpfs,
        processes_hidden="private /proc" not in dict(isolation.missing),
    )


# the kinds of host docs/sandbox.md's table covers
COLUMNS = (
    (
        "root, cgroup v1",
        Host(
            root=True,
            namespaces=True,
            private_views=False,
            seccomp=True,
            cgroups=1,
            arbiter=True,
            tmpfs=True,
            processes_hidden=True,
        ),
    ),
    (
        "root, cgroup v2 (delegated group)",
        Host(
            root=True,
            namespaces=True,
            private_views=False,
            seccomp=True,
            cgroups=2,
            arbiter=True,
            tmpfs=True,
            processes_hidden=True,
        ),
    ),
    (
        "ordinary user, user namespaces",
        Host(
            root=False,
            namespaces=True,
            private_views=True,
            seccomp=True,
            cgroups=None,
            arbiter=False,
            tmpfs=False,
            processes_hidden=False,
        ),
    ),
    (
        "ordinary user, user namespaces, delegated cgroup v2 group",
        Host(
            root=False,
            namespaces=True,
            private_views=True,
            seccomp=True,
            cgroups=2,
            arbiter=True,
            tmpfs=False,
            processes_hidden=False,
        ),
    ),
    (
        "container without user namespaces (root inside)",
        Host(
            root=True,
            namespaces=False,
            private_views=False,
            seccomp=True,
            cgroups=None,
            arbiter=False,
            tmpfs=False,
            processes_hidden=False,
        ),
    ),
)
SERVICE_COLUMN = (
    "through `codedance sandbox serve`"  # the host's root controller, for clients of other uids
)


def service_cell(check: int | None) -> str:
    """The service column: its host's root controller; what a client of another uid was shown
    (tests/sandbox/test_service_remote.py runs checks 1-8 through it)."""
    if check is None:
        return "as its host's root column"
    if check == 9:  # a client sees no processes, cgroups or directories of the service's host
        return "as its host's root column; a client's sandboxes close on close() and when it dies"
    return "as its host's root column (checked through the service by a client of another uid)"


def docs_table() -> str:
    """The Markdown table of docs/sandbox.md: a row per promise, a column per kind of host."""
    header = ["promise", *(name for name, _ in COLUMNS), SERVICE_COLUMN]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, name, check, rule in PROMISES:
        cells = [f"{name} (check {check})" if check else name]
        cells += [rule(host).text() for _, host in COLUMNS]
        cells.append(service_cell(check))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
