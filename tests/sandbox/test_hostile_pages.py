"""Shared page cache against its first reader: no step locks it, probes it or evicts it.

A page of a shared read-only file (site-packages, the system's libraries) is charged to the
memory group of whoever read it first: a neighbour, the controller, the host. Locked by a step,
it would leave its owner's reclaimable cache, escape ``memory_total`` and read as the owner's
growth to the OOM arbiter; probed with ``RWF_NOWAIT`` it shows which modules a neighbour
imported. Hostile code runs only in sandboxes from the ``jail`` fixture (PID namespace and
seccomp asserted first); the layer tests fork a child of the test that loads one guard alone.
"""

from __future__ import annotations

import ast
import ctypes
import errno
import glob
import mmap
import os
import resource
import time

import matplotlib
import pytest

from codedance.sandbox.jail import guards

pytestmark = pytest.mark.tier("integration")

# shared read-only files the jail sees (site-packages): one of Matplotlib's fonts, and the
# largest library of OpenCV (80 MiB, of which a step maps a few MiB)
_SITE = os.path.dirname(os.path.dirname(matplotlib.__file__))
SHARED = os.path.join(_SITE, "matplotlib/mpl-data/fonts/ttf/DejaVuSans.ttf")
LARGE = max(glob.glob(os.path.join(_SITE, "cv2/*.so")), key=os.path.getsize)
MiB = 1 << 20
_MAP_LOCKED, _RWF_NOWAIT = 0x2000, 0x8

# maps a shared file read-only and private (as any reader may) and tries every way to lock it:
# itself (its mappings live on in the committed holder) and four children at once, 8 MiB each,
# while it reads the host's Unevictable before and after (a window of milliseconds)
LOCK_SHARED_PAGES = f"""
import ctypes, errno, os, resource
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, \
ctypes.c_long]
libc.syscall.restype = ctypes.c_long
PROT_READ, MAP_PRIVATE, MAP_LOCKED, FAILED, MiB = 1, 2, {_MAP_LOCKED}, ctypes.c_void_p(-1).value, \
1 << 20
outcomes = {{}}

def unevictable():
    return next(int(line.split()[1]) << 10 for line in open('/proc/meminfo') if \
line.startswith('Unevictable:'))

def mapped(offset, flags, size=3 * MiB):
    fd = os.open({LARGE!r}, os.O_RDONLY)
    address = libc.mmap(None, size, PROT_READ, flags, fd, offset)
    os.close(fd)
    return address, size, ctypes.get_errno()

def outcome(result):
    return 'locked' if result == 0 else errno.errorcode[ctypes.get_errno()]

before = unevictable()
address, size, _ = mapped(0, MAP_PRIVATE)
outcomes['mlock'] = outcome(libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(size)))
outcomes['mlock2'] = outcome(libc.syscall(325, ctypes.c_void_p(address), ctypes.c_size_t(size), 0))
address, size, error = mapped(size, MAP_PRIVATE | MAP_LOCKED)
outcomes['MAP_LOCKED'] = 'locked' if address != FAILED else errno.errorcode[error]
outcomes['mlockall'] = outcome(libc.mlockall(1))  # MCL_CURRENT
ready, hold = os.pipe(), os.pipe()
children = []
for index in range(4):
    pid = os.fork()
    if pid == 0:
        os.close(hold[1])
        address, size, _ = mapped((1 + index) * 8 * MiB, MAP_PRIVATE, 8 * MiB)
        libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(size))
        os.write(ready[1], b'.')
        os.read(hold[0], 1)
        os._exit(0)
    children.append(pid)
os.read(ready[0], 1), os.read(ready[0], 1), os.read(ready[0], 1), os.read(ready[0], 1)
rise = unevictable() - before
os.close(hold[1])
for pid in children:
    os.waitpid(pid, 0)
print(sorted(outcomes.items()), resource.getrlimit(resource.RLIMIT_MEMLOCK), rise < 8 * MiB, rise \
>> 20)
"""


def test_no_step_can_lock_shared_pages_nor_raise_the_hosts_unevictable(jail):
    """``mlock``, ``mlock2``, ``mmap(MAP_LOCKED)`` and ``mlockall`` of a shared file all fail
    with ``EPERM``, and the host's Unevictable does not rise while a step and four children
    try: without the guards it rises by ~38 MiB, none of it reclaimable, and the committed
    holder keeps its 6 MiB."""
    sandbox = jail()
    result = sandbox.run(LOCK_SHARED_PAGES)
    denied = [
        ("MAP_LOCKED", "EPERM"),
        ("mlock", "EPERM"),
        ("mlock2", "EPERM"),
        ("mlockall", "EPERM"),
    ]
    assert result.ok and result.stdout.startswith(f"{denied} (0, 0) True "), result
    assert sandbox.run("print('alive')").stdout == "alive\n"


