"""A hostile holder: a committed step patches the runtime, then races the controller, forges
messages and breaks the protocol. One test per class of attack.

Every sandbox here comes from the ``jail`` fixture (the jail's PID namespace and seccomp are
asserted before any hostile code runs); ``scripts/run-tests.sh`` also runs the suite in a fresh
PID namespace.

How the patches work: the step that commits *is* the next holder, so whatever it patched runs
there. Patching ``os.waitpid`` makes the holder run attacker code while each later step runs (the
holder waits for its step with ``os.waitpid``); patching ``codedance.sandbox.protocol.send``
rewrites what the next step sends. Shared anonymous memory (which no rollback undoes) makes a
forgery one-shot across rolled-back steps.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import stat
import struct
import termios
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from codedance.sandbox import Limits, SandboxService
from codedance.sandbox.pool import SandboxPool
from codedance.types import ExecStatus
from tests.sandbox.conftest import assert_only_holder_and_spare, assert_state_intact, prepare_state

pytestmark = [pytest.mark.tier("integration"), pytest.mark.slow]

OK, ERROR, CRASHED, REFUSED, TIMEOUT = (ExecStatus.OK, ExecStatus.ERROR, ExecStatus.CRASHED,
                                        ExecStatus.REFUSED, ExecStatus.TIMEOUT)  # fmt: skip
x86_64 = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="raw syscall numbers are x86-64's"
)

# The socket this process shares with the controller (the holder's; a step inherits it).
SOCKET_FD = """
import os, stat
def _socket_fd():
    for name in os.listdir('/proc/self/fd'):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                return int(name)
        except OSError:
            pass
"""
# The holder runs ACTION() again and again while each later step runs. A step acts as the holder
# from its result on (it waits for its own spare), but ACTION starts only once it has committed,
# seen as its parent (the old holder, killed at the commit) changing: the patching step's own
# commit is never raced.
HOSTILE_HOLDER = """
_real_waitpid = os.waitpid
_first_parent = {}
def _hostile_waitpid(pid, options, _real=_real_waitpid):
    parent = _first_parent.setdefault(os.getpid(), os.getppid())
    while True:
        done = _real(pid, os.WNOHANG)
        if done != (0, 0):
            return done
        if os.getppid() != parent:
            ACTION()
