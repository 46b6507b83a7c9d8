"""The hostile inputs of docs/sandbox.md (Threat model), each against a jailed sandbox.

Every case asserts the status, the time it took, that the state and files from before survived,
that no process of the step remains, and that a neighbour instance was untouched. All of them run
only in sandboxes from the ``jail`` fixture (PID namespace and seccomp asserted first).
"""

from __future__ import annotations

import os
import time

import pytest

from codedance.sandbox import Limits
from codedance.types import ExecStatus
from tests.sandbox.conftest import assert_only_holder_and_spare, assert_state_intact, prepare_state

pytestmark = pytest.mark.tier("integration")

OK, ERROR, TIMEOUT, CRASHED, OOM, REFUSED = (
    ExecStatus.OK,
    ExecStatus.ERROR,
    ExecStatus.TIMEOUT,
    ExecStatus.CRASHED,
    ExecStatus.OOM,
    ExecStatus.REFUSED,
)
TAMPER = (
    "import signal\nfor s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGXCPU):\n"
    "    signal.signal(s, signal.SIG_IGN)\nsignal.alarm(0)\n"
)

# name -> (code, statuses allowed, seconds allowed); the step limit is 2 s
CASES = {
    # loops
    "busy loop": ("while True: pass", {TIMEOUT}, 4),
    "long sleep": ("import time; time.sleep(10**6)", {TIMEOUT}, 4),
    "BLAS matmul": (
        "import numpy as np\na = np.ones((6000, 6000))\nfor _ in range(100): a = a @ a",
        {TIMEOUT, OOM},
        5,
    ),
    "huge resize": (
        "from PIL import Image\nImage.new('L', (10, 10)).resize((40000, 40000))",
        {TIMEOUT, OOM, ERROR},
        5,
    ),
    "catastrophic regex": ("import re; re.match(r'(a+)+$', 'a' * 64 + 'b')", {TIMEOUT}, 4),
    "loop after signal tampering": (TAMPER + "while True: pass", {TIMEOUT}, 4),
    "sleep after signal tampering": (TAMPER + "import time; time.sleep(10**6)", {TIMEOUT}, 4),
    "exceptions caught in a loop": (
        "while True:\n    try:\n        while True: pass\n    except BaseException: pass",
        {TIMEOUT},
        4,
    ),
    # exits
    "exit()": ("exit()", {ERROR}, 2),
    "sys.exit()": ("import sys; sys.exit(3)", {ERROR}, 2),
    "os._exit": ("import os; os._exit(0)", {CRASHED}, 2),
    "os.abort": ("import os; os.abort()", {CRASHED}, 2),
    "segfault": ("import ctypes; ctypes.string_at(0)", {CRASHED}, 2),
    # attacks on the controller
    "kill the parent": ("import os; os.kill(os.getppid(), 9)", {ERROR}, 2),
    "kill(-1)": ("import os; os.kill(-1, 9)", {ERROR}, 2),
    "kill(-1) via raw syscall": (
        (
            "import ctypes; r = ctypes.CDLL(None).syscall(62, -1, 9)\nassert r != 0, 'kill "
            "went through'"
        ),
        {OK},
        2,
    ),
    "parent's memory": ("import os; open(f'/proc/{os.getppid()}/mem', 'rb').read(1)", {ERROR}, 2),
    "ptrace the parent": (
        (
            "import ctypes, os\nif ctypes.CDLL(None).ptrace(16, os.getppid(), 0, 0) != 0: "
            "raise OSError('denied')"
        ),
        {ERROR},
        2,
    ),
    "close inherited fds": ("import os; os.closerange(0, 4096)", {CRASHED}, 2),
    "write to fd 1": ("import os; os.write(1, b'direct bytes\\xff\\n')", {OK}, 2),
    # memory
    "bytearray(10**11)": ("b = bytearray(10**11)", {OOM}, 2),
    "growth loop": ("chunks = []\nwhile True: chunks.append(bytearray(50 << 20))", {OOM}, 5),
    "decompression bomb": (
        (
            "import struct, zlib\nfrom PIL import Image\n"
            "def chunk(t, d): return struct.pack('>I', len(d)) + t + d + "
            "struct.pack('>I', zlib.crc32(t + d))\n"
            "png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', "
            "100000, 100000, 8, 2, 0, 0, 0))\n"
            "open('bomb.png', 'wb').write(png + chunk(b'IEND', b''))\nImage.open('bomb.png').load()"
        ),
        {ERROR},
        3,
    ),
    "Image.new 60000x60000": (
        "from PIL import Image; im = Image.new('RGB', (60000, 60000))",
        {OOM, ERROR},
        3,
    ),
    # processes
    "fork bomb": (
        "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass",
        {TIMEOUT},
        6,
    ),
    "subprocess": ("import subprocess; subprocess.run(['ls'])", {ERROR}, 2),
    "os.system": (
        "import os\nif os.system('true') != 0: raise OSError('os.system failed')",
        {ERROR},
        2,
    ),
    "child left running": (
        "import os, time\nif os.fork() == 0:\n    time.sleep(1000)",
        {REFUSED},
        3,
    ),
    "child exited, not waited for": (
        "import os, time\nif os.fork() == 0:\n    os._exit(0)\ntime.sleep(0.2)",
        {OK},
        2,
    ),
    "daemonized grandchild": (
        (
            "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0: "
            "time.sleep(1000)\n    os._exit(0)\ntime.sleep(0.2)"
        ),
        {REFUSED},
        3,
    ),
    "thread left running": (
        (
            "import threading, time\nthreading.Thread(target=time.sleep, args=(100,), "
            "daemon=True).start()"
        ),
        {REFUSED},
        2,
    ),
    "multiprocessing pool": (
        "from multiprocessing import Pool\nprint(Pool(2).map(abs, [-1, -2]))",
        {ERROR, REFUSED, TIMEOUT},
        4,
    ),
    # files
    "write outside the workdir": ("open('/tmp/escape', 'w').write('x')", {ERROR}, 2),
    "write in the parent dir": ("open('../escape', 'w').write('x')", {ERROR}, 2),
    "write through a symlink": (
        "import os; os.symlink('/etc/passwd', 'link'); open('link', 'w').write('x')",
        {ERROR},
        2,
    ),
    "read /etc/shadow": ("print(open('/etc/shadow').read())", {ERROR}, 2),
    "overwrite the input image": ("open('input_image.jpg', 'wb').write(b'x')", {ERROR}, 2),
    "delete the input image": ("import os; os.remove('input_image.jpg')", {ERROR}, 2),
    "one huge file": (
        "open('huge.bin', 'wb').write(b'0' * (400 << 20))",
        {ERROR, OOM},
        4,
    ),  # files are memory on the tmpfs
    "writable shared mapping of a file": (
        (
            "import mmap\nf = open('m.bin', 'w+b'); f.write(b'A' * 4096); f.flush()\n"
            "mmap.mmap(f.fileno(), 4096)[:4] = b'EVIL'"
        ),
        {ERROR},
        2,
    ),
    "numpy memmap r+": (
        "import numpy as np\nnp.memmap('m.dat', np.uint8, 'w+', shape=(4096,))[:] = 7",
        {ERROR},
        2,
    ),
    "anonymous and read-only mappings": (
        (
            "import mmap\nm = mmap.mmap(-1, 4096); m[:1] = b'x'\n"
            "open('r.bin', 'wb').write(b'r' * 4096)\n"
            "r = open('r.bin', 'rb'); print(mmap.mmap(r.fileno(), 0, access=mmap.ACCESS_READ)[:1])"
        ),
        {OK},
        2,
    ),
    "a million small files": (
        "for i in range(10**6): open(f'f{i}', 'w').close()",
        {TIMEOUT, REFUSED},
        12,
    ),
    # network
    "outbound TCP": (
        "import socket; socket.create_connection(('1.1.1.1', 80), timeout=1)",
        {ERROR},
        3,
    ),
    "DNS": ("import socket; socket.getaddrinfo('example.com', 80)", {ERROR}, 3),
    "unix socket to a host daemon": (
        (
            "import socket; s = socket.socket(socket.AF_UNIX); "
            "s.connect('/run/dbus/system_bus_socket')"
        ),
        {ERROR},
        2,
    ),
    "out-of-band data on a unix socket": (
        "import socket\na, b = socket.socketpair()\na.send(b'x', socket.MSG_OOB)",
        {ERROR},
        2,
    ),
    "netlink socket": (
        "import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)",
        {ERROR},
        2,
    ),
    # namespaces
    "new user namespace": (
        "import ctypes\nif ctypes.CDLL(None).unshare(0x10000000) != 0: raise OSError('denied')",
        {ERROR},
        2,
    ),
    # tampering
    "replace builtins": (
        "import builtins\nbuiltins.print = None; builtins.len = None; builtins.open = None",
        {OK},
        2,
    ),
    "replace capture hooks": (
        "import matplotlib.pyplot as plt, PIL.Image\nplt.show = None; PIL.Image.Image.show = None",
        {OK},
        2,
    ),
    "atexit handler": ("import atexit, os\natexit.register(os._exit, 9)", {OK}, 2),
    "alarm left for the holder": ("import signal; signal.alarm(1)", {OK}, 2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hostile(jail, name):
    code, allowed, seconds = CASES[name]
    neighbour = jail()
    prepare_state(neighbour)
    neighbour_expected = neighbour.run("print(x)").stdout
    sandbox = jail([_png()], timeout_s=2.0, limits=Limits(memory=512 << 20))
    expected = prepare_state(sandbox)
    started = time.monotonic()
    result = sandbox.run(code)
    elapsed = time.monotonic() - started
    assert result.status in allowed, (result.status, result.error, result.notes)
    assert elapsed < seconds, f"{name} took {elapsed:.1f} s"
    if result.status is not OK:
        assert result.rolled_back
    if name == "alarm left for the holder":
        time.sleep(1.5)  # the alarm would have fired in the holder by now
    if name in ("replace builtins", "replace capture hooks"):
        check = sandbox.run(
            "import matplotlib.pyplot as plt\nplt.plot([1]); plt.show()\nprint(len('abc'))"
        )
        assert check.ok and check.stdout == "3\n" and len(check.images) == 1, check
    if result.status is OK and name not in ("write to fd 1", "kill(-1) via raw syscall"):
        return _assert_alive(sandbox, neighbour, neighbour_expected)
    assert_state_intact(sandbox, expected)
    _assert_alive(sandbox, neighbour, neighbour_expected)


def _assert_alive(sandbox, neighbour, neighbour_expected):
    assert sandbox.run("print('still here')").stdout == "still here\n"
    assert neighbour.run("print(x)").stdout == neighbour_expected
    assert_only_holder_and_spare(neighbour)


def test_controller_environment_is_invisible(jail, monkeypatch):
    monkeypatch.setenv("CODEDANCE_TEST_SECRET", "hunter2")
    sandbox = jail()
    result = sandbox.run(
        "import os, glob\nfound = 'hunter2' in str(dict(os.environ))\n"
        "for path in glob.glob('/proc/*/environ'):\n"
        "    try: found = found or b'hunter2' in open(path, 'rb').read()\n"
        "    except OSError: pass\nprint(found)"
    )
    assert result.stdout == "False\n"


def test_other_instances_files_are_invisible(jail):
    first, second = jail(), jail()
    assert first.run("open('mine.txt', 'w').write('private')").ok
    for code in (f"import os; os.listdir({first.workdir!r})",
                 f"open({os.path.join(first.workdir, 'mine.txt')!r}).read()",
                 f"open({os.path.join(first.workdir, 'new.txt')!r}, 'w').write('x')"):  # fmt: skip
        result = second.run(code)
        # not allowed (a uid per trajectory), or not there at all (a mount view per trajectory)
        assert result.status is ERROR and result.error.type in (
            "PermissionError",
            "FileNotFoundError",
        ), code


def test_failed_step_files_are_rolled_back(jail):
    sandbox = jail()
    assert sandbox.run("open('a.txt', 'w').write('one'); import os; os.makedirs('d/e')").ok
    failed = sandbox.run(
        "open('a.txt', 'w').write('two'); open('d/e/b.txt', 'w').write('new')\n"
        "import os; os.symlink('a.txt', 'l'); os.rename('d', 'moved'); 1/0"
    )
    assert failed.status is ERROR and failed.rolled_back
    after = sandbox.run(
        "import os; print(open('a.txt').read(), sorted(os.listdir('.')), os.listdir('d/e'))"
    )
    assert after.stdout == "one ['.tmp', 'a.txt', 'd'] []\n"


def _png() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), (10, 200, 30)).save(buffer, format="PNG")
    return buffer.getvalue()
