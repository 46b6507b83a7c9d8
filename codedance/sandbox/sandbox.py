"""`Sandbox`: one trajectory's persistent, transactional Python, run in the service's jail.

The controller side of the fork chain (see ``runtime``). Threat model: every process of the
trajectory is hostile at every moment, the holder included once any step has committed (the
step that committed *is* the next holder, with whatever it patched). This class alone decides a
step's fate and enforces it from outside the jail:
- **one absolute deadline per `run`**: the step must answer by ``timeout_s``; every clean-up after
  a failure must be over ``Limits.recovery_s`` later. Nothing the jail sends extends either; past
  the second the trajectory is declared lost and all its processes are killed;
- success: the step's reply must pass the protocol's schema and bounds, the step must be the only
  process beside the holder (but for the spare it forks after its reply), with one thread, and the
  working directory within its limits; then its files are checkpointed (with every process of the
  trajectory **frozen** while anything is copied), and the old holder is killed: the step, which
  acts as the holder since its reply, is the holder (nothing is sent to it);
- failure (error, timeout, crash, OOM, refusal, a malformed reply): the step's processes are
  killed, and the working directory is restored from the last checkpoint (frozen while anything
  is written); the old holder carries on;
- messages are read per sender (``SCM_CREDENTIALS``) with a byte budget each (the step: the
  message limit; the holder: a few KiB; anyone else: nothing); a holder that breaks the protocol
  loses its trajectory, a step that does fails its step;
- processes are killed through the trajectory's cgroup or pidfds, never by a pid that may have
  been reused;
- the running step is the OOM killer's first choice (``oom_score_adj`` 1000, set before its code
  is sent, so whatever it forks inherits it), and while memory cgroups bound the trajectories the
  holder is never chosen (-1000, also when a step commits): a trajectory's files on the tmpfs work
  root are charged to it but are in no process's RSS, so otherwise the kernel, short of memory,
  could kill an idle neighbour's holder (the state) for another trajectory's files. Its writes
  then fail instead (``ENOSPC``/``ENOMEM``). Without memory cgroups the holder stays at 0 (a
  never-killed process with unbounded memory would endanger the host), and so it does where the
  controller lacks CAP_SYS_RESOURCE (root in many containers), which lowering needs;
- when all trajectories together run out of memory, the service's OOM arbiter (``arbiter``, cgroup
  v1) picks the trajectory that grew most: `yield_memory` kills its step (``oom``, rolled back) or,
  if its holder grew, the whole trajectory. The arbiter kills through the trajectory's cgroup
  (each process by a pidfd checked for membership) under ``_step_lock``, and a step that has
  answered only if it grew after answering.

Not handled: a holder killed from outside (for example by the host's OOM killer when no memory
cgroup is in force) loses the trajectory's state; later steps then return ``crashed`` with a note
saying so. Without a freezer (no cgroups) the files are still handled without following any link,
but a hostile holder can race the controller inside its own working directory. One step runs at a
time per sandbox; concurrent calls wait their turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import queue
import secrets
import signal
import socket
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Executor
from dataclasses import replace
from typing import Self

from codedance.errors import SandboxClosed
from codedance.sandbox import files, layout, procs, protocol
from codedance.sandbox.cgroups import TrajectoryCgroup
from codedance.sandbox.inputs import ImageInput
from codedance.sandbox.isolation import Isolation
from codedance.sandbox.jail.execution import CONTROLLER_PARSE_CHARS, executes_nothing
from codedance.sandbox.layout import Limits, seconds
from codedance.sandbox.memory.arbiter import SLACK_BYTES
from codedance.sandbox.service import URL_ENV, SandboxService, ServiceError, default_service
from codedance.sandbox.trajectory_memory import TrajectoryMemory
from codedance.types import ExecResult, ExecStatus

HOLDER_MESSAGE_BYTES = 64 << 10  # a holder only ever says "ready" and "step_done"
NEWCOMER_MESSAGE_BYTES = (
    512  # a spare's announcement (the holder's "ready" is read with the holder's budget)
)
MAX_NEWCOMERS = 32  # unknown senders buffered at once while a step is awaited; more are dropped
STEP_OOM_SCORE_ADJ = 1000  # the OOM killer's first choice
UNKNOWN_STEP_LOOK_S = 0.05  # between two kills of a failed step not yet known by its pid (`_fail`)
ROLLED_BACK = "state rolled back to before this step"
OWED_TO_ROLLBACK = (
    "the service's memory (memory_total) is owed to a neighbour's step that freed its "
    "own committed "
    "files and may need them back: what this step grew could not be committed now"
)
MEMORY_VICTIM = (
    "the service's memory (memory_total) ran out while this step ran, and the arbiter chose "
    "this trajectory (the largest growth since its last committed step, or the only step "
    "that could give memory back): the step was stopped"
)
REPLACED_EXIT_WAIT_S = (
    1.0  # how long a step waits, before its code is sent, for the holder it replaces to exit
)
DYING_GRACE_S = 1.0  # how long the idle freezer waits for a replaced holder to exit before freezing


class _Lost(Exception):
    """The trajectory can no longer be trusted or restored (its state is gone)."""


class _Closing(Exception):
    """`close` was called from another thread while this step ran."""


class _StoppedForMemory(Exception):
    """The OOM arbiter stopped an answered step before any of its files were saved."""


class Sandbox:
    """A private, persistent Python namespace and working directory for one trajectory.

    >>> with Sandbox(images=[]) as sb:  # doctest: +SKIP
    ...     sb.run("x = 6 * 7; print(x)").stdout
    '42\\n'
    """

    def __new__(
        cls,
        images: Iterable[ImageInput] = (),
        *,
        service: SandboxService | None = None,
        url: str | None = None,
        **options,
    ):
        """A `RemoteSandbox` in the sandbox service at ``url`` (default: ``CODEDANCE_SANDBOX_URL``
        when no ``service`` is given); otherwise a sandbox of this process's own service."""
        url = url or (os.environ.get(URL_ENV) if service is None else None)
        if url:
            from codedance.sandbox.remote.client import RemoteSandbox

            return RemoteSandbox(images, url=url, **options)
        return super().__new__(cls)

    def __init__(
        self,
        images: Iterable[ImageInput] = (),
        *,
        timeout_s: float = 15.0,
        limits: Limits | None = None,
        require: str | tuple[str, ...] | None = None,
        service: SandboxService | None = None,
        executor: Executor | None = None,
        start_timeout_s: float = 30.0,
        url: str | None = None,
    ):
        self.timeout_s = seconds("timeout_s", timeout_s)
        seconds("start_timeout_s", start_timeout_s)
        self.limits = limits or Limits()
        self.service = service or default_service()
        self._executor = executor
        self._lock = threading.Lock()
        self._closed = False  # no new runs (set first by `begin_closing`)
        self._released = False  # processes killed, descriptors and files released
        self._owner_pid = os.getpid()  # a forked child of the controller never closes it (`close`)
        self._release_lock = threading.Lock()
        self._registered = False  # with the service, which then waits for its release when closing
        _start_closer()  # here, not in `__del__`: starting a thread takes locks
        self._lost: str | None = None
        self._cgroup: TrajectoryCgroup | None = None
        self._files: files.WorkdirSnapshot | None = None
        self._holder_pid: int | None = None
        self._holder_pidfd: int | None = None
        self._step_pid: int | None = None
        self._step_pidfd: int | None = None
        # the step as the OOM arbiter sees it (another thread): its phase and the holder's pid are
        # set, and the trajectory's processes killed by the arbiter, only under this lock
        self._step_lock = threading.Lock()
        self._step_phase = "idle"  # "started" (a step's processes may be stopped), "answered"
        self.runs = 0  # how many `run` calls have started (the arbiter acts once per run)
        self._memory = TrajectoryMemory()  # its growth since the last committed step answered
        self._dying: dict[
            int, int
        ] = {}  # replaced holders, killed, not yet seen gone: pid -> pidfd
        self._awaiting_new_process = True  # the holder's "ready" or a spare's announcement may come
        self._recovery_deadline = 0.0
        self._holder_oom_score_adj = (
            0  # procs.HOLDER_OOM_SCORE_ADJ where allowed and a memory cgroup bounds it
        )
        self._idle_since = 0.0  # when the last run ended (time.monotonic)
        self._idle_frozen = False
        self.freeze_pending = False  # the service's idle freezer holds an entry for this sandbox
        self._conn: socket.socket | None = None
        self._interrupt: int | None = None  # an eventfd: `close` wakes a step's blocked receive
        self.service.isolation.require(require)  # host-level layers first, before any work
        self.service.register(self)
        self._registered = True
        try:
            try:
                self.uid = self.service.allocate_uid()
                self._dir = os.path.join(self.service.work_root, f"t{secrets.token_hex(6)}")
                self._setup(list(images), start_timeout_s)
            except BaseException:
                self.close()
                raise
        finally:
            self.service.created()
        self.isolation: Isolation = self._isolation
        self.isolation.require(require)

    # ----------------------------------------------------------------- setup
    def _setup(self, images: list[ImageInput], start_timeout_s: float) -> None:
        self._inputs_dir = (os.path.join(self.service.inputs_root, os.path.basename(self._dir))
                            if self.service.inputs_root else None)  # fmt: skip
        dirs = layout.prepare(self._dir, images, self.uid, self._inputs_dir)
        self.workdir = dirs.workdir
        if self.service.cgroup_layout is not None:
            self._cgroup = TrajectoryCgroup(
                self.service.cgroup_layout,
                memory_bytes=self.limits.memory,
                max_processes=self.limits.processes,
                cpus=self.limits.cpus,
            )
            self._memory.cgroup = self._cgroup
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setblocking(False)  # every send and receive has a deadline
        # the jail's descriptors stay in the jail: none is released on the controller's thread
        protocol.refuse_passed_descriptors(ours)
        self._conn = ours
        self._interrupt = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._reader = protocol.Reader(
            ours,
            max_bytes=self.limits.max_message,
            with_credentials=True,
            interrupt_fd=self._interrupt,
            budget=self._budget,
        )
        request = layout.holder_request(dirs, self.uid, self.limits)
        try:
            self.service.spawn(request, theirs)
        finally:
            theirs.close()
        try:
            ready = self._reader.receive(deadline=time.monotonic() + start_timeout_s)
        except protocol.ProtocolError as exc:
            raise ServiceError(f"the sandbox's holder did not start within {start_timeout_s:g} s "
                               f"({exc}); is the machine overloaded? `codedance sandbox check` "
                               "tests the host") from exc  # fmt: skip
        if ready.op != "ready" or not ready.body.get("ok"):
            raise ValueError(f"the sandbox could not start: {str(ready.body.get('error'))[:2000]}")
        self._holder_pid = ready.sender_pid
        self._holder_pidfd = os.pidfd_open(self._holder_pid)
        self._awaiting_new_process = False
        self._files = self._snapshot(dirs, own_view="private_view" in ready.body.get("layers", {}))
        if self._cgroup is not None:
            self._cgroup.add(self._holder_pid)
            # never the OOM victim where it is allowed (root with CAP_SYS_RESOURCE) and safe (its
            # memory is bounded by memory_total)
            if procs.set_oom_score_adj(
                self._holder_pid, procs.HOLDER_OOM_SCORE_ADJ, self._holder_pidfd
            ):
                self._holder_oom_score_adj = procs.HOLDER_OOM_SCORE_ADJ
                self._cgroup.kill_steps_together()
        if not self._resume(
            time.monotonic() + start_timeout_s
        ):  # the holder forks its first spare only now
            raise ServiceError("the sandbox's holder exited right after starting")
        self._memory.set_mark()
        layers = ready.body.get("layers", {})
        base = self.service.isolation
        missing = dict(base.missing)
        if base.seccomp and "seccomp" not in layers:
            missing["seccomp"] = str(layers.get("seccomp_error", "the filter did not load"))
        self._isolation = replace(
            base, seccomp=base.seccomp and "seccomp" in layers, missing=tuple(missing.items())
        )

    def _snapshot(self, dirs: layout.TrajectoryDirs, own_view: bool) -> files.WorkdirSnapshot:
        """The transactional copy of the working directory as the trajectory sees it: in a
        private view of its own that is the holder's own tmpfs (`private_view`), reached through
        ``/proc/<holder>/root`` now, while the holder has run no code but ours (no step can
        have changed what that path leads to), and kept open from then on."""
        workdir = self.workdir
        if own_view:
            workdir = f"/proc/{self._holder_pid}/root{self.workdir}"
        store = os.path.join(self.service.store_root, os.path.basename(self._dir))
        snapshot = files.WorkdirSnapshot(
            workdir, store, protected=dirs.protected, owner=dirs.owner,
            max_entries=self.limits.workdir_files, max_bytes=self.limits.workdir_bytes,
            budget=self.service.store_budget,
        )  # fmt: skip
        snapshot.stop = lambda: self._closed  # a closing sandbox's walk stops (`_Closing`)
        if own_view and not procs.alive(self._holder_pidfd):  # the pid may name another now
            snapshot.close()
            raise ServiceError("the sandbox's holder exited right after starting")
        return snapshot

    def _budget(self, pid: int | None) -> int:
        """How many bytes a message from ``pid`` may have (0: its bytes are dropped unread)."""
        if pid is not None and pid == self._step_pid:
            return self.limits.max_message
        if pid is not None and pid == self._holder_pid:
            return HOLDER_MESSAGE_BYTES
        if not self._awaiting_new_process:
            return 0
        if self._holder_pid is None:  # setup: the holder's "ready"
            return HOLDER_MESSAGE_BYTES
        return NEWCOMER_MESSAGE_BYTES if self._reader.senders_buffered < MAX_NEWCOMERS else 0

    # ----------------------------------------------------------------- running
    def run(self, code: str, timeout_s: float | None = None) -> ExecResult:
        """Run one snippet as a transaction; see the module docstring for what each status means.
        Returns within ``timeout_s + limits.recovery_s`` whatever the snippet does."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        # what runs, as it crosses the wire (UTF-8: a lone surrogate becomes "?"), is also what is
        # judged for doing nothing (a constant holding one would fail to parse here and be
        # counted as doing something)
        code = code.encode("utf-8", "replace").decode("utf-8")
        timeout = self.timeout_s if timeout_s is None else seconds("timeout_s", timeout_s)
        while not self._lock.acquire(timeout=0.05):
            if self._closed:
                raise SandboxClosed("this sandbox is closed; create a new Sandbox to run more code")
        try:
            if self._closed:
                raise SandboxClosed("this sandbox is closed; create a new Sandbox to run more code")
            if self._lost is not None:
                return ExecResult(status=ExecStatus.CRASHED, notes=(self._lost,), rolled_back=False)
            request = protocol.encode({"op": "run", "code": code})
            if protocol.header_bytes(request) > protocol.MAX_HEADER_BYTES:  # model output is the
                # input here: a result, not an exception
                size = len(code.encode("utf-8"))
                note = (
                    f"the code was not run: it is {size:,} bytes as UTF-8 and a step's "
                    "request (the code "
                    f"JSON-escaped) takes at most {protocol.MAX_HEADER_BYTES:,}; split "
                    "it into smaller steps"
                )
                return ExecResult(status=ExecStatus.REFUSED, notes=(note,), rolled_back=True)
            started = time.monotonic()
            self._wake_from_idle()
            self._settle_mark()  # before any code runs: a replaced holder's exit is no credit to it
            self._memory.victim = self._memory.escalated = False
            self.runs += 1
            self._recovery_deadline = started + timeout + self.limits.recovery_s
            self.service.running_changed(self, True)
            try:
                result = self._guarded_step(request, started + timeout, timeout)
            finally:
                self.service.running_changed(self, False)
            if self._memory.victim:
                result = self._after_yielding_memory(result)
            self._lower_mark()
            # a long snippet is parsed by its step, not here (`CONTROLLER_PARSE_CHARS`): the step's
            # word counts only for its own trajectory's reward, which a patched holder can fake
            # anyway
            nothing = (
                executes_nothing(code)
                if len(code) <= CONTROLLER_PARSE_CHARS
                else result.executed_nothing
            )
            result = replace(
                result, duration_s=time.monotonic() - started, executed_nothing=nothing
            )
            self._idle_since = time.monotonic()
            if self._cgroup is not None and self._cgroup.can_freeze and self._lost is None:
                self.service.idle_freezer.schedule(self)
            return result
        finally:
            self._lock.release()

    def freeze_if_idle(self, delay_s: float) -> float | None:
        """Freeze every process of the trajectory if it has been idle for ``delay_s`` (called by
        the service's idle freezer; never waits for a running step). None when done with (frozen,
        closed, lost); else when it last became idle, to look again a delay after that."""
        if not self._lock.acquire(blocking=False):
            return time.monotonic()  # a step is running: its end reschedules
        try:
            if not self.alive or self._idle_frozen:
                return None
            if time.monotonic() - self._idle_since < delay_s:
                return self._idle_since
            self._settle_mark()
            if self._dying and time.monotonic() - self._idle_since < DYING_GRACE_S:
                return time.monotonic()  # frozen, a replaced holder could not exit (cgroup v1)
            # a process stuck in the kernel (waiting on a lock) freezes when it comes out: the
            # group stays "freezing" rather than being thawed for good
            self._cgroup.freeze(time.monotonic() + 0.05)
            self._idle_frozen = True
            return None
        finally:
            self._lock.release()

    # ---------------------------------------------------------------- memory
    # (``trajectory_memory``, ``memory.arbiter``)
    @property
    def running(self) -> bool:
        """Whether a `run` is in progress (its step may be growing)."""
        return self._lock.locked()

    def _lower_mark(self) -> None:
        """The mark lowered to what the trajectory holds (`TrajectoryMemory.lower_mark`) while
        its state lives."""
        if self._lost is None:
            self._memory.lower_mark()

    def _settle_mark(self) -> None:
        """(No step running: `_lock` held.) Forget replaced holders that have exited and lower
        the mark (`_lower_mark`). Never waits: a replaced holder still exiting keeps its memory
        in the mark until one of these looks (a run's start, the idle freezer's, the arbiter's)
        comes after its exit, or the next step waits for it (`_step`, before its code is sent)."""
        self._reap_dying(0.0)
        self._lower_mark()

    def settle_idle_mark(self) -> None:
        """The arbiter's look at an idle trajectory (`_settle_mark`); nothing while a run is in
        progress (its step's growth is never forgiven)."""
        if self._lock.acquire(blocking=False):
            try:
                if self.alive:
                    self._settle_mark()
            finally:
                self._lock.release()

    def giving_back(self) -> bool:
        """Every process killed for the service's memory (`yield_memory` with
        ``whole_trajectory``), and not all of it given back yet: its run still unwinding (its
        restore giving up), or some of its processes not yet gone."""
        if not self._memory.escalated or self._released or self._cgroup is None:
            return False
        return self.running or bool(self._cgroup.pids())

    def memory_growth(self) -> int | None:
        """Unreclaimable memory gained since the last committed step answered (what the running
        step added, and anything after that answer or between steps); None without a memory
        cgroup or once over (`TrajectoryMemory.growths`)."""
        growths = self.memory_growths()
        return None if growths is None else growths[0]

    def memory_growths(self) -> tuple[int, int] | None:
        """(`memory_growth`, the same plus the kernel memory gained; `TrajectoryMemory.growths`)."""
        return self._memory.growths() if self.alive else None

    def memory_owed(self) -> int:
        """What the running step's rollback would need back beyond what killing the step frees
        (`TrajectoryMemory.owed`); 0 once over."""
        return self._memory.owed() if self.alive else 0

    def yield_memory(self, idle_past: int, *, whole_trajectory: bool = False) -> str:
        """Give memory back to the service (called by its OOM arbiter, from another thread):
        ``"stopped"``: a running step (until its files are being saved) is killed with everything
        but the holder (its `run` returns ``oom``, rolled back), or with ``whole_trajectory`` the
        holder too (the trajectory is lost); an idle trajectory grown by more than ``idle_past``
        bytes (`arbiter.idle_floor`: far above what an honest one shows; only a patched holder
        grows between steps) is lost. ``"wait"``: a run is between those moments (ask again
        soon). ``"no"``: nothing to stop here (idle, and grown by ``idle_past`` at most)."""
        if self._lock.acquire(blocking=False):
            try:
                growth = self.memory_growth()
                if growth is None or growth <= idle_past:
                    return "no"
                self._lose(
                    f"its memory grew by {growth >> 20} MiB outside any step while the service's "
                    "memory (memory_total) ran out (only a holder patched by a "
                    "committed step does that)"
                )
                return "stopped"
            finally:
                self._lock.release()
        with (
            self._step_lock
        ):  # every process but the holder (a step's children in any process group)
            if whole_trajectory:
                self._memory.victim = self._memory.escalated = True
                # its restore may have frozen it, and on v1 a frozen process acts on SIGKILL only
                # once thawed: frozen, it kept its memory until the run's deadline and the whole
                # service waited; never frozen again after this, and the
                # run's restore gives up as soon as it sees the escalation
                self._cgroup.kill_for_good()
                return "stopped"
            if self._step_phase not in ("started", "answered"):
                # being committed (frozen: it cannot grow), or a run's first or last moments
                return "wait"
            self._memory.victim = True
            self._cgroup.kill_members(except_pid=self._holder_pid)
            return "stopped"

    def restore_excess(self) -> int:
        """While this trajectory's restore waits for the full service: how much more than its
        committed state it would hold once restored (`TrajectoryMemory.measure_restore_excess`);
        0 otherwise."""
        return self._memory.restore_excess

    def _measure_restore_excess(self) -> None:
        """(The restore's thread, when the full service first refuses a write.)"""
        self._memory.measure_restore_excess(self._holder_pid, self._files, self._recovery_deadline)

    def _after_yielding_memory(self, result: ExecResult) -> ExecResult:
        """The arbiter stopped this run's step: say so; lose the trajectory if the rollback did
        not give the growth back (its holder grew)."""
        if self._memory.escalated:
            # (`_lose` hands its files to the remover at once: left charged until close(),
            # neighbours' writes and forks would fail)
            return self._lose(
                "the trajectory went on holding memory after its step was stopped for the "
                "service's memory (its holder, or a process its step left, kept it)"
            )
        if self._lost is not None or not result.rolled_back:
            return result
        growth = self.memory_growth()
        if growth is not None and growth > SLACK_BYTES:
            return self._lose(
                f"after its step was stopped for the service's memory and rolled back, the "
                f"trajectory still held {growth >> 20} MiB more than after its last commit "
                "(its holder, or a process its step left, kept it)"
            )
        notes = tuple(
            note for note in result.notes if not note.startswith("the step's process died of")
        )
        return replace(result, status=ExecStatus.OOM, notes=(MEMORY_VICTIM, *notes))

    def _wake_from_idle(self) -> None:
        if self._idle_frozen:
            self._cgroup.thaw()
            self._idle_frozen = False

    async def arun(self, code: str, timeout_s: float | None = None) -> ExecResult:
        """`run` without blocking the event loop (in the pool's bounded executor when there is
        one)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._executor_now(), self.run, code, timeout_s
        )

    def _executor_now(self) -> Executor | None:
        """The pool's bounded executor, or the loop's default once this sandbox is closing: a
        pool closes its sandboxes before it shuts its executor down, and a closed sandbox's
        `run` and `close` need no bound (a shut-down executor raises RuntimeError).
        Pinned by
        `tests/sandbox/test_api.py::test_a_pool_sandbox_used_after_its_pool_closed_says_it_is_closed`."""
        return None if self._closed else self._executor

    def _guarded_step(self, request: bytes, deadline: float, timeout: float) -> ExecResult:
        try:
            return self._step(request, deadline, timeout)
        except _Closing:
            self._kill_step()
            return ExecResult(
                status=ExecStatus.CRASHED, notes=("the sandbox was closed while this step ran",)
            )
        except _Lost as lost:
            return self._lose(str(lost))
        except Exception as exc:  # noqa: BLE001 - after close() released the descriptors, or a bug
            if self._closed:
                return ExecResult(
                    status=ExecStatus.CRASHED, notes=("the sandbox was closed while this step ran",)
                )
            return self._lose(f"the controller failed: {type(exc).__name__}: {exc}")
        finally:
            self._forget_step()

    def _receive(self, deadline: float) -> protocol.Message:
        """The next message, from the holder or the current step only; `BadMessage` from the step
        is raised, anything else broken becomes `_Lost` or `_Closing`."""
        while True:
            try:
                message = self._reader.receive(deadline)
            except protocol.Interrupted:
                raise _Closing() from None
            except protocol.BadMessage as exc:
                if exc.sender_pid == self._holder_pid:
                    raise _Lost(f"the holder process broke the protocol ({exc})") from None
                if exc.sender_pid == self._step_pid:
                    raise
                continue  # a stray process: its bytes are ignored from now on
            except (protocol.PeerClosed, OSError) as exc:
                raise _Lost(f"the sandbox's holder process is gone ({exc})") from None
            if message.sender_pid == self._holder_pid and message.op != "step_done":
                raise _Lost(
                    f"the holder process sent an unexpected {str(message.op)[:40]!r} message"
                )
            return message

    def _receive_spare(self, deadline: float) -> protocol.Message:
        """The holder's spare's announcement (usually read already: a spare announces itself as
        soon as it is forked), or the holder's word that the spare died. Announcements of anyone
        else (a killed step's spare, a stranger) are ignored."""
        while True:
            message = self._receive(deadline)
            if message.sender_pid == self._holder_pid:
                return message
            if message.op == "spare" and procs.parent_pid(message.sender_pid) == self._holder_pid:
                return message
            self._reader.forget(message.sender_pid)

    def _step(self, request: bytes, deadline: float, timeout: float) -> ExecResult:
        """Run one encoded ``run`` request in the spare, then commit it or roll it back."""
        with self._step_lock:
            self._step_phase = "started"
        self._awaiting_new_process = True
        try:
            message = self._receive_spare(deadline)
        except protocol.ReceiveTimeout:
            return self._fail(ExecStatus.TIMEOUT, f"the step did not start within {timeout:g} s")
        finally:
            self._awaiting_new_process = False
        if message.sender_pid == self._holder_pid:
            return self._after_crash(message)  # the spare died before it started
        with self._step_lock:
            self._step_pid = message.sender_pid
            self._step_pidfd = procs.open_pidfd(
                self._step_pid
            )  # None: already dead; the holder says how
        if self._dying:  # a holder replaced by the last commit still exiting (its exit overlaps the
            # spare's fork, so this rarely waits): what it frees must not become credit for this
            # step
            self._reap_dying(min(deadline, time.monotonic() + REPLACED_EXIT_WAIT_S))
            self._lower_mark()
        self._reader.forget_others({self._holder_pid, self._step_pid})
        # the OOM killer's first choice (see the module docstring) before its code arrives, so
        # that whatever the code forks inherits it
        procs.set_oom_score_adj(self._step_pid, STEP_OOM_SCORE_ADJ, self._step_pidfd)
        try:
            protocol.send_encoded(
                self._conn, request, deadline=deadline, interrupt_fd=self._interrupt
            )
        except protocol.Interrupted:
            raise _Closing() from None
        except protocol.SendTimeout:
            raise _Lost("the holder process stopped reading its socket") from None
        except OSError as exc:
            raise _Lost(f"the sandbox's holder process is gone ({exc})") from None
        try:
            message = self._receive(deadline)
        except protocol.ReceiveTimeout:
            return self._fail(
                ExecStatus.TIMEOUT, f"the step ran past its {timeout:g} s limit and was stopped"
            )
        except protocol.BadMessage as exc:
            return self._fail(
                ExecStatus.CRASHED, f"the step's reply was malformed and refused: {exc}"
            )
        if message.sender_pid == self._holder_pid:
            return self._after_crash(message)
        if not self._answered():
            return self._fail(ExecStatus.OOM, None)  # the arbiter stopped it as it answered
        if message.op != "result":
            return self._fail(ExecStatus.CRASHED, "the step sent an unexpected message")
        try:
            result = protocol.parse_result(message, self.limits)
        except protocol.BadMessage as exc:
            return self._fail(
                ExecStatus.CRASHED, f"the step's reply was malformed and refused: {exc}"
            )
        if result.status is ExecStatus.OK and self._step_pidfd is None:
            result = replace(
                result,
                status=ExecStatus.CRASHED,
                notes=result.notes + ("the step's process vanished",),
            )
        if result.status is not ExecStatus.OK:
            return self._fail(result.status, None, result)
        return self._try_commit(result)

    def _answered(self) -> bool:
        """The step answered: its growth so far is what it answered with (the mark moves here);
        the arbiter may still stop it until its files are being saved (`_claim_commit`). False if
        the arbiter has stopped it already."""
        with self._step_lock:
            if self._memory.victim:
                return False
            self._step_phase = "answered"
            self._memory.answered()
            return True

    def _try_commit(self, result: ExecResult) -> ExecResult:
        """Check the step, checkpoint its files (frozen while anything is copied), make it the
        holder. A step the OOM arbiter stopped before anything of it was saved fails as oom."""
        try:
            problem = self._commit_problem()
            if problem is None and self.service.commit_takes_what_is_owed(
                self, self._memory.step_growth(), self._page_table_growth
            ):
                return self._fail(ExecStatus.OOM, OWED_TO_ROLLBACK)
            if problem is None and self._claim_commit():
                return self._commit(result)
        except _StoppedForMemory:
            problem = None
        finally:
            self._thaw()
        if problem is None:
            return self._fail(ExecStatus.OOM, None)
        result = replace(result, status=ExecStatus.REFUSED, notes=result.notes + (problem,))
        return self._fail(ExecStatus.REFUSED, None, result)

    def _page_table_growth(self) -> int:
        """`TrajectoryMemory.page_table_growth` of the answered step."""
        return TrajectoryMemory.page_table_growth(self._step_pid, self._holder_pid)

    def _claim_commit(self) -> bool:
        """From now on the OOM arbiter leaves the step alone (its files are being saved, the
        trajectory frozen); False if it has stopped it already."""
        with self._step_lock:
            if self._memory.victim:
                return False
            self._step_phase = "committing"
            return True

    def _freeze_to_save(self) -> None:
        """Freeze before the checkpoint writes (a process waiting in the kernel's OOM wait delays
        this until memory is freed: the arbiter may stop the step meanwhile), then claim it."""
        self._freeze()
        if not self._claim_commit():
            raise _StoppedForMemory()

    def _commit_problem(self) -> str | None:
        self._reap_dying(min(time.monotonic() + 2.0, self._recovery_deadline))
        if self._cgroup is not None and not self._only_a_spare(
            self._cgroup.pids() - {self._holder_pid, self._step_pid}
        ):
            return "the step left processes running; wait for every child process before it ends"
        if procs.thread_count(self._step_pid) > 1:
            return "the step left threads running; join every thread before the step ends"
        if procs.thread_count(self._holder_pid) > 1:
            return (
                "the holder process runs threads (a committed step patched it); start a new sandbox"
            )
        try:
            self._files.checkpoint(self._recovery_deadline, before_writing=self._freeze_to_save)
        except files.LimitExceeded as exc:
            return f"the working directory cannot be kept: {exc}"
        except InterruptedError:
            raise _Closing() from None
        except (files.SnapshotBroken, files.DeadlinePassed, OSError) as exc:
            raise _Lost(f"the working directory could not be saved ({exc})") from None
        return None

    def _only_a_spare(self, others: set[int]) -> bool:
        """Whether the trajectory's processes besides the holder and the step are at most the
        step's own spare (the honest runtime forks one after its result, having checked that the
        snippet left no child; any other process refuses the commit)."""
        return not others or (
            len(others) == 1 and procs.parent_pid(next(iter(others))) == self._step_pid
        )

    def _commit(self, result: ExecResult) -> ExecResult:
        """Make the step the holder: nothing is sent (it acts as the holder since its result);
        the old holder is killed, and its exit awaited only by the next commit."""
        old_pid, old_pidfd = self._holder_pid, self._holder_pidfd
        with self._step_lock:
            self._holder_pid, self._holder_pidfd = self._step_pid, self._step_pidfd
            self._step_pid = self._step_pidfd = None
            self._step_phase = "idle"
            self._memory.committed()
        procs.set_oom_score_adj(self._holder_pid, self._holder_oom_score_adj, self._holder_pidfd)
        procs.kill_pidfd(old_pidfd)  # on cgroup v1 it dies once thawed
        self._thaw()
        self._reader.forget(
            old_pid
        )  # whatever it still sends is dropped unread: it is a stranger now
        self._dying[old_pid] = old_pidfd  # its exit (freeing its memory) is not waited for here
        return result

    def _reap_dying(self, deadline: float) -> None:
        """Close the pidfds of replaced holders that have exited; wait for them until ``deadline``
        (the next commit needs them gone from the cgroup; they were killed a step ago); 0: only
        look."""
        for pid, pidfd in list(self._dying.items()):
            if protocol.wait_readable(pidfd, deadline):  # readable once it has exited
                os.close(self._dying.pop(pid))

    def _fail(
        self, status: ExecStatus, note: str | None, result: ExecResult | None = None
    ) -> ExecResult:
        """Kill the step, wait for the holder to notice, restore files: the step never happened.
        A step known by its pidfd is killed through it and what it left is swept once the holder
        has reaped it (usually nothing: no freeze); an unknown one through the whole cgroup."""
        known = self._step_pidfd is not None
        if known:
            procs.kill_group_of(self._step_pidfd)  # its spare too, while the group's leader lives
            procs.kill_pidfd(self._step_pidfd)
        else:
            self._kill_step()
        while True:
            # an unknown step may not have been forked yet when it was killed: the holder forks
            # it a moment later, then waits for it and never reports (a run
            # timed out right after a failure would lose an honest trajectory); it is killed again
            # until the holder reports
            # pinned by `tests/sandbox/test_hostile_holder.py::`
            # `test_a_step_that_times_out_before_its_spare_is_forked_rolls_back_and_keeps_the_trajectory`  # noqa: E501
            look = (
                self._recovery_deadline
                if known
                else min(self._recovery_deadline, time.monotonic() + UNKNOWN_STEP_LOOK_S)
            )
            try:
                done = self._receive(look)
            except protocol.ReceiveTimeout:
                if known or time.monotonic() >= self._recovery_deadline:
                    raise _Lost("the holder process did not recover in time") from None
                self._kill_step()
                continue
            except protocol.BadMessage:
                continue  # the dead step's last bytes
            if done.sender_pid == self._holder_pid:
                break
            if not known:
                self._kill_step()
        if known:
            self._kill_step()
        self._forget_step()
        oom = (
            status is ExecStatus.CRASHED
            and self._cgroup is not None
            and self._cgroup.new_oom_kill()
        )
        self._restore_and_resume()
        result = result or ExecResult(status=status)
        notes = result.notes + ((note,) if note else ()) + (ROLLED_BACK,)
        return replace(
            result, status=ExecStatus.OOM if oom else status, rolled_back=True, notes=notes
        )

    def _after_crash(self, step_done: protocol.Message) -> ExecResult:
        wait_status = step_done.body.get("wait_status")
        fork_errno = step_done.body.get("fork_errno", 0)
        if (
            type(wait_status) is not int
            or not 0 <= wait_status < 1 << 16
            or type(fork_errno) is not int
            or not 0 <= fork_errno < 4096
        ):
            raise _Lost("the holder process sent a malformed exit status")
        self._kill_step()
        self._forget_step()
        oom = self._cgroup is not None and self._cgroup.new_oom_kill()
        self._restore_and_resume()
        if fork_errno:
            status = ExecStatus.OOM if fork_errno == errno.ENOMEM else ExecStatus.CRASHED
            note = (
                "the step could not start: its process could not be forked "
                f"({os.strerror(fork_errno)})"
            )
        elif oom:
            status, note = ExecStatus.OOM, "the step ran out of memory and was killed"
        elif os.WIFSIGNALED(wait_status):
            number = os.WTERMSIG(wait_status)
            name = (
                signal.Signals(number).name
                if number in signal.valid_signals()
                else f"signal {number}"
            )
            status, note = ExecStatus.CRASHED, f"the step's process died of {name}"
        else:
            code = os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else wait_status
            status, note = (
                ExecStatus.CRASHED,
                f"the step's process exited (status {code}) before finishing",
            )
        return ExecResult(status=status, rolled_back=True, notes=(note, ROLLED_BACK))

    def _restore_and_resume(self) -> None:
        charge_dir = self._cgroup.charge_dir if self._cgroup is not None else None
        try:
            with self.service.restore_writer(
                charge_dir,
                self._recovery_deadline,
                self._interrupt,
                self._files.owner,
                give_up=self._escalated,
                on_full=self._measure_restore_excess,
            ) as writer:
                self._files.restore(
                    self._recovery_deadline, before_writing=self._freeze, writer=writer
                )
        except InterruptedError:
            raise _Closing() from None
        except (files.DeadlinePassed, files.SnapshotBroken, OSError) as exc:
            raise _Lost(f"the working directory could not be restored ({exc})") from None
        finally:
            self._memory.restore_excess = 0
            self._thaw()
        if not self._resume(self._recovery_deadline):
            raise _Lost("the sandbox's holder process is gone after a failed step")

    def _freeze(self) -> None:
        """Stop every process of the trajectory before its files are touched (where a freezer
        exists)."""
        if self._closed:
            raise _Closing()
        if (
            self._cgroup is not None
            and self._cgroup.can_freeze
            and not self._cgroup.freeze(
                self._recovery_deadline, give_up=lambda: self._closed or self._escalated()
            )
        ):
            if self._closed:
                raise _Closing()
            if self._escalated():
                raise _Lost("its processes were killed for the service's memory")
            raise _Lost("the trajectory's processes could not be frozen in time")

    def _escalated(self) -> bool:
        """The OOM arbiter has killed every process of the trajectory (it is lost): a restore or
        freeze in progress stops rather than wait for memory or for processes that are dying."""
        return self._memory.escalated

    def _thaw(self) -> None:
        if self._cgroup is not None:
            self._cgroup.thaw()

    def _resume(self, deadline: float) -> bool:
        """Let the holder fork its next spare step process (it waits for this after a failure)."""
        try:
            protocol.send(
                self._conn, {"op": "resume"}, deadline=deadline, interrupt_fd=self._interrupt
            )
        except protocol.Interrupted:
            raise _Closing() from None
        except (OSError, protocol.SendTimeout):
            return False
        return True

    def _kill_step(self) -> None:
        """SIGKILL every process of the trajectory but the holder (the step and what it started)."""
        if self._step_pidfd is not None:
            procs.kill_group_of(self._step_pidfd)  # first: the group is found through its leader
            procs.kill_pidfd(self._step_pidfd)
        if self._cgroup is not None:
            self._cgroup.kill_all(
                except_pid=self._holder_pid,
                timeout_s=max(0.5, self._recovery_deadline - time.monotonic()),
            )

    def _forget_step(self) -> None:
        with self._step_lock:
            if self._step_pidfd is not None:
                os.close(self._step_pidfd)
            if self._step_pid is not None:
                self._reader.forget(self._step_pid)
            self._step_pid = self._step_pidfd = None
            self._step_phase = "idle"
            self._memory.not_committed()  # answered, then failed (refused)

    def _lose(self, why: str) -> ExecResult:
        """Give the trajectory up: kill all its processes and hand its working directory to the
        service's remover (a lost trajectory is out of the OOM arbiter's ranking, so the files a
        failed step left there kept the service full until close(), and an honest neighbour paid);
        later steps return crashed. Pinned by
        `tests/sandbox/test_hostile_holder.py::test_a_lost_trajectorys_files_go_at_once_not_at_close`."""
        self._lost = f"{why}; the trajectory's state is lost: start a new sandbox"
        self._kill_all(
            timeout_s=min(5.0, max(0.5, self._recovery_deadline - time.monotonic()))
        )  # run's bound
        with contextlib.suppress(OSError):
            self.service.remover.discard(self.workdir, inline_s=0.0)  # within the run's bound too
        if self._files is not None:  # its own tmpfs, where it has one, goes with its processes
            self._files.drop_workdir()
        return ExecResult(status=ExecStatus.CRASHED, notes=(self._lost,))

    def _kill_all(self, timeout_s: float = 5.0) -> None:
        if self._holder_pidfd is not None:
            procs.kill_group_of(self._holder_pidfd)
            procs.kill_pidfd(self._holder_pidfd)
        if self._step_pidfd is not None:
            procs.kill_pidfd(self._step_pidfd)
        if self._cgroup is not None:
            self._cgroup.kill_all(timeout_s=timeout_s)

    # ----------------------------------------------------------------- lifecycle
    @property
    def alive(self) -> bool:
        return not self._closed and self._lost is None

    def close(self, wait_s: float = 15.0) -> None:
        """Kill every process of the trajectory and remove its files. Idempotent.

        Safe while another thread's `run` is in flight: that `run` is woken, kills its step and
        returns ``crashed`` ("closed while this step ran"); only then (or after ``wait_s``) are
        the holder killed and the socket and files released.

        Does nothing in a forked child of the controller (its finalizers call this at exit): the
        trajectory is the parent's, and the child shares its interrupt eventfd.
        """
        if self._released or os.getpid() != self._owner_pid:
            return
        self.begin_closing()
        step_finished = self._lock.acquire(timeout=wait_s)
        try:
            with self._release_lock:  # two threads closing at once release once
                if not self._released:
                    self._release()
        finally:
            if step_finished:
                self._lock.release()

    def begin_closing(self) -> None:
        """Refuse new runs and wake the one in flight (it returns ``crashed``, "closed while
        this step ran"); `close` then waits for it and releases everything. Nothing in a forked
        child of the controller (the eventfd is shared)."""
        if self._closed or os.getpid() != self._owner_pid:
            return
        self._closed = True
        if self._interrupt is not None:
            os.eventfd_write(self._interrupt, 1)

    def _release(self) -> None:
        self._released = True
        try:
            self._kill_all()
            for pidfd in self._dying.values():
                os.close(pidfd)
            self._dying.clear()
            if self._cgroup is not None:
                self._cgroup.remove()
            if self._holder_pidfd is not None:
                os.close(self._holder_pidfd)
                self._holder_pidfd = None
            if self._conn is not None:
                self._conn.close()
            if self._interrupt is not None:
                os.close(self._interrupt)
                self._interrupt = None
            if self._files is not None:
                self._files.close()
                files.remove_tree(self._files.store)
            if getattr(self, "_dir", None):  # (none when its uid could not be had)
                self.service.remover.discard(
                    self._dir
                )  # what a hostile step left is no wait for close()
            if getattr(self, "_inputs_dir", None):
                files.remove_tree(self._inputs_dir)
        finally:
            if self._registered:
                self.service.released()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor_now(), self.close)

    def __del__(self) -> None:
        """A sandbox dropped unclosed is closed by `_close_dropped`'s thread, never here: the
        garbage collector runs this in whatever code allocated, with whatever locks it holds
        and file-system identity it has (inside a neighbour's commit, holding the store budget's
        lock that close() takes, it would deadlock every commit of the service; inside a restore
        it would run as that trajectory and leave its cgroups and files).
        Pinned by
        `tests/sandbox/test_api.py::test_a_sandbox_dropped_unclosed_is_closed_by_a_thread_of_its_own_not_where_it_was_collected`."""
        try:
            if not self._released and os.getpid() == self._owner_pid:
                _dropped.put(self)  # SimpleQueue.put is reentrant: safe wherever the collector ran
        except Exception:  # noqa: BLE001, S110 - made only in part, or the interpreter shutting down
            pass


_dropped: queue.SimpleQueue[Sandbox] = (
    queue.SimpleQueue()
)  # collected unclosed, for `_close_dropped`
_closer_lock = threading.Lock()
_closer: threading.Thread | None = None


def _start_closer() -> None:
    """The thread that closes dropped sandboxes (once per process: a forked child starts its
    own)."""
    global _closer
    with _closer_lock:
        if _closer is None or not _closer.is_alive():
            _closer = threading.Thread(
                target=_close_dropped, name="codedance-sandbox-closer", daemon=True
            )
            _closer.start()


def _close_dropped() -> None:
    while True:
        sandbox = _dropped.get()
        with contextlib.suppress(Exception):
            sandbox.close()
        del sandbox