os.waitpid = _hostile_waitpid
"""

# A committed step that patches how its holder forks each next step process (the runtime runs
# as __main__); the patch's code goes on from `_runtime` and `_fork`, the real fork.
RUNTIME_FORK = (
    "import os, sys\n_runtime = sys.modules['__main__']\n_fork = _runtime._fork_continuation\n"
)


def hostile(action: str) -> str:
    """A snippet that, once committed, makes the holder run ``action`` (defining ACTION)."""
    return SOCKET_FD + action + HOSTILE_HOLDER


def _host_dir(tmp_path):
    """A host directory outside the jail with a root-only canary file, and its fingerprint."""
    host = tmp_path / "host"
    host.mkdir()
    canary = host / "canary"
    canary.write_text("CANARY-host-secret")
    os.chmod(canary, 0o600)
    return host, _fingerprint(host)


def _fingerprint(directory) -> list:
    return sorted(
        (
            e.name,
            e.stat(follow_symlinks=False).st_mode,
            e.stat(follow_symlinks=False).st_size,
            e.stat(follow_symlinks=False).st_mtime_ns,
        )
        for e in os.scandir(directory)
    )


def _wait_until_idle_frozen(sandbox, results=(), timeout_s: float = 10.0) -> None:
    """Wait for the service's idle freezer to stop the trajectory (a hostile holder runs its code
    until then); skip the test where there is no freezer."""
    if sandbox._cgroup is None or not sandbox._cgroup.can_freeze:
        pytest.skip("no freezer on this host: the holder's race cannot be stopped to look")
    deadline = time.monotonic() + timeout_s
    while (
        not sandbox._idle_frozen and sandbox.alive
    ):  # a lost trajectory's processes are all killed
        assert time.monotonic() < deadline, (
            "the idle trajectory was not frozen",
            sandbox.freeze_pending,
            [(r.status, r.notes) for r in results],
        )
        time.sleep(0.01)


def _no_setuid_files(root, *, owned_by_root_only: bool = False) -> None:
    """No setuid/setgid file below ``root`` (with ``owned_by_root_only``: none owned by root; a
    step may mark its own files setuid, harmless on a nosuid mount and under no_new_privs)."""
    for directory, _, names in os.walk(root):
        for name in names:
            info = os.lstat(os.path.join(directory, name))
            if owned_by_root_only and info.st_uid != 0:
                continue
            assert not info.st_mode & (stat.S_ISUID | stat.S_ISGID), os.path.join(directory, name)


@pytest.mark.usefixtures("local")
def test_symlink_swaps_during_restore_never_reach_the_host(jail, tmp_path):
    """The holder swaps a committed directory for a symlink to a host directory while
    the controller restores and checkpoints. Nothing on the host is written, read or deleted."""
    host, before = _host_dir(tmp_path)
    sandbox = jail(timeout_s=5.0)
    assert sandbox.run(
        "import os\nos.makedirs('d', exist_ok=True)\nopen('d/x', 'w').write('mine')"
    ).ok
    action = (
        "def ACTION():\n    try:\n        os.rename('d', 'd.real'); "
        f"os.symlink({str(host)!r}, 'd')\n"
        "        os.unlink('d'); os.rename('d.real', 'd')\n    except OSError: pass\n"
    )
    assert sandbox.run(hostile(action)).ok
    results = []
    for code in (
        "open('d/x', 'w').write('evil'); raise ValueError('fail')",
        "import os; os.chmod('d/x', 0o4755); open('d/y', 'w').write('setuid attempt')",
        "import time; time.sleep(0.05); 1/0",
        "open('d/z', 'w').write('z')",
        "import shutil; shutil.rmtree('d'); raise ValueError",
        "print(open('d/x').read())",
    ):
        result = sandbox.run(code)
        assert result.status in (OK, ERROR, REFUSED, CRASHED), result
        results.append(result)
    assert _fingerprint(host) == before
    assert (host / "canary").read_text() == "CANARY-host-secret"
    _wait_until_idle_frozen(
        sandbox, results
    )  # the holder keeps swapping until the idle freezer stops it
    _no_setuid_files(sandbox.workdir, owned_by_root_only=True)
    _no_setuid_files(sandbox._files.store)
    leak = sandbox.run(
        "found = []\nimport os\n"
        "for d, _, names in os.walk('.'):\n    for n in names:\n"
        "        try: found += ['CANARY' in open(os.path.join(d, n), errors='replace').read()]\n"
        "        except OSError: pass\nprint(any(found))"
    )
    assert "True" not in leak.stdout


def test_a_fifo_swapped_in_during_restore_does_not_block_the_controller(jail):
    """A FIFO in place of a committed file while the controller restores."""
    sandbox = jail(timeout_s=1.0, limits=Limits(recovery_s=3.0))
    assert sandbox.run("open('f', 'w').write('data')").ok
    action = (
        "def ACTION():\n    try:\n        os.unlink('f'); os.mkfifo('f')\n    except "
        "OSError: pass\n"
    )
    assert sandbox.run(hostile(action)).ok
    for code in ("raise ValueError('fail')", "while True: pass", "print(open('f').read())"):
        started = time.monotonic()
        result = sandbox.run(code)
        assert time.monotonic() - started < 1.0 + 3.0 + 2.0, (code, result)
        assert result.status is not OK or result.stdout == "data\n", result
    sandbox.close()  # and closing does not hang either


@pytest.mark.usefixtures("local")
def test_a_chatty_holder_cannot_extend_the_deadline(jail):
    """The holder drips bytes (and whole junk messages) forever: every run() still returns
    by timeout + recovery time; the trajectory is declared lost, its processes killed."""
    sandbox = jail(timeout_s=1.0, limits=Limits(recovery_s=2.0))
    action = (
        "_sock = _socket_fd()\ndef ACTION():\n    os.write(_sock, b'\\x00')\n    import "
        "time; time.sleep(0.01)\n"
    )
    assert sandbox.run(hostile(action)).ok
    started = time.monotonic()
    result = sandbox.run("while True: pass")
    assert time.monotonic() - started < 1.0 + 2.0 + 1.5
    assert result.status is CRASHED and "lost" in result.notes[-1]
    assert sandbox._cgroup is None or sandbox._cgroup.pids() == set()
    again = sandbox.run("print(1)")
    assert again.status is CRASHED and not again.rolled_back


def test_a_holder_sending_junk_messages_loses_only_its_own_trajectory(jail):
    sandbox, neighbour = jail(timeout_s=2.0), jail()
    expected = prepare_state(neighbour)
    action = (
        "import json, struct\n_sock = _socket_fd()\n"
        "def ACTION():\n    raw = json.dumps({'op': 'result', 'status': 'ok', "
        "'_blobs': []}).encode()\n"
        "    os.write(_sock, struct.pack('>I', len(raw)) + raw)\n"
    )
    assert sandbox.run(hostile(action)).ok
    result = sandbox.run("import time; time.sleep(0.3)")
    assert result.status is CRASHED and "holder" in result.notes[-1]
    assert_state_intact(neighbour, expected)


@x86_64
@pytest.mark.parametrize(
    "name,number,args",
    [
        ("io_uring_setup", 425, (8, 0)),
        ("io_uring_enter", 426, (0, 0, 0, 0, 0, 0)),
        ("io_uring_register", 427, (0, 0, 0, 0)),
        ("shmget", 29, (0, 4096, 0o1000 | 0o600)),
        ("semget", 64, (0, 1, 0o1000 | 0o600)),
        ("msgget", 68, (0, 0o1000 | 0o600)),
        ("mq_open", 240, (0, 0o100, 0o600, 0)),
        ("shutdown", 48, (3, 2)),
        ("setsockopt", 54, (3, 1, 7, 0, 0)),
        ("splice", 275, (0, 0, 0, 0, 0, 0)),
        ("tee", 276, (0, 0, 0, 0)),
        ("vmsplice", 278, (0, 0, 0, 0)),
        ("sendfile", 40, (0, 0, 0, 0)),
        ("setxattr", 188, (0, 0, 0, 0, 0)),
        ("fsetxattr", 190, (0, 0, 0, 0, 0)),
        ("removexattr", 197, (0, 0)),
        ("io_setup", 206, (1, 0)),
        ("io_destroy", 207, (0,)),
        ("io_getevents", 208, (0, 0, 0, 0, 0)),
        ("io_submit", 209, (0, 0, 0)),
        ("io_cancel", 210, (0, 0, 0)),
        ("io_pgetevents", 333, (0, 0, 0, 0, 0, 0)),
        ("inotify_init", 253, ()),
        ("inotify_init1", 294, (0,)),
        ("inotify_add_watch", 254, (0, 0, 0)),
        ("fanotify_init", 300, (0x200, 0)),
        ("fanotify_mark", 301, (0, 0, 0, 0, 0)),
        ("memfd_secret", 447, (0,)),
        ("modify_ldt", 154, (0, 0, 0)),
    ],
)
def test_denied_kernel_surfaces(jail, name, number, args):
    """io_uring (which would bypass the socket rules), SysV and POSIX IPC (which outlive close
    and cross trajectories), shutdown/setsockopt on the shared socket; Linux AIO
    (``fs.aio-max-nr`` is host-wide: one trajectory can take all of it), inotify and fanotify (a
    watch on the shared read-only trees sees a neighbour's imports; ``fanotify_init`` with
    ``FAN_REPORT_FID``, which unprivileged processes may call); ``memfd_secret`` (fragments the
    host's direct map), ``modify_ldt``."""
    sandbox = jail()
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, "
        "use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
        f"r = libc.syscall({number}, *[ctypes.c_long(a) for a in {args!r}])\n"
        f"print(r, ctypes.get_errno())"
    )
    result = sandbox.run(code)
    assert result.ok and result.stdout == "-1 1\n", (name, result)  # EPERM
    assert sandbox.run("print('alive')").stdout == "alive\n"


def test_file_pages_cannot_be_pinned_in_a_pipe_and_copies_still_work(jail):
    """A pipe filled from a file (splice, sendfile) holds page-cache pages that
    the OOM arbiter counts as reclaimable; both are refused, and shutil's copy falls back to
    read/write."""
    sandbox = jail()
    code = (
        "import os, shutil\nopen('a.bin', 'wb').write(b'x' * 10000)\nr, w = os.pipe()\n"
        "fd = os.open('a.bin', os.O_RDONLY)\nerrors = []\n"
        "for call in (lambda: os.splice(fd, w, 4096), lambda: os.sendfile(w, fd, 0, 4096)):\n"
        "    try:\n        call()\n        errors.append('allowed')\n"
        "    except OSError as exc:\n        errors.append(exc.errno)\n"
        "shutil.copyfile('a.bin', 'b.bin')\nprint(errors, open('b.bin', 'rb').read() "
        "== b'x' * 10000)"
    )
    result = sandbox.run(code)
    assert result.ok and result.stdout == "[1, 1] True\n", result


