"""The processes inside the jail: the zygote, each trajectory's holder, and each step.

Fork chain (``docs/sandbox.md``):
- The **zygote** (``python -m codedance.sandbox.jail.runtime --control-fd N``) imports numpy, PIL,
  cv2 and matplotlib (Agg) once, installs the capture hooks, ``gc.freeze()``s, then serves spawn
  requests on its control socket (SOCK_SEQPACKET; each request carries the trajectory's socket
  as a passed file descriptor). It never runs user code and never sees trajectory traffic.
- A **holder** is forked per trajectory: it closes everything but its socket, lowers its rlimits,
  switches to the trajectory's own uid (or, under a controller that is not root, enters a user
  and mount namespace of its own where only its working directory is visible: ``private_view``),
  forbids new privileges and loads the seccomp filter (``guards``), opens the input images, and
  says ``ready``. Then it waits for ``run`` messages.
- Each **step** is a fresh ``fork()`` of the holder (libc's, as a continuation of its program:
  `_fork_continuation`), forked ahead as a *spare* that announces
  itself (``spare``) at once and then waits for its code; it runs the snippet,
  sends its ``result``, and at once acts as the next holder: it forks its own spare step process
  (off the critical path of the next step, while the controller checks and checkpoints) and waits
  for it. The controller decides: to commit, it kills the old holder; to roll back, it kills this
  step (and its spare), and the untouched old holder reports ``step_done`` and carries on. That
  rolls back memory exactly, for free. No verdict is ever sent into the jail.

The controller alone decides and kills (timeouts included): nothing here is trusted to enforce
anything, because user code can tamper with this process. Tampering is undone where cheap: the
builtins, the capture hooks, the streams and the working directory are reset before each step.
"""

from __future__ import annotations

import argparse
import builtins
import ctypes
import gc
import io
import json
import os
import signal
import socket
import sys
import threading
import time

from codedance.sandbox import protocol
from codedance.sandbox.jail.hooks import Hooks, preload

_LIBC = ctypes.CDLL(None)
_LIBC_FORK = ctypes.PyDLL(None, use_errno=True).fork  # PyDLL: the GIL stays held, as in os.fork()

_MAX_CONTROL_MESSAGE = 1 << 16


def zygote_main(
    control_fd: int, hide_processes: bool = False, private_views: str | None = None
) -> None:
    from codedance.sandbox.jail import guards, private_view

    hidden: bool | str = False  # True, or why not
    if hide_processes:  # only ever inside bwrap's own mount namespace
        failure = guards.hide_other_processes()
        hidden = True if failure is None else failure
    views: bool | str = False  # True, or why not (``private_views``: the work root, to try them on)
    if private_views:  # before SIGCHLD is ignored below: the probe waits for its child
        failure = private_view.probe(private_views)
        views = True if failure is None else failure
    pristine_builtins = preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # holders are reaped by the kernel ...
    _LIBC.prctl(36, 1, 0, 0, 0)  # ... and so are orphaned steps: PR_SET_CHILD_SUBREAPER
    control = socket.socket(fileno=control_fd)
    gc.collect()
    gc.freeze()
    protocol_send_packet(
        control,
        {
            "op": "zygote_ready",
            "pid": os.getpid(),
            "processes_hidden": hidden,
            "private_views": views,
        },
    )
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, _MAX_CONTROL_MESSAGE, 1)
        except OSError:
            os._exit(0)
        if not data:
            os._exit(0)
        request = json.loads(data)
        if request.get("op") != "spawn" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            protocol_send_packet(control, {"op": "error", "message": "bad request"})
            continue
        pid = os.fork()
        if pid == 0:
            control.close()
            _holder_main(fds[0], request, pristine_builtins)
            os._exit(0)
        os.close(fds[0])
        protocol_send_packet(control, {"op": "spawned", "id": request["id"], "pid": pid})


def protocol_send_packet(sock: socket.socket, body: dict) -> None:
    sock.send(json.dumps(body).encode())


