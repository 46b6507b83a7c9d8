"""A restore's files are charged to the trajectory they belong to, not to the controller
(restored files charged to the controller let a hostile trajectory move its committed files out
of ``memory_total`` and fill the tmpfs pool until an honest neighbour's restore fails with
ENOSPC and the neighbour is lost).

A service of its own (``memory_total`` 640 MiB) with cgroups, where restores are copied by a
helper process that joins the trajectory's memory group (`charged_copy`; on v2 a leaf of the
trajectory's group); without cgroups these tests skip, and the ones that need the OOM arbiter or
v1's files skip on v2 (scripts/test-in-cgroup-v2-vm.sh runs the rest there). Hostile code runs
only in ``jail`` sandboxes.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest

from codedance.sandbox import Limits, SandboxService, cgroups
from codedance.sandbox.memory import cgroup_memory
from codedance.sandbox.memory.charged_copy import ChargedCopies
from codedance.types import ExecStatus

pytestmark = pytest.mark.tier("integration")

MIB = 1 << 20
WRITE = (
    "chunk = b'x' * (1 << 20)\nfor i in range({count}):\n"
    "    with open('{prefix}%d' % i, 'wb') as f:\n        for _ in range(100): f.write(chunk)"
)
DELETE_AND_FAIL = (
    "import os\nfor name in os.listdir('.'):\n    if name.startswith('{prefix}'): os.remove(name)\n"
    "raise RuntimeError('fail on purpose: the rollback writes the files back')"
)


@pytest.fixture(scope="module")
def service():
    """Overrides the suite's shared service for this module's ``make``/``jail`` fixtures."""
    svc = SandboxService(memory_total=640 << 20)
    if svc.cgroup_layout is None:
        svc.close()
        pytest.skip("charged restores need cgroups (and root)")
    assert svc._charged_copies is not None, (
        "cgroups are writable here, yet restores are not charged copies"
    )
    yield svc
    svc.close()


@pytest.fixture
def v1(service):
    """For tests of the OOM arbiter or of cgroup v1's files."""
    if service.cgroup_layout.version != 1:
        pytest.skip("needs cgroup v1 (the OOM arbiter, v1's memory files)")


def test_a_restored_file_is_charged_to_its_trajectory(make):
    sandbox = make(timeout_s=60)
    assert sandbox.run("open('big', 'wb').write(b'x' * (64 << 20))").status is ExecStatus.OK
    committed = sandbox._cgroup.unreclaimable_bytes()
    assert committed >= 64 * MIB
    result = sandbox.run("import os\nos.remove('big')\nraise ValueError('undo the removal')")
    assert result.status is ExecStatus.ERROR and result.rolled_back
    # the controller's own copy left the trajectory charged for ~0 MiB of the 64 it holds again
    assert sandbox._cgroup.unreclaimable_bytes() >= committed - 8 * MIB
    check = sandbox.run(
        "import os\nprint(os.path.getsize('big'), open('big', 'rb').read().count(b'x'))"
    )
    assert check.stdout.split() == [str(64 * MIB)] * 2


def test_the_entries_a_restore_makes_again_are_charged_to_its_trajectory(make):
    """Not only a restore's file data is charged to the trajectory: the inodes of the files and
    directories it makes again would otherwise be charged to the controller (~1.4 KiB each,
    ~14 MiB per trajectory at the default entry limit, outside ``memory_total``)."""
    sandbox = make(timeout_s=60)
    names = "[f'{i:04d}' + 'n' * 200 for i in range(5000)]"
    assert sandbox.run(
        f"import os\nos.mkdir('d')\nfor name in {names}:\n    open('d/' + name, 'w').close()"
    ).ok

    def kernel_memory() -> int:  # v1's kernel memory counter; v2's slab (inodes and dentries)
        if sandbox._cgroup.layout.version == 1:
            with open(
                os.path.join(sandbox._cgroup.memory_dir, "memory.kmem.usage_in_bytes")
            ) as handle:
                return int(handle.read())
        return cgroup_memory.stat_value(
            open(os.path.join(sandbox._cgroup.memory_dir, "memory.stat"), "rb").read(), b"slab"
        )

    before = kernel_memory()
    undone = sandbox.run("import shutil\nshutil.rmtree('d')\nraise ValueError('undo the removal')")
    assert undone.status is ExecStatus.ERROR and undone.rolled_back, undone
    assert sandbox.run("print(len(os.listdir('d')))").stdout == "5000\n"
    # the controller's own creates left the trajectory charged ~4 MiB less than before
    assert kernel_memory() >= before - MIB, (before, kernel_memory())