def test_a_failed_steps_extended_attributes_cannot_outlive_it(jail):
    """``user.*`` attributes a failing step sets on a committed file would survive the
    rollback as kernel memory the arbiter does not count; setting any is refused, through
    the named calls and through ``setxattrat`` (463, newer than libseccomp here: every unnamed
    call number returns ENOSYS)."""
    sandbox = jail()
    assert sandbox.run("open('kept.txt', 'w').write('x')").ok
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, "
        "use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
        "errors = []\ntry:\n    os.setxattr('kept.txt', 'user.big', b'x' * 1000)\n"
        "except OSError as exc:\n    errors.append(exc.errno)\n"
        "r = libc.syscall(463, -100, b'kept.txt', 0, b'user.big', 0, 0)\n"
        "errors.append(ctypes.get_errno() if r == -1 else 'allowed')\nprint(errors)"
    )
    result = sandbox.run(code)
    assert result.ok and result.stdout == "[1, 38]\n", result  # EPERM, ENOSYS


def test_io_uring_cannot_open_a_network_socket(jail):
    """io_uring end to end: the route through io_uring's socket op stops at setup."""
    sandbox = jail()
    result = sandbox.run("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                         "params = ctypes.create_string_buffer(120)\n"
                         "print(libc.syscall(425, 4, params), ctypes.get_errno())")  # fmt: skip
    assert result.stdout == "-1 1\n"


def test_signal_driven_io_and_prlimit_on_the_holder_are_denied(jail):
    """A failing step cannot arm SIGIO on the shared socket (which would kill the holder) nor
    lower the holder's limits; its own limits stay settable."""
    sandbox = jail()
    expected = prepare_state(sandbox)
    code = (
        SOCKET_FD + "import fcntl, resource\nsock = _socket_fd()\ndenied = []\n"
        "for attempt in (lambda: fcntl.fcntl(sock, fcntl.F_SETOWN, os.getppid()),\n"
        "                lambda: fcntl.fcntl(sock, fcntl.F_SETFL, os.O_ASYNC),\n"
        "                lambda: fcntl.fcntl(sock, 10, 9),\n"
        "                lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (4, 4))):\n"
        "    try: attempt(); denied.append(False)\n"
        "    except PermissionError: denied.append(True)\n"
        "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
        "print(denied)\nraise ValueError('fail after trying')"
    )
    result = sandbox.run(code)
    assert result.status is ERROR and result.stdout == "[True, True, True, True]\n", result
    assert_state_intact(sandbox, expected)