def _holder_main(fd: int, request: dict, pristine_builtins: dict) -> None:
    from codedance.sandbox.jail import guards, private_view

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.closerange(3, fd)
    os.closerange(fd + 1, 1 << 16)
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    os.close(null)
    conn = socket.socket(fileno=fd)
    os.setsid()
    layers: dict[str, str] = {}
    try:
        limits = request["limits"]
        if request.get("private_view"):  # before RLIMIT_NPROC: the kernel also caps every process
            # of the uid in the jail at the limit the namespace's creator had (all trajectories)
            tmpfs = private_view.WorkdirTmpfs(**request["workdir_tmpfs"])
            private_view.enter(request["work_root"], request["workdir"], request["images"], tmpfs)
            layers["private_view"] = "in force"
        own_count = request.get("uid") is not None or request.get("private_view")
        guards.apply_rlimits(
            address_space=_address_space_now() + limits["memory"],
            file_size=limits["file_size"],
            open_files=limits["open_files"],
            # the kernel counts processes per uid and user namespace: this trajectory's alone
            # where it has a uid or a user namespace of its own, else every trajectory's
            processes=limits["processes"] if own_count else 0,
        )
        layers["rlimits"] = "in force"
        if request.get("uid") is not None:
            guards.drop_privileges(request["uid"], request["gid"])
            layers["uid"] = f"uid {request['uid']}"
        os.chdir(request["workdir"])
        _remember_cwd()
        os.umask(0o077)
        os.environ.clear()
        os.environ.update(request["env"])
        guards.forbid_new_privileges()
        if request.get("seccomp"):
            try:
                guards.install_seccomp(refuse_memfd=request.get("refuse_memfd", False))
                layers["seccomp"] = "in force"
            except Exception as exc:  # noqa: BLE001 - reported to the controller, which decides
                layers["seccomp_error"] = f"{type(exc).__name__}: {exc}"
        namespace = _initial_namespace(request["images"])
    except Exception as exc:  # noqa: BLE001 - a failed start is reported to the controller
        protocol.send(conn, {"op": "ready", "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        return
    protocol.send(conn, {"op": "ready", "ok": True, "layers": layers})
    _release_free_memory()
    _serve(conn, namespace, request, pristine_builtins)


def _address_space_now() -> int:
    """This process's virtual size: the imaging libraries map far more than they use."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


class PositionalFile(io.RawIOBase):
    """A read-only file that keeps its position in the process and reads with ``pread``.

    The holder and each step forked from it share the open file description, hence its offset:
    with plain ``open()``, a step that read the file (then failed) would leave the holder's next
    read at the wrong place. Positional reads share nothing.
    """

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_RDONLY)
        self._position = 0
        self._size = os.fstat(self._fd).st_size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = os.pread(self._fd, len(buffer), self._position)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def _initial_namespace(image_files: list[str]) -> dict:
    """``input_image``/``images`` opened lazily: pixels are decoded by the first step that uses
    them (and kept if that step succeeds), so an idle trajectory holds neither pixels nor file
    bytes. Each is checked first (header, size against the decompression-bomb limit, PNG
    checksums)."""
    from PIL import Image

    images = []
    for index, path in enumerate(image_files):
        try:
            with Image.open(path) as probe:
                probe.verify()
            images.append(Image.open(io.BufferedReader(PositionalFile(path))))
        except Exception as exc:
            raise ValueError(
                f"input image {index} could not be opened: {type(exc).__name__}: {exc}"
            ) from exc
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    paths = [os.path.abspath(path) for path in image_files]
    namespace.update(images=images, image_paths=paths)
    if images:
        namespace.update(input_image=images[0], input_image_path=paths[0])
    return namespace


def _serve(conn: socket.socket, namespace: dict, request: dict, pristine_builtins: dict) -> None:
    """The holder forks its next step process *before* the code arrives (the holder does not
    change while idle, so the spare is an exact copy): the fork is off the step's critical path,
    and so is the spare's preparation (builtins, hooks, output capture), done before it reads
    the code. A step that has sent its result forks its own spare straight away, before the
    controller's verdict (if it rolls back, the controller kills both). Only the spare reads the
    socket; the holder waits for it, reports how it ended, and forks the next spare once the
    controller says ``resume``: at the start (after it has put the holder in its cgroup, so every
    step process is inside) and after a failure (so the controller's kill of the failed step's
    processes never races with a new spare)."""
    reader = protocol.Reader(conn, max_bytes=64 << 20)
    wait_for_resume = (
        True  # at start (the controller first moves us into our cgroup) and after failures
    )
    pages = _resident_pages()  # the holder's size, which its spare starts from
    while True:
        if wait_for_resume:  # a "run" sent to a spare that died before reading it is stale: dropped
            _expect(reader, "resume", stale=("run",))
        try:
            pid = _fork_continuation()
        except (
            OSError
        ) as exc:  # no memory (the service is full) or pids left: a step that could not start
            protocol.send(conn, {"op": "step_done", "wait_status": 0, "fork_errno": exc.errno or 0})
            wait_for_resume = True
            continue
        if pid == 0:
            protocol.send(conn, {"op": "spare"})  # before the code arrives: off the step's path
            step = _PreparedStep(
                namespace, request["limits"], request["workdir"], pristine_builtins
            )
            run = _expect(reader, "run")
            step.run(conn, run["code"])
            pages = step.finish(pages)
            wait_for_resume = False  # the holder from now on, unless the controller kills it
            continue
        reader.forget_buffered()  # anything read ahead (the next run) belongs to the spare
        _, status = os.waitpid(pid, 0)
        protocol.send(conn, {"op": "step_done", "wait_status": status})
        wait_for_resume = True


def _fork_continuation() -> int:
    """``fork()`` for the next step: a continuation of this process's program, not a new program.

    ``os.fork()`` runs the interpreter's after-fork work in the child, and for a step that is
    wrong as well as slow. Wrong: a step continues its holder as a notebook's next cell continues
    its kernel, but the ``os.register_at_fork`` hooks treat it as a new process: ``random``
    re-seeded its generator in every step, so ``random.seed(0)`` held for one step only, and a
    rolled-back step's draws were not rolled back. Slow: the hooks' and the runtime's first
    touches of the interpreter's pages cost ~230 copy-on-write faults (~0.85 ms) in every step.

    libc's ``fork()`` alone is sound when this process has one thread: the locks that the
    after-fork work renews (the GIL's among them) cannot be held by a thread the child lacks,
    and the thread's identity is unchanged. An honest holder has one (a commit refuses a step
    that leaves threads, and checks the holder too), but this fork comes right after the step's
    reply, before that check, and a thread the snippet joined may not have ended in the kernel
    yet (often, on 3.11; a libc fork beside a thread waiting for the GIL can hang the child):
    so the kernel's count is read first (``/proc/self/task``), waited
    for a few milliseconds, and ``os.fork()`` is used while it is not 1.
    Code a step runs that forks (``os.fork``, multiprocessing) gets the full after-fork work.
    Not run between steps, then: every library's after-fork hook (``random``'s re-seed,
    ``threading``'s and ``logging``'s lock renewals; once a snippet imports them, torch's thread
    set-up, importlib_metadata's, fsspec's, filelock's, huggingface_hub's and IPython's
    clean-ups); matplotlib's, the one in the preloaded libraries that matters (its cached fonts
    share file offsets across the chain), is done by each step itself (`_drop_open_fonts`)."""
    if not _one_thread():
        return os.fork()
    pid = _LIBC_FORK()
    if pid < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return pid


def _one_thread(wait_s: float = 0.005) -> bool:
    """Whether the kernel counts one thread in this process, waiting up to ``wait_s`` for a
    thread that is ending (a directory of a process's threads has 2 links plus one per thread);
    False where /proc cannot say."""
    deadline = time.monotonic() + wait_s
    try:
        while os.stat("/proc/self/task").st_nlink != 3:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0002)
    except OSError:
        return False
    return True


def _expect(reader: protocol.Reader, op: str, stale: tuple[str, ...] = ()) -> dict:
    """The next message, which must be ``op`` (messages in ``stale`` are skipped); anything else
    (or a closed socket) ends this process."""
    while True:
        try:
            message = reader.receive()
        except protocol.ProtocolError:
            os._exit(0)
        if message.body.get("op") not in stale:
            break
    if message.body.get("op") != op:
        os._exit(0)
    return message.body


class _PreparedStep:
    """A spare step process, made ready before its code arrives: the builtins and capture hooks
    put back, descriptors 1 and 2 pointed at memfds of its own, the image files listed. All of
    this is undone or replaced by the next spare, so doing it early changes nothing observable."""

    def __init__(self, namespace: dict, limits: dict, workdir: str, pristine_builtins: dict):
        from codedance.sandbox.jail import capture

        self.namespace, self.limits, self.workdir = namespace, limits, workdir
        self.pristine_builtins = pristine_builtins
        _reenter_cwd()
        _restore_builtins(pristine_builtins)
        namespace["__builtins__"] = builtins
        Hooks.install()
        self.collector = capture.ImageCollector(
            limits["max_images"], limits["max_pixels"], limits["max_image_bytes"]
        )
        self.out = capture.BoundedText(limits["output_head"], limits["output_tail"])
        self.err = capture.BoundedText(limits["output_head"], limits["output_tail"])
        self.captured = [_capture_file(n) for n in (1, 2)]  # this process's alone
        for target, handle in zip((1, 2), self.captured):
            os.dup2(handle, target)
        self.images_before = capture.list_image_files(workdir)

    def run(self, conn: socket.socket, code: str) -> None:
        """Run the snippet and send its result; returns only if it succeeded (a failed step
        waits to be killed)."""
        from codedance.sandbox.jail import capture, execution

        os.setpgid(0, 0)  # its own group from now on (an idle spare stays in its parent's group)
        Hooks.collector = self.collector
        sys.stdout, sys.stderr = self.out, self.err
        reply: dict = {"op": "result", "status": "ok"}
        try:
            value = execution.run_snippet(code, self.namespace)
            capture.show_value(value, self.collector, self.out)
        except BaseException as exc:  # noqa: BLE001 - every failure is reported, none escapes
            failure = execution.describe_failure(exc, code, max_chars=self.limits["error_chars"])
            reply["status"] = "oom" if isinstance(exc, MemoryError) else "error"
            reply["error"] = vars(failure)
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        _remember_cwd()
        _restore_builtins(
            self.pristine_builtins
        )  # this process may become the holder: keep it working
        _stop_timers()  # an alarm left by the snippet would otherwise kill it once it is the holder
        try:
            reply.update(self._collect())
        except BaseException as exc:  # noqa: BLE001 - e.g. MemoryError while encoding an image
            reply.update(
                status="oom" if isinstance(exc, MemoryError) else "error",
                stdout=self.out.value(),
                stderr=self.err.value(),
                images=[],
                notes=[f"capturing the step's output failed: {type(exc).__name__}: {exc}"],
            )
            self.collector.images.clear()
        _release_captured_output(self.captured)
        if reply["status"] == "ok":
            leftover = _leftover_work()
            if leftover:
                reply["status"] = "refused"
                reply["notes"].append(leftover)
        reply["notes"] = [note[: protocol.NOTE_CHARS] for note in reply["notes"]][
            : protocol.MAX_NOTES
        ]
        if len(code) > execution.CONTROLLER_PARSE_CHARS:  # the controller does not parse it
            reply["executed_nothing"] = execution.executes_nothing(code)
        protocol.send(conn, reply, [png for png, _, _, _ in self.collector.images])
        while reply["status"] != "ok":  # rolled back: the controller kills this process (exiting
            signal.pause()  # first would leave its result without a sender to credit)

    def finish(self, pages_at_start: int) -> int:
        """Once it has succeeded (it is the holder now): give back what the step grew by 1 MB+,
        to keep the next holder's idle footprint small; returns the resident pages now."""
        self.collector = self.out = self.err = None
        pages = _resident_pages()
        if pages - pages_at_start > 256:
            _release_free_memory()
            pages = _resident_pages()
        return pages

    def _collect(self) -> dict:
        import matplotlib.pyplot as plt

        from codedance.sandbox.jail import capture

        _LIBC.fflush(None)
        for stream, handle in zip((self.out, self.err), self.captured):
            text, size = capture.read_head(handle, self.limits["output_head"])
            if text:
                cut = (
                    f"\n[... {size - len(text.encode())} bytes cut ...]"
                    if size > len(text.encode())
                    else ""
                )
                stream.write(text + cut)
        collector = self.collector
        figures = plt.get_fignums()
        for number in figures:
            collector.add_figure(plt.figure(number), "open figure")
        if figures:
            plt.close("all")
        _drop_open_fonts()
        after = capture.list_image_files(self.workdir)
        for path, stamp in sorted(after.items()):
            if self.images_before.get(path) != stamp:
                try:
                    collector.add_file(os.path.join(self.workdir, path), f"file {path}")
                except Exception as exc:  # noqa: BLE001 - a broken file is reported, not fatal
                    collector.notes.append(f"could not read saved image {path}: {exc}")
        Hooks.collector = None
        sources = [{"width": w, "height": h, "source": s} for _, w, h, s in collector.images]
        return {
            "stdout": self.out.value(),
            "stderr": self.err.value(),
            "images": sources,
            "notes": collector.finish_notes(),
        }


def _drop_open_fonts() -> None:
    """Close the fonts matplotlib keeps open (its ``_get_font`` cache), so no later step finds
    them: an open font file's offset is shared by every process of the chain, so a step that
    failed after reading glyphs would leave the next step's copy reading at the wrong place.
    (``os.fork()`` would empty the cache in each child; the steps' fork does not,
    `_fork_continuation`.) Free when the step drew no text."""
    from matplotlib import font_manager

    if font_manager._get_font.cache_info().currsize:
        font_manager._get_font.cache_clear()


_cwd = ""  # the directory the holder works in, by path (the working directory at first)


def _remember_cwd() -> None:
    global _cwd
    try:
        _cwd = os.getcwd()
    except OSError:  # the snippet removed its own working directory: keep the last one known
        pass


def _reenter_cwd() -> None:
    """A failed step that removed and re-created the directory the holder works in (``rmtree``
    of a committed ``chdir`` target) left the holder in a deleted directory, which the rollback
    re-created under the same path: go back in by path (otherwise every relative path
    fails from then on).
    Pinned by
    `tests/sandbox/test_contract.py::test_the_holder_goes_back_into_its_directory_when_a_failed_step_re_created_it`."""
    try:
        here, there = os.stat("."), os.stat(_cwd)
        if (here.st_ino, here.st_dev) != (there.st_ino, there.st_dev):
            os.chdir(_cwd)
    except OSError:
        pass


def _leftover_work() -> str | None:
    """Why this step cannot become the holder (threads or child processes still running), or
    None. Checked here because the spare this process forks next is a child of its own: the
    controller then allows exactly one child of the step (it still refuses anything else)."""
    if threading.active_count() > 1:
        return "the step left threads running; join every thread before the step ends"
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return None
        if pid == 0:
            return "the step left processes running; wait for every child process before it ends"


def _capture_file(number: int) -> int:
    """A file of this step's own for its descriptor ``number``: a memfd, or where the filter
    refuses them (no memory cgroup counts their pages) an unnamed file in the working directory,
    bounded with the trajectory's other files (its own tmpfs in a private view). Never a named
    one: the controller may be saving the directory as the spare prepares (the service refuses
    memfds only where the file system takes ``O_TMPFILE``)."""
    try:
        return os.memfd_create(f"fd{number}", os.MFD_CLOEXEC)
    except PermissionError:
        return os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)