def test_failing_steps_cannot_move_a_trajectorys_files_out_of_its_charge(jail, service, v1):
    """The attack: A commits 400 MiB, deletes it in a failing step (the rollback writes
    it back), then commits more. A is charged for what it holds, so its next commit past
    ``memory_total`` is stopped; B's honest rollback still finds room and B keeps its file."""
    a, b = jail(timeout_s=60, limits=Limits(memory=1 << 30)), jail(timeout_s=60)
    assert b.run("open('notes.txt', 'w').write('B keeps this\\n' * 100000)").status is ExecStatus.OK
    assert a.run(WRITE.format(count=4, prefix="r0_")).status is ExecStatus.OK
    undone = a.run(DELETE_AND_FAIL.format(prefix="r0_"))
    assert undone.status is ExecStatus.ERROR and undone.rolled_back
    assert a._cgroup.unreclaimable_bytes() >= 390 * MIB, "A's restored files are not charged to A"
    more = a.run(WRITE.format(count=3, prefix="r1_"))
    assert more.status is ExecStatus.OOM and more.rolled_back, more
    honest = b.run("import os\nos.remove('notes.txt')\n1/0")
    assert honest.status is ExecStatus.ERROR and honest.rolled_back, honest
    assert b.run("print(open('notes.txt').read()[:12])").stdout.strip() == "B keeps this"
    assert (
        a.run(
            "import os\nprint(len([n for n in os.listdir('.') if n.startswith('r0_')]))"
        ).stdout.strip()
        == "4"
    )


def test_a_helper_that_ended_while_idle_is_replaced(make, service):
    sandbox = make(timeout_s=60)
    sandbox.run("open('f', 'w').write('kept')")
    assert sandbox.run("import os\nos.remove('f')\n1/0").rolled_back
    idle = service._charged_copies.helper_pids
    assert idle, "no helper was kept for the next restore"
    for pid in idle:  # our own children, by pid
        os.kill(pid, 9)
    assert sandbox.run("import os\nos.remove('f')\n1/0").rolled_back
    assert sandbox.run("print(open('f').read())").stdout.strip() == "kept"
    assert set(service._charged_copies.helper_pids).isdisjoint(idle)


@pytest.fixture
def group(service):
    """A memory group of the test's own beside the service's (the helpers' home is the
    controller's group), removed after the test."""
    home = cgroups.own_group_dir(service.cgroup_layout)
    path = os.path.join(
        os.path.dirname(service.cgroup_layout.memory_parent),
        f"codedance-test-{uuid.uuid4().hex[:8]}",
    )
    os.mkdir(path)
    copies = ChargedCopies(home)
    yield path, copies
    copies.close()
    os.rmdir(path)


def _set(group_dir: str, name: str, value: int) -> None:
    with open(os.path.join(group_dir, name), "w") as handle:
        handle.write(str(value))


def test_a_retried_create_takes_its_own_earlier_entry_and_follows_no_link(tmp_path):
    """A helper's create whose answer did not fit a full group is tried again: the entry it made
    the first time is taken as made (the trajectory is frozen meanwhile), never a link."""
    from codedance.sandbox.memory.charged_copy import _make

    (tmp_path / "file").write_text("partial")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "file")
    directory = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name, is_dir in ((b"file", False), (b"dir", True), (b"new", False)):
            os.close(_make(directory, name, -1, -1, directory=is_dir))
        for name, is_dir in ((b"link", False), (b"link", True), (b"../x", False), (b"..", True)):
            with pytest.raises(OSError):
                _make(directory, name, -1, -1, directory=is_dir)
    finally:
        os.close(directory)
    assert (tmp_path / "new").is_file() and (tmp_path / "file").read_text() == "partial"