def test_a_lost_trajectorys_files_go_at_once_not_at_close(jail):
    """A lost trajectory's working directory (with whatever its failed step left there), kept
    until close(), stays charged to the service while out of the OOM arbiter's ranking, and an
    honest neighbour pays for it. Its files go to the remover at once."""
    sandbox = jail()
    patch = (
        "import sys, os\n_runtime = sys.modules['__main__']\n_real = _runtime._expect\n"
        "def _quit_on_resume(reader, op, stale=()):\n    if op == 'resume':\n        os._exit(0)\n"
        "    return _real(reader, op, stale)\n_runtime._expect = _quit_on_resume\n"
        "open('committed', 'wb').write(b'c' * (1 << 20))"
    )
    assert sandbox.run(patch).ok
    failed = sandbox.run("os.makedirs('left/by/the/failed/step')\nraise ValueError('x')")
    lost = (
        sandbox.run("x = 1") if failed.status is ERROR else failed
    )  # the holder quits as it resumes
    assert lost.status is CRASHED and "lost" in lost.notes[-1], lost
    deadline = time.monotonic() + 10
    while os.path.exists(sandbox.workdir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(sandbox.workdir)


@x86_64
def test_directory_notification_and_leases_are_denied(jail):
    """``F_NOTIFY`` on the shared read-only trees sends a SIGIO for each read there, a
    neighbour's imports and the host's reads of /etc included; a lease (``F_SETLEASE``) left on
    a committed file makes the checkpoint's open fail and the trajectory is lost. Both
    are refused (high bits in the command change nothing: the kernel reads an int); other
    ``fcntl`` commands work."""
    sandbox = jail()
    code = (
        "import ctypes, fcntl, os\nlibc = ctypes.CDLL(None, "
        "use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
        "directory = os.open(os.path.dirname(os.__file__), os.O_RDONLY)\nmine = "
        "os.open('f', os.O_WRONLY | os.O_CREAT)\n"
        "out = []\nfor fd, command, arg in ((directory, 1026, 0x80000001), (mine, "
        "1024, 1), (directory, 1026 | (1 << 32), 1)):\n"
        "    r = libc.syscall(72, fd, ctypes.c_long(command), ctypes.c_long(arg))\n"
        "    out.append(ctypes.get_errno() if r == -1 else 'allowed')\n"
        "out.append(fcntl.fcntl(mine, fcntl.F_GETFL) & os.O_WRONLY)\nprint(out)"
    )
    result = sandbox.run(code)
    assert result.ok and result.stdout == "[1, 1, 1, 1]\n", result


@x86_64
def test_no_step_can_make_itself_dumpable_again(jail):
    """``prctl(PR_SET_DUMPABLE, 1)`` then a crash would, with a piped
    ``core_pattern`` (apport, systemd-coredump), have the kernel run a root helper on the host fed
    the step's memory. The option is refused (high bits in the register change nothing: the
    kernel reads an int), other ``prctl`` options work, and ``RLIMIT_CORE`` is 1 (the kernel's
    "not even to a pipe" value)."""
    sandbox = jail()
    code = (
        "import ctypes, resource\nlibc = ctypes.CDLL(None, "
        "use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
        "out = []\nfor option in (4, 4 | (1 << 32)):\n    for value in (1, 0):\n"
        "        r = libc.syscall(157, ctypes.c_long(option), ctypes.c_long(value), 0, 0, 0)\n"
        "        out.append(ctypes.get_errno() if r == -1 else 'allowed')\n"
        "out.append(libc.prctl(3, 0, 0, 0, 0))\n"  # PR_GET_DUMPABLE
        "out.append(libc.prctl(15, b'renamed', 0, 0, 0))\n"  # PR_SET_NAME
        "out.append(resource.getrlimit(resource.RLIMIT_CORE))\nprint(out)"
    )
    result = sandbox.run(code)
    assert result.ok and result.stdout == "[1, 1, 1, 1, 0, 0, (1, 1)]\n", result
    assert sandbox.run("print('alive')").stdout == "alive\n"


def _kernel_at_least(major: int, minor: int) -> bool:
    release = platform.release().split("-")[0].split(".")
    return tuple(int(part) for part in release[:2] if part.isdigit()) >= (major, minor)


def test_descriptors_sent_to_the_controller_are_refused(jail):
    """Descriptors a step passes to the controller with ``SCM_RIGHTS`` are dropped at its
    receive and released on its thread (inotify groups, big memfds). On Linux
    6.16+ its end refuses them (``SO_PASSRIGHTS`` 0): the step's ``sendmsg`` fails with EPERM,
    nothing reaches the shared socket, and the step's own reply goes through."""
    if not _kernel_at_least(6, 16):
        pytest.skip("SO_PASSRIGHTS needs Linux 6.16+")
    sandbox = jail()
    expected = prepare_state(sandbox)
    code = (
        SOCKET_FD + "import array, socket\nsock = socket.socket(fileno=os.dup(_socket_fd()))\n"
        "fd = os.memfd_create('x')\ntry:\n"
        "    sock.sendmsg([b'\\0'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, "
        "bytes(array.array('i', [fd])))])\n"
        "    print('sent')\nexcept OSError as exc:\n    print(exc.errno)"
    )
    result = sandbox.run(code)
    assert result.ok and result.stdout == "1\n", result  # EPERM
    assert_state_intact(sandbox, expected)


def test_fifos_and_links_are_counted_refused_and_rolled_back(jail):
    """Special files are never committed, count against the entry limit, vanish on
    rollback, and leave later steps fast."""
    sandbox = jail(timeout_s=10.0)
    expected = prepare_state(sandbox)
    one = sandbox.run("import os; os.mkfifo('pipe')")
    assert one.status is REFUSED and "FIFO" in one.notes[-2]
    many = sandbox.run("import os\nfor i in range(20_000): os.mkfifo(f'p{i}')")
    assert many.status is REFUSED and many.rolled_back, many
    link = sandbox.run("import os; os.symlink('keep.txt', 'alias')")
    assert link.status is REFUSED and "symlink" in link.notes[-2]
    assert_state_intact(sandbox, expected)
    started = time.monotonic()
    assert sandbox.run("pass", timeout_s=0.5).ok
    assert time.monotonic() - started < 0.5


FORGE = """
import mmap, os, struct, json
import codedance.sandbox.protocol as _protocol
_armed = mmap.mmap(-1, 1)  # shared: a rolled-back step's change stays
_armed[0] = 1
_real_send = _protocol.send
_installer = os.getpid()  # this step sends its own result honestly; the next one forges
def _forging_send(sock, body, blobs=(), deadline=None, _real=_real_send, _armed=_armed):
    if body.get("op") != "result" or not _armed[0] or os.getpid() == _installer:
        return _real(sock, body, blobs, deadline)
    _armed[0] = 0
    FORGE_BODY
_protocol.send = _forging_send
"""
_RESULT = "{'op': 'result', 'status': 'ok', 'stdout': '', 'stderr': '', 'notes': [], 'images': []"


def _raw(header_expression: str, tail: str = "b''") -> str:
    return (
        f"raw = {header_expression}\n    sock.sendall(struct.pack('>I', len(raw)) + raw + {tail})"
    )


FORGERIES = {
    "15.7M characters of stdout": "_real(sock, {**body, 'stdout': 'x' * 15_700_000})",
    "40 images of 13000x13000": (
        "png = b'\\x89PNG\\r\\n\\x1a\\n\\x00\\x00\\x00\\rIHDR' + struct.pack('>II', 13000, 13000)\n"
        "    _real(sock, {**body, 'images': [{'source': 's'}] * 40}, [png] * 40)"
    ),
    "745k characters of notes": "_real(sock, {**body, 'notes': ['n' * 1000] * 745})",
    "a status the step may not claim": "_real(sock, {**body, 'status': 'timeout'})",
    "bad JSON": _raw("b'{not json'"),
    "NaN": _raw('b\'{"op": "result", "status": NaN, "_blobs": []}\''),
    "deep nesting": _raw(
        "b'{\"op\": \"result\", \"x\": ' + b'[' * 200000 + b']' * 200000 + b', \"_blobs\": []}'"
    ),
    "a huge integer": _raw('b\'{"op": "result", "n": 1\' + b\'0\' * 100000 + b\', "_blobs": []}\''),
    "wrong types": _raw("json.dumps({**body, 'stdout': 5, 'error': [1], '_blobs': []}).encode()"),
    "a header length of 2 GiB": "sock.sendall(struct.pack('>I', 1 << 31) + b'{}')",
    "blob sizes that lie": _raw("json.dumps({**body, '_blobs': [100]}).encode()", "b'short'"),
    "a negative blob size": _raw("json.dumps({**body, '_blobs': [-5]}).encode()"),
    "invalid UTF-8": _raw("b'\\xff\\xfe\\xfd'"),
    "a blob over the message limit": _raw("json.dumps({**body, '_blobs': [1 << 30]}).encode()"),
}


@pytest.mark.usefixtures("local")
@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_forged_reply_fails_its_step_and_keeps_the_trajectory(jail, name):
    """Each forgery of a step's reply (once, by a patched runtime) comes back as a
    failed, rolled-back step within its deadline: no exception out of run(), no descriptor leaked,
    no framing desynchronised (the next steps work and see the state from before)."""
    sandbox = jail(timeout_s=3.0, limits=Limits(recovery_s=3.0))
    expected = prepare_state(sandbox)
    assert sandbox.run(FORGE.replace("FORGE_BODY", FORGERIES[name])).ok
    with (
        sandbox._lock
    ):  # the replaced holder's pidfd (a run's start closes it; the idle freezer too)
        sandbox._reap_dying(time.monotonic() + 5.0)
    descriptors = len(os.listdir("/proc/self/fd"))
    started = time.monotonic()
    result = sandbox.run("y = 2")
    assert time.monotonic() - started < 3.0 + 3.0 + 1.0
    assert result.status in (CRASHED, TIMEOUT) and result.rolled_back, (name, result)
    assert (
        len(result.stdout) < 30_000
        and len(result.images) == 0
        and sum(map(len, result.notes)) < 20_000
    )
    assert len(os.listdir("/proc/self/fd")) == descriptors
    assert_state_intact(sandbox, expected)
    assert sandbox.run("print(y)").status is ERROR  # the forged step never happened


def test_ordinary_code_fails_the_step_not_the_trajectory(jail):
    """A 9 MB exception, images over the message budget, a tree nested past any path
    limit, and shutdown() on the shared socket: each is one failed (or trimmed) step."""
    sandbox = jail(timeout_s=20.0, limits=Limits(max_image_bytes=4 << 20, max_message=6 << 20))
    expected = prepare_state(sandbox)
    big = sandbox.run("raise ValueError('x' * 9_000_000)")
    assert big.status is ERROR and len(big.error.message) <= 4_000 and big.rolled_back
    images = sandbox.run(
        "import numpy as np\nfrom PIL import Image\nrng = np.random.default_rng(0)\n"
        "for i in range(4):\n"
        "    Image.fromarray(rng.integers(0, 255, (800, 800, 3), "
        "dtype=np.uint8)).save(f'noise{i}.png')"
    )
    assert (
        images.ok and 1 <= len(images.images) < 4 and any("not returned" in n for n in images.notes)
    ), images
    deep = sandbox.run(
        "import os\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')\nos.chdir('/')"
    )
    assert deep.status is REFUSED and "deeper" in " ".join(deep.notes) and deep.rolled_back, deep
    deep_failed = sandbox.run(
        "import os\nfor _ in range(3000):\n    os.mkdir('e'); os.chdir('e')\n1/0"
    )
    assert deep_failed.status is ERROR and deep_failed.rolled_back
    shut = sandbox.run(
        SOCKET_FD
        + "import socket\nsocket.socket(fileno=os.dup(_socket_fd())).shutdown(socket.SHUT_RDWR)"
    )
    assert shut.status is ERROR and shut.error.type == "PermissionError", shut
    assert sandbox.run("import os; os.remove('noise0.png')").ok
    assert sandbox.run("import os, glob; [os.remove(p) for p in glob.glob('noise*.png')]").ok
    assert_state_intact(sandbox, expected)


def test_nothing_of_the_trajectory_lives_outside_its_working_directory(jail):
    """Output written to file descriptor 1 goes to a memfd, not to a host file."""
    sandbox = jail()
    result = sandbox.run(
        "import os\nfor _ in range(40): os.write(1, b'y' * (1 << 20))\nraise ValueError"
    )
    assert result.status is ERROR and "bytes cut" in result.stdout
    assert os.listdir(os.path.dirname(sandbox.workdir)) == ["work"]


def test_run_after_close_raises_at_once(jail):
    from codedance.sandbox import SandboxClosed

    sandbox = jail()
    sandbox.close()
    started = time.monotonic()
    with pytest.raises(SandboxClosed):
        sandbox.run("pass")
    assert time.monotonic() - started < 1.0


def test_a_holder_that_forks_extra_processes_cannot_commit_them(jail):
    """The holder runs code between steps; what it starts is found at the next commit."""
    sandbox = jail(timeout_s=3.0)
    action = (
        "_forked = []\ndef ACTION():\n    if not _forked:\n        _forked.append(os.fork())\n"
        "        if _forked[0] == 0:\n            import time; time.sleep(100)\n"
    )
    assert sandbox.run(hostile(action)).ok
    result = sandbox.run("import time; time.sleep(0.3)")
    assert result.status is REFUSED and "processes" in " ".join(result.notes), result
    assert sandbox.run("pass").ok  # the refusal killed the holder's extra process
    assert_only_holder_and_spare(sandbox)


def test_leftovers_of_a_killed_controller_are_swept(tmp_path):
    """A controller killed with SIGKILL leaves its directories and cgroups, and its idle
    trajectory frozen (on v1 a frozen process does not act on SIGKILL); the sweep thaws, kills and
    removes them all (the pids groups of frozen trajectories, and then their lock, would
    otherwise stay forever), and never touches a live service."""
    import subprocess
    import sys

    from codedance.sandbox import SandboxService
    from codedance.sandbox.leftovers import sweep

    script = (
        "from codedance.sandbox import Sandbox, SandboxService\nimport sys, time\n"
        'service = SandboxService()\nsb = Sandbox(service=service)\nsb.run(\'open("f", '
        '"w").write("x")\')\n'
        "deadline = time.monotonic() + 10\n"
        "while sb._cgroup is not None and sb._cgroup.can_freeze and not "
        "sb._idle_frozen and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print(service.name, service.work_root, service.store_root, flush=True)\ntime.sleep(600)"
    )
    from codedance.sandbox.cgroups import service_parents

    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        name, work_root, store_root = child.stdout.readline().split()
        assert name not in sweep()  # alive: its lock is held
        assert os.path.isdir(work_root) and os.path.isdir(store_root)
    finally:
        child.kill()
        child.wait()
    assert (
        _processes_left_in_groups_of(name, timeout_s=10) == 0
    )  # frozen ones too, with no sweep yet
    sweep()  # (another process's sweep may have come first: what matters is that it is gone)
    assert not os.path.exists(work_root) and not os.path.exists(store_root)
    assert not any(os.path.exists(os.path.join(p, name)) for p in service_parents())
    live = SandboxService()
    try:
        assert live.name not in sweep() and os.path.isdir(live.work_root)
    finally:
        live.close()


def test_the_groups_of_a_controller_killed_in_another_cgroup_are_swept(tmp_path):
    """A controller that ran in another cgroup than the sweeping process (a shell, a systemd unit,
    a delegated scope: here a scratch group of this test's in each hierarchy) made its groups
    there; killed with SIGKILL, its groups are found through its lock's record and removed, and
    its lock with them (a sweep that looks only under its own cgroup finds nothing and
    removes the lock: the groups would be leaked for good)."""
    import secrets
    import subprocess
    import sys

    from codedance.sandbox import cgroups
    from codedance.sandbox.leftovers import sweep

    if os.geteuid() != 0:
        pytest.skip("creating cgroups needs root")
    scratches = [
        os.path.join(parent, f"scratch-{secrets.token_hex(4)}")
        for parent in cgroups.service_parents()
    ]
    made = []
    try:
        for scratch in scratches:
            try:
                os.mkdir(scratch)
            except OSError as exc:
                pytest.skip(f"cgroups are not writable here: {exc}")
            made.append(scratch)
        script = (
            "import sys, time\n"
            "for scratch in sys.argv[1:]:\n"
            "    open(scratch + '/cgroup.procs', 'w').write('0')\n"  # this process, there
            "from codedance.sandbox import Sandbox, SandboxService\n"
            "service = SandboxService(memory_total=512 << 20)\nsb = Sandbox(service=service)\n"
            "assert sb.run('x = 1').ok\n"
            "print(service.name, service.cgroup_layout is not None, flush=True)\ntime.sleep(600)"
        )
        child = subprocess.Popen(
            [sys.executable, "-c", script, *scratches], stdout=subprocess.PIPE, text=True
        )
        try:
            name, with_cgroups = child.stdout.readline().split()
            if with_cgroups != "True":
                pytest.skip("the service runs without cgroups here")
            assert all(os.path.isdir(os.path.join(scratch, name)) for scratch in scratches)
            assert not any(os.path.exists(os.path.join(p, name)) for p in cgroups.service_parents())
            assert name not in sweep()  # alive: its lock is held
        finally:
            child.kill()
            child.wait()
        deadline = time.monotonic() + 10
        while name not in sweep():  # (another process's sweep may come first, with the record too)
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert not any(os.path.exists(os.path.join(scratch, name)) for scratch in scratches)
    finally:
        for scratch in reversed(made):  # whatever is left in our scratch groups, then them
            for entry in os.scandir(scratch):
                if entry.is_dir():
                    cgroups.remove_service_groups(entry.name, [scratch])
            for _ in range(500):  # the controller's helpers leave them as they exit
                try:
                    os.rmdir(scratch)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def test_a_forked_child_of_a_killed_controller_keeps_neither_its_frozen_trajectories_nor_its_service(  # noqa: E501
    tmp_path,
):
    """A plain os.fork() of the controller (multiprocessing's "fork", DataLoader workers) would
    inherit the thaw-on-exit watcher's pipe and the service's lock: with the controller SIGKILLed
    and the child alive, the idle trajectory would stay frozen and ``gc`` take the service for
    alive. The child lets go of them (`forks`): the trajectory is thawed and dies,
    and the sweep removes the service, while the child still lives."""
    import signal
    import subprocess
    import sys

    from codedance.sandbox.cgroups import service_parents
    from codedance.sandbox.leftovers import sweep

    script = (
        "from codedance.sandbox import Sandbox, SandboxService\nimport os, sys, time\n"
        "service = SandboxService(memory_total=512 << 20)\nsb = Sandbox(service=service)\n"
        "assert sb.run('x = 1').ok\n"
        "deadline = time.monotonic() + 10\n"
        "while sb._cgroup is not None and sb._cgroup.can_freeze and not "
        "sb._idle_frozen and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "frozen = sb._cgroup is not None and sb._cgroup.can_freeze and sb._idle_frozen\n"
        "worker = os.fork()\n"
        "if worker == 0:\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "print(service.name, service.work_root, service.store_root, worker, frozen, "
        "flush=True)\ntime.sleep(600)"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        name, work_root, store_root, worker_text, frozen = child.stdout.readline().split()
        worker = int(worker_text)
        if frozen != "True":
            pytest.skip("no idle freezing on this host (needs cgroups with a freezer)")
        assert name not in sweep()  # alive: its lock is held
    finally:
        child.kill()
        child.wait()
    try:
        assert os.path.exists(f"/proc/{worker}")  # the forked child outlives the controller
        assert (
            _processes_left_in_groups_of(name, timeout_s=10) == 0
        )  # thawed by the watcher, killed
        assert name in sweep()  # not taken for alive
        assert not os.path.exists(work_root) and not os.path.exists(store_root)
        assert not any(os.path.exists(os.path.join(p, name)) for p in service_parents())
        assert os.path.exists(f"/proc/{worker}")
    finally:
        with contextlib.suppress(ProcessLookupError):  # ours (our child's child; a zombie at worst)
            os.kill(worker, signal.SIGKILL)


def _processes_left_in_groups_of(service_name: str, timeout_s: float) -> int:
    """How many processes the service's groups still hold once they are all gone, or at the end
    of ``timeout_s``."""
    from codedance.sandbox.cgroups import service_parents

    deadline = time.monotonic() + timeout_s
    while True:
        left = 0
        for parent in service_parents():
            for directory, _, _ in os.walk(os.path.join(parent, service_name)):
                with contextlib.suppress(OSError):
                    left += len(Path(directory, "cgroup.procs").read_text().split())
        if left == 0 or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@pytest.mark.usefixtures("local")
def test_two_services_never_share_a_uid_block():
    from codedance.sandbox.leftovers import claim_uid_block, release_uid_block

    claims = [claim_uid_block() for _ in range(4)]
    try:
        assert len({first for first, _ in claims}) == 4
    finally:
        for _, fd in claims:  # not os.close: a number still held would be taken from later children
            release_uid_block(fd)


@pytest.mark.usefixtures("local")
def test_the_holder_is_frozen_while_the_controller_restores(jail):
    """With a freezer, the holder cannot run at all while the controller writes its files (a
    restore with work to do runs frozen; one with nothing to do needs no freeze)."""
    sandbox = jail(timeout_s=5.0)
    if sandbox._cgroup is None or not sandbox._cgroup.can_freeze:
        pytest.skip("no freezer on this host")

    def state() -> str:
        if sandbox._cgroup.layout.version == 1:
            return open(os.path.join(sandbox._cgroup.freezer_dir, "freezer.state")).read().strip()
        return open(os.path.join(sandbox._cgroup.freezer_dir, "cgroup.events")).read()

    service, seen = (
        sandbox.service,
        [],
    )  # the state at every copy of data, in place or into a new file

    class Watched:
        def __init__(self, writer):
            self.writer, self.create_file, self.make_dir = (
                writer,
                writer.create_file,
                writer.make_dir,
            )

        def copy(self, source, target):
            seen.append(state())
            self.writer.copy(source, target)

    @contextlib.contextmanager
    def watched_writer(*args, **options):
        with SandboxService.restore_writer(service, *args, **options) as writer:
            yield Watched(writer)

    assert sandbox.run("open('f', 'w').write('kept')").ok
    service.restore_writer = watched_writer
    try:
        assert sandbox.run("open('f', 'w').write('changed'); 1/0").status is ERROR
    finally:
        del service.restore_writer
    assert seen and all("FROZEN" in s or "frozen 1" in s for s in seen), seen
    assert sandbox.run("print(open('f').read())").stdout == "kept\n"


def test_the_denied_syscalls_do_not_break_ordinary_libraries(jail):
    """The added seccomp rules leave numpy, PIL, OpenCV, matplotlib and file I/O working."""
    sandbox = jail()
    result = sandbox.run(
        "import numpy as np, cv2, matplotlib.pyplot as plt\nfrom PIL import Image\n"
        "a = np.arange(12).reshape(3, 4); img = Image.fromarray((a * 20).astype('uint8'))\n"
        "img.save('a.png'); g = cv2.GaussianBlur(np.zeros((32, 32), np.uint8), (3, 3), 0)\n"
        "plt.plot([1, 2]); plt.savefig('p.png')\nimport resource; "
        "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
        "print(int(a.sum()), g.shape)"
    )
    assert result.ok and result.stdout == "66 (32, 32)\n", result


@pytest.mark.usefixtures("local")
def test_hundreds_of_commits_leave_the_holder_as_it_was(jail):
    """Each step captures its output in memfds of its own; a committed step (the next holder)
    must not carry them on, or the holder runs out of descriptors after ~120 commits."""
    sandbox = jail()
    for index in range(300):
        result = sandbox.run("print('x' * 1000)" if index % 3 else "1/0")
        assert result.status in (OK, ERROR), (index, result)
    assert len(os.listdir(f"/proc/{sandbox._holder_pid}/fd")) <= 8


@pytest.mark.usefixtures("local")
def test_an_idle_trajectory_runs_nothing(jail):
    """A holder patched so that its spare spins instead of waiting for code: while the trajectory
    is idle (between run() calls) its processes are frozen, so the spinning one gets no CPU time;
    the next step never starts (timeout), and the trajectory recovers."""
    sandbox = jail(timeout_s=3.0)
    if sandbox._cgroup is None or not sandbox._cgroup.can_freeze:
        pytest.skip("no freezer on this host")
    patch = (
        RUNTIME_FORK + "def fork():\n    pid = _fork()\n    if pid == 0:\n"
        "        os.setsid()\n        while True: pass\n    _runtime._fork_continuation = _fork\n"
        "    return pid\n_runtime._fork_continuation = fork\n"
    )
    assert sandbox.run(patch).ok  # the spinning spare is the step's only child: allowed
    with sandbox._lock:  # the idle freezer reaps it too
        sandbox._reap_dying(time.monotonic() + 5.0)  # the replaced holder, killed at the commit
    time.sleep(0.2)  # past the idle freezer's delay
    busy = [pid for pid in sandbox._cgroup.pids() if pid != sandbox._holder_pid]
    ticks = {pid: _cpu_ticks(pid) for pid in busy}
    time.sleep(0.5)
    assert busy and all(_cpu_ticks(pid) - ticks[pid] <= 2 for pid in busy), (
        "a process ran while idle"
    )
    assert sandbox.run("x = 1").status is TIMEOUT
    assert sandbox.run("print(2)").stdout == "2\n"


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@pytest.mark.usefixtures("local")
def test_files_written_during_a_step_are_memory_not_host_disk(jail):
    """On the tmpfs work root a step's writes are charged to its trajectory's memory: writing far
    past the limit ends the step as oom (the step, never the holder, is the OOM victim)."""
    sandbox = jail(timeout_s=10.0, limits=Limits(memory=384 << 20))
    if not sandbox.service.work_on_tmpfs:
        pytest.skip("the work root is not a tmpfs here (the controller is not root)")
    expected = prepare_state(sandbox)
    result = sandbox.run(
        "import os\nbuf = os.urandom(1 << 20)\nfor n in range(4):\n"
        "    with open(f'f{n}', 'wb') as f:\n        for _ in range(200): f.write(buf)"
    )
    assert result.status is ExecStatus.OOM and result.rolled_back, result
    assert_state_intact(sandbox, expected)


@pytest.mark.usefixtures("local")
def test_the_step_is_the_oom_victim_from_its_first_statement(jail):
    """The step's oom_score_adj is 1000 before its code runs, so a child forked by its first
    statement inherits it (set after the code was sent, such a child could
    escape it and get a neighbour killed); the holder is never above 0."""
    sandbox = jail()
    code = (
        "import os\nr, w = os.pipe()\nif os.fork() == 0:\n"
        "    os.write(w, open('/proc/self/oom_score_adj', 'rb').read()); os._exit(0)\n"
        "os.wait(); print(open('/proc/self/oom_score_adj').read().strip(), os.read(r, "
        "16).decode().strip())"
    )
    for _ in range(5):
        result = sandbox.run(code)
        assert result.ok and result.stdout == "1000 1000\n", result
        holder = int(Path(f"/proc/{sandbox._holder_pid}/oom_score_adj").read_text())
        assert holder in (0, -1000), holder  # -1000 where the controller has CAP_SYS_RESOURCE


@pytest.mark.usefixtures("local")
def test_each_trajectory_has_a_cpu_quota(jail):
    sandbox = jail(limits=Limits(cpus=1.5))
    if sandbox._cgroup is None or sandbox._cgroup.cpu_dir is None:
        pytest.skip("no CPU bandwidth control here")
    directory = Path(sandbox._cgroup.cpu_dir)
    if sandbox._cgroup.layout.version == 2:
        assert (directory / "cpu.max").read_text().split() == ["150000", "100000"]
    else:
        assert int((directory / "cpu.cfs_quota_us").read_text()) == 150_000
        assert int((directory / "cpu.cfs_period_us").read_text()) == 100_000
    assert sandbox._holder_pid in sandbox._cgroup.pids()


@pytest.mark.usefixtures("local")
def test_processes_racing_to_announce_themselves_are_bounded(jail):
    """A patched spare forks many children that each leave an incomplete message while the
    controller waits for the step's reply: it keeps at most a few hundred bytes each, for a
    bounded number of them, and the step still runs."""
    sandbox = jail(timeout_s=10.0)
    # the race starts once a spare has its code (so the step the patch is in has been
    # committed: racers alive while a commit is checked would refuse it)
    patch = (
        SOCKET_FD
        + "import struct, sys\n_runtime = sys.modules['__main__']\n_real = _runtime._expect\n"
        "def _racing(reader, op, stale=()):\n"
        "    body = _real(reader, op, stale)\n"
        "    if op == 'run':\n"
        "        chunk = struct.pack('>I', 65400) + b'{' + b' ' * 65000\n"
        "        for _ in range(300):\n"
        "            pid = os.fork()\n"
        "            if pid == 0:\n                os.write(_socket_fd(), "
        "chunk)\n                os._exit(0)\n"
        "            os.waitpid(pid, 0)\n"
        "        open('raced', 'w').close()\n"
        "    return body\n_runtime._expect = _racing\n"
    )
    assert sandbox.run(patch).ok
    peak = []
    real_read = sandbox._reader._read_some

    def watched():
        real_read()
        peak.append(sum(len(b) for b in sandbox._reader._buffers.values()))

    sandbox._reader._read_some = watched
    assert sandbox.run("print('ran', os.path.exists('raced'))").stdout == "ran True\n"
    assert max(peak) < 64 << 10


def test_no_pty_device_in_the_jail(jail):
    """ptys come from one host-wide pool: the jail's /dev has none to take."""
    sandbox = jail()
    result = sandbox.run(
        "import os\nprint(sorted(os.listdir('/dev')))\n"
        "try:\n    os.openpty(); print('pty')\nexcept OSError as exc: print(type(exc).__name__)"
    )
    assert (
        "ptmx" not in result.stdout
        and "pts" not in result.stdout
        and "\npty\n" not in result.stdout
    )
    assert "'null'" in result.stdout and "'urandom'" in result.stdout


@x86_64
def test_sync_and_foreign_socketpairs_are_denied(jail):
    sandbox = jail()
    code = ("import ctypes, socket\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.sync(); e1 = ctypes.get_errno()\n"
            "try:\n    socket.socketpair(socket.AF_INET, socket.SOCK_STREAM); e2 = 'made'\n"
            "except OSError as exc: e2 = exc.errno\nprint(e1, e2)")  # fmt: skip
    result = sandbox.run(code)
    assert result.stdout == "1 97\n", result  # EPERM, EAFNOSUPPORT


def test_a_holder_with_threads_cannot_commit(jail):
    sandbox = jail(timeout_s=3.0)
    action = (
        "import threading, time\n_started = []\ndef ACTION():\n    if not _started:\n"
        "        _started.append(threading.Thread(target=time.sleep, args=(100,), daemon=True))\n"
        "        _started[0].start()\n"
    )
    assert sandbox.run(hostile(action)).ok
    # the holder starts its thread once it sees its commit (its parent changed), which can come
    # after the next step's check or after the idle freeze; each committed step re-arms it
    for _ in range(30):
        result = sandbox.run("x = 1")
        if result.status is not OK:
            break
    assert result.status is REFUSED and "holder process runs threads" in " ".join(result.notes), (
        result
    )


def test_a_holder_that_cannot_fork_reports_a_step_that_could_not_start(jail):
    """When the service is full, the holder's fork of its next step process fails (ENOMEM: the
    kernel memory a new process needs is charged, and the service's parent group does not OOM-kill):
    the step ends as oom, rolled back, and the trajectory goes on (it used to lose the holder).
    Simulated by a committed step whose runtime's fork fails once."""
    sandbox = jail()
    expected = prepare_state(sandbox)
    patch = (
        RUNTIME_FORK
        + "import errno\ndef _fork_failing_once():\n    _runtime._fork_continuation = _fork\n"
        "    raise OSError(errno.ENOMEM, 'Cannot allocate memory')\n"
        "_runtime._fork_continuation = _fork_failing_once"
    )
    assert sandbox.run(patch).ok
    result = sandbox.run("print('never runs')")
    assert result.status is ExecStatus.OOM and result.rolled_back, result
    assert "could not be forked" in result.notes[0], result
    assert_state_intact(sandbox, expected)


# A committed step makes every later spare sleep instead of reading its code.
NEVER_READS_ITS_CODE = """
import sys, time
_runtime = sys.modules['__main__']
def _never_reads_run(reader, op, stale=(), _real=_runtime._expect):
    if op == 'run':
        time.sleep(10 ** 6)
    return _real(reader, op, stale)
_runtime._expect = _never_reads_run
"""
LONG_CODE = "x = 1\n#" + "#" * (900 << 10)  # more than the socket's buffer, under the 1 MiB limit


def _wait_until_code_is_queued(sandbox, timeout_s: float = 10.0) -> None:
    """Until the controller's socket to the jail holds bytes nobody has read: the code's send."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        queued = fcntl.ioctl(sandbox._conn.fileno(), termios.TIOCOUTQ, b"\0" * 4)
        if struct.unpack("i", queued)[0] > 0:
            return
        time.sleep(0.01)
    raise AssertionError("the code was never sent")


@pytest.mark.usefixtures("local")
def test_close_wakes_a_run_whose_code_the_holder_never_reads(jail):
    """A spare that never reads its code blocks the send of a long snippet until the run's
    deadline, and close() would wait the whole timeout; the send watches the sandbox's
    interrupt."""
    sandbox = jail(timeout_s=120)
    assert sandbox.run(NEVER_READS_ITS_CODE).ok
    with ThreadPoolExecutor(1) as runs:
        pending = runs.submit(sandbox.run, LONG_CODE)
        _wait_until_code_is_queued(sandbox)
        started = time.monotonic()
        sandbox.close()
        assert time.monotonic() - started < 5
        result = pending.result(timeout=10)
    assert result.status is CRASHED and "closed while this step ran" in result.notes[0], result


def test_a_pool_wakes_every_run_before_it_closes_any(service):
    """`SandboxPool.close()` closing its sandboxes one after another, each waiting for its own
    run, makes k blocked runs cost k waits."""
    pool = SandboxPool(max_running=4, service=service, timeout_s=120)
    sandboxes = [pool.sandbox() for _ in range(3)]
    if not all(sb.isolation.namespaces and sb.isolation.seccomp for sb in sandboxes):
        pool.close()
        pytest.skip("hostile tests need the jail's PID namespace and seccomp")
    for sandbox in sandboxes:
        assert "Seccomp:\t2" in Path(f"/proc/{sandbox._holder_pid}/status").read_text()
        assert sandbox.run(NEVER_READS_ITS_CODE).ok
    with ThreadPoolExecutor(3) as runs:
        pending = [runs.submit(sandbox.run, LONG_CODE) for sandbox in sandboxes]
        for sandbox in sandboxes:
            _wait_until_code_is_queued(sandbox)
        started = time.monotonic()
        pool.close()
        assert time.monotonic() - started < 10
        assert all(future.result(timeout=10).status is CRASHED for future in pending)


def test_a_step_that_times_out_before_its_spare_is_forked_rolls_back_and_keeps_the_trajectory(jail):
    """A run that times out before the holder has forked its spare kills "every process but
    the holder" while there is none; the spare forks a moment later, the holder waits for it
    and never reports, and at the recovery deadline the trajectory would be lost. A holder slow to
    fork (here a committed step made it so) stands for that moment."""
    sandbox = jail(limits=Limits(recovery_s=10.0))
    slow = (
        RUNTIME_FORK + "import time\ndef _slow_fork():\n    time.sleep(0.4)\n    return _fork()\n"
        "_runtime._fork_continuation = _slow_fork\nx = 41"
    )
    assert sandbox.run(slow).ok
    started = time.monotonic()
    timed_out = sandbox.run("x += 1", timeout_s=0.1)
    assert timed_out.status is ExecStatus.TIMEOUT and timed_out.rolled_back, timed_out
    assert time.monotonic() - started < 0.1 + 6.0, (
        "the holder was waited for until the recovery deadline (10 s)"
    )
    after = sandbox.run("print(x)", timeout_s=5)
    assert after.ok and after.stdout == "41\n", after