def _release_captured_output(captured: list[int]) -> None:
    """Point descriptors 1 and 2 back at /dev/null and close the step's memfds: a step that
    commits becomes the holder, which must not keep (nor leak) them step after step."""
    null = os.open(os.devnull, os.O_WRONLY)
    for target in (1, 2):
        os.dup2(null, target)
    os.close(null)
    for handle in captured:
        try:
            os.close(handle)
        except OSError:  # the snippet closed it itself
            pass


def _release_free_memory() -> None:
    """Return freed heap pages to the kernel (glibc keeps them otherwise)."""
    try:
        _LIBC.malloc_trim(0)
    except AttributeError:  # not glibc
        pass


def _resident_pages() -> int:
    with open("/proc/self/statm", "rb") as handle:
        return int(handle.read().split()[1])


def _restore_builtins(pristine: dict) -> None:
    builtins.__dict__.clear()
    builtins.__dict__.update(pristine)


def _stop_timers() -> None:
    signal.alarm(0)
    for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
        signal.setitimer(timer, 0)


def main() -> None:
    parser = argparse.ArgumentParser(
        description="codedance sandbox zygote (started by the controller)"
    )
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument(
        "--hide-processes",
        action="store_true",
        help="remount the jail's /proc so no trajectory sees another's processes",
    )
    parser.add_argument(
        "--private-views",
        metavar="WORK_ROOT",
        help="give each holder a mount view of its own working directory alone (private_view)",
    )
    args = parser.parse_args()
    zygote_main(args.control_fd, args.hide_processes, args.private_views)


if __name__ == "__main__":
    main()