def test_page_cache_residency_probes_are_refused_and_plain_reads_work(jail):
    """``preadv2``/``pwritev2`` with ``RWF_NOWAIT`` (an uncached page fails at once: which shared
    files a neighbour read), ``cachestat`` and ``fadvise(DONTNEED)`` (the eviction that resets a
    probe) fail with ``EPERM``; the same calls without the flag, and other advice, still work."""
    sandbox = jail()
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, "
        "use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
        f"shared = os.open({SHARED!r}, os.O_RDONLY)\nown = os.open('own.bin', "
        "os.O_RDWR | os.O_CREAT)\n"
        "os.write(own, b'x' * 4096)\nfound = []\n"
        "def attempt(call):\n    try:\n        found.append(call())\n"
        "    except OSError as exc:\n        found.append(exc.errno)\n"
        "attempt(lambda: os.preadv(shared, [bytearray(4096)], 0, os.RWF_NOWAIT))\n"
        "attempt(lambda: os.pwritev(own, [b'y' * 4096], 0, os.RWF_NOWAIT))\n"
        "attempt(lambda: os.posix_fadvise(shared, 0, 0, os.POSIX_FADV_DONTNEED))\n"
        "r = libc.syscall(451, shared, ctypes.byref((ctypes.c_uint64 * 2)(0, 0)), "
        "ctypes.byref((ctypes.c_uint64 * 5)()), 0)\n"
        "found.append(ctypes.get_errno() if r == -1 else 'allowed')\n"
        "attempt(lambda: os.preadv(shared, [bytearray(4096)], 0))\n"
        "attempt(lambda: os.posix_fadvise(shared, 0, 0, os.POSIX_FADV_SEQUENTIAL))\n"
        "print(found)"
    )
    result = sandbox.run(code)
    assert result.ok and result.stdout == "[1, 1, 1, 1, 4096, None]\n", result  # EPERM x 4


def test_ordinary_libraries_work_without_locked_memory(jail):
    """With ``RLIMIT_MEMLOCK`` 0 and locking refused, NumPy, Pillow, OpenCV and Matplotlib import
    and a typical crop-and-plot step returns its images."""
    sandbox = jail([_png()])
    result = sandbox.run(
        "import numpy as np, PIL, cv2, matplotlib.pyplot as plt, resource\n"
        "crop = input_image.crop((10, 5, 30, 25)).resize((40, 40))\n"
        "edges = cv2.Canny(np.asarray(crop.convert('L')), 50, 150)\n"
        "plt.imshow(edges); plt.title('edges'); plt.show()\n"
        "print(crop.size, edges.shape, resource.getrlimit(resource.RLIMIT_MEMLOCK))\ncrop"
    )
    assert result.ok and result.stdout == "(40, 40) (40, 40) (0, 0)\n", result
    assert len(result.images) == 2, result


def _in_child(body) -> list:
    """Run ``body`` in a forked child of the test and return what it returns (a list of ints)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write_end, repr(body()).encode())
        except BaseException as exc:  # noqa: BLE001 - reported to the test, which fails with it
            os.write(write_end, repr(f"{type(exc).__name__}: {exc}").encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        answer = handle.read().decode()
    _, status = os.waitpid(pid, 0)
    assert answer, f"the child failed before it answered (wait status {status:#x})"
    return ast.literal_eval(answer)


def _lock_attempts() -> list:
    """errno (0: done) of mlock, mmap(MAP_LOCKED), preadv2(RWF_NOWAIT), then of a plain mmap and
    a plain preadv2, which must stay allowed."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    buffer = mmap.mmap(-1, 4096)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    found = [
        0
        if libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(4096)) == 0
        else ctypes.get_errno()
    ]
    anonymous = 0x22  # MAP_PRIVATE | MAP_ANONYMOUS
    for flags in (anonymous | _MAP_LOCKED, anonymous):
        found.append(
            0
            if libc.mmap(None, 4096, 3, flags, -1, 0) != ctypes.c_void_p(-1).value
            else ctypes.get_errno()
        )
    fd = os.open(SHARED, os.O_RDONLY)
    for flags in (_RWF_NOWAIT, 0):
        try:
            os.preadv(fd, [bytearray(16)], 0, flags)
            found.append(0)
        except OSError as exc:
            found.append(exc.errno)
    return found