def test_a_helper_that_does_not_answer_is_killed_at_the_deadline(group, tmp_path):
    """A helper that stops answering (here: stopped with SIGSTOP; in life, asleep in the
    kernel's OOM wait) is killed at the restore's deadline, not kept, and the copy fails."""
    path, copies = group
    source = tmp_path / "source"
    source.write_bytes(b"y" * MIB)
    with open(source, "rb") as reader, open(tmp_path / "target", "wb") as target:
        with copies.charged_to(path, time.monotonic() + 30) as writer:
            writer.copy(reader.fileno(), target.fileno())
        [stuck] = copies.helper_pids
        os.kill(stuck, signal.SIGSTOP)  # our own child, by pid
        started = time.monotonic()
        with pytest.raises(TimeoutError), copies.charged_to(path, started + 1.0) as writer:
            writer.copy(reader.fileno(), target.fileno())
    assert time.monotonic() - started < 30
    assert copies.helper_pids == []
    with pytest.raises(ChildProcessError):
        os.waitpid(stuck, os.WNOHANG)  # killed and reaped


def test_a_copy_the_full_group_refuses_is_tried_again_until_memory_is_freed(v1, group, tmp_path):
    """In a full group a write fails with ENOMEM (the kernel's killer switched off there, as at
    the service's parent): the copy is tried again until the arbiter frees memory (here: the
    limit is raised after a moment), not failed at once, which would lose the trajectory."""
    path, copies = group
    _set(path, "memory.limit_in_bytes", 16 * MIB)
    _set(path, "memory.oom_control", 1)
    source = tmp_path / "source"
    source.write_bytes(b"y" * (64 * MIB))
    target = os.memfd_create("target")  # shared memory: charged to its writer, never reclaimed
    freed = threading.Timer(0.5, _set, (path, "memory.limit_in_bytes", 256 * MIB))
    try:
        with open(source, "rb") as reader:
            freed.start()
            with copies.charged_to(path, time.monotonic() + 60) as writer:
                writer.copy(reader.fileno(), target)
        assert os.fstat(target).st_size == 64 * MIB
        assert os.pread(target, 8, 64 * MIB - 8) == b"y" * 8
        with open(os.path.join(path, "memory.usage_in_bytes")) as usage:
            assert int(usage.read()) >= 60 * MIB  # charged there
        assert len(copies.helper_pids) == 1  # back home, kept for the next restore
    finally:
        freed.join()
        os.close(target)


def _held(service) -> int:
    """What the service's trajectories hold as the arbiter measures it (unreclaimable memory)."""
    texts = []
    for name in ("memory.usage_in_bytes", "memory.stat", "memory.kmem.usage_in_bytes"):
        with open(os.path.join(service.cgroup_layout.memory_parent, name), "rb") as handle:
            texts.append(handle.read())
    return cgroup_memory.unreclaimable(1, *texts, prefix=b"total_")


def _commit_files_up_to(sandbox, service, target: int) -> None:
    """Commit files in ``sandbox`` until the service holds about ``target`` bytes, in steps
    that each grow by less than the arbiter's slack (none of them is stopped)."""
    for n in range(64):
        missing = (target - _held(service)) >> 20
        if missing <= 1:
            return
        result = sandbox.run(
            f"with open('fill{n}', 'wb') as f:\n    for _ in "
            f"range({min(missing, 24)}): f.write(b'x' * (1 << 20))"
        )
        assert result.ok, result
    raise AssertionError("the service did not fill")


def test_a_restore_the_full_service_refuses_makes_the_largest_grower_pay(jail, service, v1):
    """B's failing step deletes its 20 MiB file; A's running step takes that memory (24 MiB,
    within the arbiter's slack, so "nearly full" alone stops no one) and the service is full.
    B's restore is refused (ENOMEM): while it waits, the arbiter treats the service as out of
    memory and stops A's step, B's restore completes and B keeps its file. (Without that, B's
    restore waited until its deadline and B was lost.)"""
    limit = service.memory_total
    a, b = jail(timeout_s=60, limits=Limits(memory=1 << 30)), jail(timeout_s=10)
    assert b.run("open('f', 'wb').write(b'B' * (20 << 20))").ok
    _commit_files_up_to(a, service, limit - (16 << 20))
    results = {}
    deleting = threading.Thread(
        target=lambda: results.setdefault(
            "b",
            b.run(
                "import os, time\nos.remove('f')\nopen('deleted', 'w').close()\n"
                "while not os.path.exists('go'): time.sleep(0.01)\nraise "
                "RuntimeError('undo the removal')"
            ),
        )
    )
    deleting.start()
    _wait_for(os.path.join(b.workdir, "deleted"), deleting)
    grabbing = threading.Thread(
        target=lambda: results.setdefault(
            "a",
            a.run(
                "import time\nwith open('grab', 'wb') as f:\n    for _ in range(24): "
                "f.write(b'x' * (1 << 20))\n"
                "open('ready', 'w').close()\ntime.sleep(30)"
            ),
        )
    )
    grabbing.start()
    _wait_for(os.path.join(a.workdir, "ready"), grabbing)
    assert _held(service) + (20 << 20) > limit, (
        "the service is not full enough to refuse B's restore"
    )
    _give(b, "go")
    deleting.join(timeout=60)
    grabbing.join(timeout=60)
    assert results["b"].status is ExecStatus.ERROR and results["b"].rolled_back, results["b"]
    assert results["a"].status is ExecStatus.OOM and results["a"].rolled_back, results["a"]
    kept = b.run(
        "f = open('f', 'rb')\nprint(sum(c.count(b'B') for c in iter(lambda: f.read(1 << 16), b'')))"
    )
    assert kept.stdout.strip() == str(20 << 20), kept


