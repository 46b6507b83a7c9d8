"""`Sandbox`: one trajectory's persistent, transactional Python, run in the service's jail.

The controller side of the fork chain (see ``runtime``). This class alone decides a step's fate
and enforces it from outside the jail:
- the wall-clock timeout: it waits for the step's result until the deadline, then SIGKILLs every
  process of the step (the trajectory's cgroup, or the step's pidfd and process group);
- success: the step's process must be the only one left beside the holder, with one thread, and
  the working directory within its limits; then its files are checkpointed, it is told to become
  the holder and the old holder is killed;
- failure (error, timeout, crash, OOM, refusal): the step's processes are killed, the working
  directory is restored from the last checkpoint and the old holder, untouched, carries on.
Senders are identified by the kernel (``SCM_CREDENTIALS``) and processes are killed through
pidfds, so a process in the jail can neither impersonate another nor have a reused pid killed.

Not handled: a holder killed from outside (for example by the host's OOM killer when no memory
cgroup is in force) loses the trajectory's state; later steps then return ``crashed`` with a note
saying so. One step runs at a time per sandbox; concurrent calls wait their turn.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Executor
from dataclasses import replace
from typing import Self

from codedance.sandbox import files, layout, procs, protocol
from codedance.sandbox.cgroups import TrajectoryCgroup
from codedance.sandbox.execution import executes_nothing
from codedance.sandbox.inputs import ImageInput
from codedance.sandbox.isolation import Isolation
from codedance.sandbox.layout import Limits
from codedance.sandbox.service import SandboxService, ServiceError, default_service
from codedance.types import ExecResult, ExecStatus


class SandboxClosed(RuntimeError):
    """The sandbox was closed; create a new one to run more code."""


class Sandbox:
    """A private, persistent Python namespace and working directory for one trajectory.

    >>> with Sandbox(images=[]) as sb:  # doctest: +SKIP
    ...     sb.run("x = 6 * 7; print(x)").stdout
    '42\\n'
    """

    def __init__(self, images: Iterable[ImageInput] = (), *, timeout_s: float = 15.0,
                 limits: Limits | None = None, require: str | tuple[str, ...] | None = None,
                 service: SandboxService | None = None, executor: Executor | None = None,
                 start_timeout_s: float = 30.0):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self.limits = limits or Limits()
        self.service = service or default_service()
        self._executor = executor
        self._lock = threading.Lock()
        self._closed = False
        self._lost: str | None = None
        self._cgroup: TrajectoryCgroup | None = None
        self._holder_pidfd: int | None = None
        self._conn: socket.socket | None = None
        self._interrupt: int | None = None  # an eventfd: `close` wakes a step's blocked receive
        self.service.isolation.require(require)  # host-level layers first, before any work
        self.service.register(self)
        self.uid = self.service.allocate_uid()
        self._dir = os.path.join(self.service.work_root, f"t{secrets.token_hex(6)}")
        try:
            self._setup(list(images), start_timeout_s)
        except BaseException:
            self.close()
            raise
        self.isolation: Isolation = self._isolation
        self.isolation.require(require)

    # ----------------------------------------------------------------- setup
    def _setup(self, images: list[ImageInput], start_timeout_s: float) -> None:
        dirs = layout.prepare(self._dir, images, self.uid)
        self.workdir, self._iodir = dirs.workdir, dirs.iodir
        store = os.path.join(self.service.store_root, os.path.basename(self._dir))
        self._files = files.WorkdirSnapshot(
            self.workdir, store, protected=dirs.protected, owner=dirs.owner,
            max_entries=self.limits.workdir_files, max_bytes=self.limits.workdir_bytes,
        )  # fmt: skip
        if self.service.cgroup_layout is not None:
            self._cgroup = TrajectoryCgroup(self.service.cgroup_layout, memory_bytes=self.limits.memory,
                                            max_processes=self.limits.processes)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn = ours
        self._interrupt = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._reader = protocol.Reader(ours, max_bytes=self.limits.max_message, with_credentials=True,
                                       interrupt_fd=self._interrupt)
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
        if not ready.body.get("ok"):
            raise ValueError(f"the sandbox could not start: {ready.body.get('error')}")
        self._holder_pid = ready.sender_pid
        self._holder_pidfd = os.pidfd_open(self._holder_pid)
        if self._cgroup is not None:
            self._cgroup.add(self._holder_pid)
        if not self._resume():  # the holder forks its first spare step process only now
            raise ServiceError("the sandbox's holder exited right after starting")
        layers = ready.body.get("layers", {})
        base = self.service.isolation
        missing = dict(base.missing)
        if base.seccomp and "seccomp" not in layers:
            missing["seccomp"] = layers.get("seccomp_error", "the filter did not load")
        self._isolation = replace(
            base, seccomp=base.seccomp and "seccomp" in layers, missing=tuple(missing.items())
        )

    # ----------------------------------------------------------------- running
    def run(self, code: str, timeout_s: float | None = None) -> ExecResult:
        """Run one snippet as a transaction; see the module docstring for what each status means."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        timeout = self.timeout_s if timeout_s is None else timeout_s
        if timeout <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout}")
        with self._lock:
            if self._closed:
                raise SandboxClosed("this sandbox is closed; create a new Sandbox to run more code")
            if self._lost is not None:
                return ExecResult(status=ExecStatus.CRASHED, notes=(self._lost,), rolled_back=False)
            started = time.monotonic()
            result = self._step(code, timeout, started)
            if self._closed and not result.ok:
                result = ExecResult(status=ExecStatus.CRASHED, notes=("the sandbox was closed while this step ran",))
            return replace(result, duration_s=time.monotonic() - started,
                           executed_nothing=executes_nothing(code))

    async def arun(self, code: str, timeout_s: float | None = None) -> ExecResult:
        """`run` without blocking the event loop (in the pool's bounded executor when there is one)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.run, code, timeout_s)

    def _step(self, code: str, timeout: float, started: float) -> ExecResult:
        deadline = started + timeout
        try:
            protocol.send(self._conn, {"op": "run", "code": code})
            message = self._reader.receive(deadline)
            if message.body.get("op") == "step_done" and message.sender_pid == self._holder_pid:
                return self._after_crash(message.body.get("wait_status", 0))  # died before starting
            if message.body.get("op") != "started" or message.sender_pid == self._holder_pid:
                return self._fail(ExecStatus.CRASHED, None, "the step did not start")
            step_pid = message.sender_pid
            step_pidfd = procs.open_pidfd(step_pid)  # None: already dead; the holder reports how
        except protocol.ReceiveTimeout:
            return self._fail(ExecStatus.TIMEOUT, None, f"the step did not start within {timeout:g} s")
        except (protocol.ProtocolError, OSError) as exc:
            return self._lose(f"the sandbox's holder process is gone ({exc})")
        try:
            message = self._reader.receive(deadline)
        except protocol.ReceiveTimeout:
            return self._fail(ExecStatus.TIMEOUT, step_pidfd,
                              f"the step ran past its {timeout:g} s limit and was stopped")
        except protocol.Interrupted:  # `close` from another thread; `run` writes the note
            self._kill_step(step_pidfd)
            return ExecResult(status=ExecStatus.CRASHED)
        except (protocol.PeerClosed, OSError) as exc:
            return self._lose(f"the sandbox's holder process is gone ({exc})")
        except protocol.ProtocolError as exc:
            return self._fail(ExecStatus.REFUSED, step_pidfd, f"the step's reply was refused: {exc}")
        if message.body.get("op") == "step_done" and message.sender_pid == self._holder_pid:
            if step_pidfd is not None:
                os.close(step_pidfd)
            return self._after_crash(message.body.get("wait_status", 0))
        if message.body.get("op") != "result" or message.sender_pid != step_pid:
            return self._fail(ExecStatus.CRASHED, step_pidfd, "the step sent an unexpected message")
        result = protocol.result_from_message(message)
        if result.status is ExecStatus.OK and step_pidfd is None:
            result = replace(result, status=ExecStatus.CRASHED, notes=result.notes + ("the step's process vanished",))
        if result.status is ExecStatus.OK:
            problem = self._commit_problem(step_pid)
            if problem is None:
                return self._commit(result, step_pid, step_pidfd)
            result = replace(result, status=ExecStatus.REFUSED, notes=result.notes + (problem,))
        return self._fail(result.status, step_pidfd, None, result)

    def _commit_problem(self, step_pid: int) -> str | None:
        if self._cgroup is not None and self._cgroup.pids() - {self._holder_pid, step_pid}:
            return "the step left processes running; wait for every child process before it ends"
        if procs.thread_count(step_pid) > 1:
            return "the step left threads running; join every thread before the step ends"
        try:
            self._files.checkpoint()
        except (files.LimitExceeded, OSError) as exc:
            return f"the working directory is over its limit: {exc}"
        return None

    def _commit(self, result: ExecResult, step_pid: int, step_pidfd: int) -> ExecResult:
        try:
            protocol.send(self._conn, {"op": "commit"})
        except OSError as exc:
            return self._lose(f"the step's process vanished while committing ({exc})")
        old = self._holder_pidfd
        self._holder_pid, self._holder_pidfd = step_pid, step_pidfd
        procs.kill_pidfd(old)
        protocol.wait_readable(old, time.monotonic() + 2.0)  # a pidfd turns readable at exit
        os.close(old)
        return result

    def _fail(self, status: ExecStatus, step_pidfd: int | None, note: str | None,
              result: ExecResult | None = None) -> ExecResult:
        """Kill the step, wait for the holder to notice, restore files: the step never happened."""
        self._kill_step(step_pidfd)
        try:
            done = self._reader.receive(time.monotonic() + 10.0)
            while done.body.get("op") != "step_done" or done.sender_pid != self._holder_pid:
                done = self._reader.receive(time.monotonic() + 10.0)
        except protocol.ProtocolError as exc:
            return self._lose(f"the sandbox's holder process did not recover ({exc})")
        if status is ExecStatus.CRASHED and self._cgroup is not None and self._cgroup.new_oom_kill():
            status = ExecStatus.OOM
        self._files.restore()
        if not self._resume():
            return self._lose("the sandbox's holder process is gone after a failed step")
        result = result or ExecResult(status=status)
        notes = result.notes + ((note,) if note else ()) + ("state rolled back to before this step",)
        return replace(result, status=status, rolled_back=True, notes=notes)

    def _after_crash(self, wait_status: int) -> ExecResult:
        if self._cgroup is not None:
            self._cgroup.kill_all(except_pid=self._holder_pid)
        oom = self._cgroup is not None and self._cgroup.new_oom_kill()
        self._files.restore()
        if not self._resume():
            return self._lose("the sandbox's holder process is gone after a crashed step")
        if oom:
            status, note = ExecStatus.OOM, "the step ran out of memory and was killed"
        elif os.WIFSIGNALED(wait_status):
            number = os.WTERMSIG(wait_status)
            status, note = ExecStatus.CRASHED, f"the step's process died of {signal.Signals(number).name}"
        else:
            code = os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else wait_status
            status, note = ExecStatus.CRASHED, f"the step's process exited (status {code}) before finishing"
        return ExecResult(status=status, rolled_back=True, notes=(note, "state rolled back to before this step"))

    def _resume(self) -> bool:
        """Let the holder fork its next spare step process (it waits for this after a failure)."""
        try:
            protocol.send(self._conn, {"op": "resume"})
        except OSError:
            return False
        return True

    def _kill_step(self, step_pidfd: int | None) -> None:
        if step_pidfd is not None:
            procs.kill_pidfd(step_pidfd)
        if self._cgroup is not None:
            self._cgroup.kill_all(except_pid=self._holder_pid)
        elif step_pidfd is not None:
            procs.kill_group_of(step_pidfd)
        if step_pidfd is not None:
            os.close(step_pidfd)

    def _lose(self, why: str) -> ExecResult:
        self._lost = f"{why}; the trajectory's state is lost: start a new sandbox"
        return ExecResult(status=ExecStatus.CRASHED, notes=(self._lost,))

    # ----------------------------------------------------------------- lifecycle
    @property
    def alive(self) -> bool:
        return not self._closed and self._lost is None

    def close(self, wait_s: float = 15.0) -> None:
        """Kill every process of the trajectory and remove its files. Idempotent.

        Safe while another thread's `run` is in flight: that `run` is woken, kills its step and
        returns ``crashed`` ("closed while this step ran"); only then (or after ``wait_s``) are
        the holder killed and the socket and files released.
        """
        if self._closed:
            return
        self._closed = True
        if self._interrupt is not None:
            os.eventfd_write(self._interrupt, 1)
        step_finished = self._lock.acquire(timeout=wait_s)
        try:
            self._release()
        finally:
            if step_finished:
                self._lock.release()

    def _release(self) -> None:
        if self._holder_pidfd is not None:
            procs.kill_group_of(self._holder_pidfd)
            procs.kill_pidfd(self._holder_pidfd)
            os.close(self._holder_pidfd)
            self._holder_pidfd = None
        if self._cgroup is not None:
            self._cgroup.remove()
        if self._conn is not None:
            self._conn.close()
        if self._interrupt is not None:
            os.close(self._interrupt)
            self._interrupt = None
        shutil.rmtree(self._dir, ignore_errors=True)
        if getattr(self, "_files", None) is not None:
            shutil.rmtree(self._files.store, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self.close)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