@pytest.mark.skipif(
    os.geteuid() != 0, reason="root's CAP_IPC_LOCK ignores RLIMIT_MEMLOCK: the filter is then alone"
)
def test_the_seccomp_filter_alone_refuses_locking_and_nowait_reads():
    """Root (``CAP_IPC_LOCK``: no memlock limit applies) under the jail's filter: locking and
    ``RWF_NOWAIT`` reads are refused by the filter itself, plain mappings and reads are not."""
    pytest.importorskip("pyseccomp")

    def body():
        guards.forbid_new_privileges()
        guards.install_seccomp()
        os.posix_fadvise(
            os.open(SHARED, os.O_RDONLY), 0, 0, os.POSIX_FADV_WILLNEED
        )  # a cached page reads at once
        return _lock_attempts()

    assert _in_child(body) == [errno.EPERM, errno.EPERM, 0, errno.EPERM, 0]


def test_the_seccomp_filter_alone_refuses_scheduling_others():
    """Under the jail's filter a process may renice, pin and reschedule itself (pid 0), never
    another process of its uid (a sleeping sibling here), nor every process of its uid at once."""
    pytest.importorskip("pyseccomp")
    sibling = os.fork()
    if sibling == 0:
        time.sleep(60)
        os._exit(0)

    def body():
        guards.forbid_new_privileges()
        guards.install_seccomp()
        outcomes = []
        for call in (
            lambda pid: os.setpriority(os.PRIO_PROCESS, pid, 19),
            lambda pid: os.sched_setaffinity(pid, {0}),
            lambda pid: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)),
            lambda pid: os.sched_setparam(pid, os.sched_param(0)),
        ):
            for pid in (0, sibling):
                try:
                    call(pid)
                    outcomes.append(0)
                except OSError as exc:
                    outcomes.append(exc.errno)
        try:
            os.setpriority(os.PRIO_USER, 0, 19)
            outcomes.append(0)
        except OSError as exc:
            outcomes.append(exc.errno)
        return outcomes

    try:
        assert _in_child(body) == [0, errno.EPERM] * 4 + [errno.EPERM]
        assert os.getpriority(os.PRIO_PROCESS, sibling) == os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        os.kill(sibling, 9)
        os.waitpid(sibling, 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")
def test_the_rlimits_alone_refuse_locking():
    """An unprivileged process under the holder's rlimits (no filter) can lock nothing."""

    def body():
        guards.apply_rlimits(address_space=0, file_size=0, open_files=0, processes=0)
        guards.drop_privileges(65534, 65534)
        return [*_lock_attempts()[:2], *resource.getrlimit(resource.RLIMIT_MEMLOCK)]

    assert _in_child(body) == [errno.EPERM, errno.EPERM, 0, 0]


def _drop_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)  # only clean pages are dropped
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def _unevictable(sandbox) -> int:
    with open(os.path.join(sandbox._cgroup.memory_dir, "memory.stat"), "rb") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(b"unevictable "))


@pytest.mark.usefixtures("local")
def test_pages_a_trajectory_read_first_and_another_process_locked_are_not_its_growth(make):
    """A trajectory reads a file first (its input image, 7 MiB on disk, whose cache is then
    charged to it); a process outside the service then locks its pages. The arbiter's measure of
    the trajectory does not grow: no process of a trajectory can lock memory, so its unevictable
    pages were locked by someone else, and it must not pay for them."""
    sandbox = make([_bmp()])
    if sandbox._cgroup is None or os.geteuid() != 0:
        pytest.skip(
            "needs the trajectory's memory cgroup (root), and root's CAP_IPC_LOCK to lock its pages"
        )
    found = sandbox.run("import os\nprint(os.path.realpath(input_image_path))")
    path = found.stdout.strip()
    assert found.ok and os.path.isfile(path), found  # the jail sees the inputs at their host path
    _drop_cache(path)
    assert sandbox.run(f"data = open({path!r}, 'rb').read()\ndel data").ok
    before, unevictable = sandbox.memory_growth(), _unevictable(sandbox)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd, size = os.open(path, os.O_RDONLY), os.path.getsize(path)
    address = libc.mmap(
        None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0
    )  # the file's own cache pages
    os.close(fd)
    try:
        assert libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(size)) == 0, os.strerror(
            ctypes.get_errno()
        )
        gained = _unevictable(sandbox) - unevictable
        assert gained > size // 2, (gained, size)  # the pages were charged to the trajectory
        grown = sandbox.memory_growth() - before  # what the arbiter ranks the trajectory by
        assert grown < MiB, (
            f"{grown / MiB:.1f} MiB of growth for {gained / MiB:.1f} MiB another process locked"
        )
    finally:
        libc.munmap(address, size)


def _bmp() -> bytes:
    """A 7 MiB image file (uncompressed), for its page cache."""
    import io

    import numpy as np
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (1536, 1536, 3), np.uint8)).save(
        buffer, format="BMP"
    )
    return buffer.getvalue()


def _png() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), (10, 200, 30)).save(buffer, format="PNG")
    return buffer.getvalue()