def _give(sandbox, name: str) -> None:
    """Put an empty file of the trajectory's own into its working directory (one it may remove)."""
    staged = os.path.join(sandbox.workdir, f".{name}-staged")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.fchown(fd, sandbox.uid, sandbox.uid)
    os.close(fd)
    os.rename(staged, os.path.join(sandbox.workdir, name))


def _wait_for(path: str, thread: threading.Thread) -> None:
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        assert thread.is_alive() and time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_a_restore_removes_the_steps_files_before_it_copies_any_back(make):
    """An honest step deletes two committed 100 MiB files, writes 200 MiB into a subdirectory
    and fails. Copying the deleted files back before removing the new ones needed 400 MiB over
    the holder, past the trajectory's own 360 MiB: the kernel killed the copying helper and the
    trajectory was lost. Removing first, the restore never needs more than
    the checkpoint holds."""
    sandbox = make(timeout_s=60, limits=Limits(memory=360 << 20))
    write = (
        "def write(name):\n    with open(name, 'wb') as f:\n"
        "        for _ in range(100): f.write(b'x' * (1 << 20))\n"
    )
    assert sandbox.run(write + "import os\nos.mkdir('out')\nwrite('a0')\nwrite('a1')").ok
    failed = sandbox.run(
        write + "import os\nfor i in range(2):\n    os.remove(f'a{i}')\n    write(f'out/b{i}')\n"
        "raise ValueError('bad result')"
    )
    assert failed.status is ExecStatus.ERROR and failed.rolled_back, failed
    after = sandbox.run(
        "import os\nprint(os.path.getsize('a0') + os.path.getsize('a1'), os.listdir('out'))"
    )
    assert after.stdout == f"{200 * MIB} []\n", after


def test_closing_the_sandbox_interrupts_a_copy_waiting_for_memory(v1, group, tmp_path):
    """A restore waiting for a full service ends as soon as the sandbox is closed (its interrupt
    eventfd), not at its deadline (else close() waits the whole timeout per sandbox)."""
    path, copies = group
    _set(path, "memory.limit_in_bytes", 16 * MIB)
    _set(path, "memory.oom_control", 1)
    source = tmp_path / "source"
    source.write_bytes(b"y" * (64 * MIB))
    target, interrupt = os.memfd_create("target"), os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    closing = threading.Timer(0.5, os.eventfd_write, (interrupt, 1))
    try:
        with open(source, "rb") as reader:
            started = time.monotonic()
            closing.start()
            with (
                pytest.raises(InterruptedError),
                copies.charged_to(path, started + 60, interrupt) as writer,
            ):
                writer.copy(reader.fileno(), target)
        assert time.monotonic() - started < 30
    finally:
        closing.join()
        os.close(target)
        os.close(interrupt)


def test_a_neighbour_cannot_commit_what_a_failing_step_freed(jail, service, v1):
    """B's step deletes its committed 200 MiB file and has not ended; A's step takes the freed
    memory and answers. Committing A would leave B's rollback no room (B would be
    lost), so A's step ends as oom, rolled back, and B's rollback keeps its file."""
    a, b = (
        jail(timeout_s=60, limits=Limits(memory=1 << 30)),
        jail(timeout_s=60, limits=Limits(memory=1 << 30)),
    )
    assert b.run(
        "with open('big', 'wb') as f:\n    for _ in range(200): f.write(b'B' * (1 << 20))"
    ).ok
    results = {}
    deleting = threading.Thread(
        target=lambda: results.setdefault(
            "b",
            b.run(
                "import os, time\nos.remove('big')\nopen('deleted', 'w').close()\n"
                "while not os.path.exists('go'): time.sleep(0.01)\nraise "
                "RuntimeError('undo the removal')"
            ),
        )
    )
    deleting.start()
    try:
        _wait_for(os.path.join(b.workdir, "deleted"), deleting)
        take = (
            service.memory_total - _held(service)
        ) // MIB - 48  # below "nearly full": no one is stopped
        grabbed = a.run(f"import numpy as np\nkeep = np.ones({take} << 20, np.uint8)")
        assert grabbed.status is ExecStatus.OOM and grabbed.rolled_back, grabbed
        assert "owed to a neighbour's step" in grabbed.notes[0]
    finally:
        _give(b, "go")
        deleting.join(timeout=60)
    assert results["b"].status is ExecStatus.ERROR and results["b"].rolled_back, results["b"]
    kept = b.run("import os\nprint(os.path.getsize('big'))")
    assert kept.stdout.strip() == str(200 * MIB), kept
    assert a.run("import numpy as np\nkeep = np.ones(64 << 20, np.uint8)").ok  # nothing owed now


def test_a_restore_empties_files_changed_in_place_before_it_copies_any_back(make):
    """An honest step empties committed 250 MiB ``a`` in place and writes 250 MiB into committed,
    empty ``b``, then fails. Rewriting ``a`` before emptying ``b`` held both, past the
    trajectory's 480 MiB: the copying helper was killed and the trajectory lost. Files changed in
    place are emptied before anything is copied back."""
    sandbox = make(timeout_s=60, limits=Limits(memory=480 << 20))
    fill = (
        "def fill(name):\n    with open(name, 'wb') as f:\n        for _ in range(250): "
        "f.write(b'x' * (1 << 20))\n"
    )
    assert sandbox.run(fill + "open('b', 'wb').close()\nfill('a')").ok
    failed = sandbox.run(
        fill + "open('a', 'wb').close()\nfill('b')\nraise ValueError('bad result')"
    )
    assert failed.status is ExecStatus.ERROR and failed.rolled_back, failed
    after = sandbox.run("import os\nprint(os.path.getsize('a'), os.path.getsize('b'))")
    assert after.stdout == f"{250 * MIB} 0\n", after


def test_the_helper_ranks_with_the_holders_for_the_oom_killer(make, service):
    """A helper in a trajectory's group during a restore, at oom_score_adj 0 beside a holder at
    -1000, would be the kernel's only OOM choice there (a root process outside the
    jail killed for the trajectory). Helpers get the holders' value (where the controller may
    lower it; else both stay at 0)."""
    sandbox = make(timeout_s=60)
    sandbox.run("open('f', 'w').write('kept')")
    assert sandbox.run("import os\nos.remove('f')\n1/0").rolled_back
    idle = service._charged_copies.helper_pids
    assert idle, "no helper was kept for the next restore"
    for pid in idle:
        with open(f"/proc/{pid}/oom_score_adj") as handle:
            assert int(handle.read()) == sandbox._holder_oom_score_adj
    with open(f"/proc/{sandbox._holder_pid}/oom_score_adj") as handle:
        assert int(handle.read()) == sandbox._holder_oom_score_adj


def test_a_new_helper_gets_the_holders_oom_score_adj(group, tmp_path, monkeypatch):
    """The same, wherever the controller lacks CAP_SYS_RESOURCE (holders then stay at 0, like
    helpers): with a value any root may set (raising needs no capability), a new helper takes
    it before its first answer, even when the thread that starts it acts as a trajectory (its
    file-system uid, as a restore's thread does, which /proc refuses to set it for)."""
    from codedance.sandbox import files, procs

    monkeypatch.setattr(procs, "HOLDER_OOM_SCORE_ADJ", 500)
    path, copies = group
    source = tmp_path / "source"
    source.write_bytes(b"y" * MIB)
    with (
        open(source, "rb") as reader,
        open(tmp_path / "target", "wb") as target,
        copies.charged_to(path, time.monotonic() + 30) as writer,
        files.acting_as((65534, 65534)),
    ):
        writer.copy(reader.fileno(), target.fileno())
    [helper] = copies.helper_pids
    with open(f"/proc/{helper}/oom_score_adj") as handle:
        assert int(handle.read()) == 500
