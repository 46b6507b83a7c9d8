"""A restore's files are charged to the trajectory they belong to, not to the controller (red team,
stop 21: restored files charged to the controller let a hostile trajectory move its committed
files out of ``memory_total`` and fill the tmpfs pool until an honest neighbour's restore failed
with ENOSPC and the neighbour was lost).

A service of its own (``memory_total`` 640 MiB) on cgroup v1, where restores are copied by a
helper process that joins the trajectory's memory group (`charged_copy`); elsewhere these tests
skip and docs/sandbox.md says what happens. Hostile code runs only in ``jail`` sandboxes.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest

from codedance.sandbox import Limits, SandboxService
from codedance.sandbox.charged_copy import ChargedCopies
from codedance.types import ExecStatus

MIB = 1 << 20
WRITE = ("chunk = b'x' * (1 << 20)\nfor i in range({count}):\n"
         "    with open('{prefix}%d' % i, 'wb') as f:\n        for _ in range(100): f.write(chunk)")
DELETE_AND_FAIL = ("import os\nfor name in os.listdir('.'):\n    if name.startswith('{prefix}'): os.remove(name)\n"
                   "raise RuntimeError('fail on purpose: the rollback writes the files back')")


@pytest.fixture(scope="module")
def service():
    """Overrides the suite's shared service for this module's ``make``/``jail`` fixtures."""
    svc = SandboxService(memory_total=640 << 20)
    if svc.cgroup_layout is None or svc.cgroup_layout.version != 1:
        svc.close()
        pytest.skip("charged restores need cgroup v1 (and root)")
    assert svc._charged_copies is not None, "cgroup v1 is writable here, yet restores are not charged copies"
    yield svc
    svc.close()


def test_a_restored_file_is_charged_to_its_trajectory(make):
    sandbox = make(timeout_s=60)
    assert sandbox.run("open('big', 'wb').write(b'x' * (64 << 20))").status is ExecStatus.OK
    committed = sandbox._cgroup.unreclaimable_bytes()
    assert committed >= 64 * MIB
    result = sandbox.run("import os\nos.remove('big')\nraise ValueError('undo the removal')")
    assert result.status is ExecStatus.ERROR and result.rolled_back
    # the controller's own copy left the trajectory charged for ~0 MiB of the 64 it holds again
    assert sandbox._cgroup.unreclaimable_bytes() >= committed - 8 * MIB
    check = sandbox.run("import os\nprint(os.path.getsize('big'), open('big', 'rb').read().count(b'x'))")
    assert check.stdout.split() == [str(64 * MIB)] * 2


def test_failing_steps_cannot_move_a_trajectorys_files_out_of_its_charge(jail, service):
    """The red team's attack: A commits 400 MiB, deletes it in a failing step (the rollback writes
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
    assert a.run("import os\nprint(len([n for n in os.listdir('.') if n.startswith('r0_')]))").stdout.strip() == "4"


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
    home = os.path.dirname(service.cgroup_layout.memory_parent)
    path = os.path.join(home, f"codedance-test-{uuid.uuid4().hex[:8]}")
    os.mkdir(path)
    copies = ChargedCopies(home)
    yield path, copies
    copies.close()
    os.rmdir(path)


def _set(group_dir: str, name: str, value: int) -> None:
    with open(os.path.join(group_dir, name), "w") as handle:
        handle.write(str(value))


def test_a_helper_that_does_not_answer_is_killed_at_the_deadline(group, tmp_path):
    """A helper that stops answering (here: stopped with SIGSTOP; in life, asleep in the
    kernel's OOM wait) is killed at the restore's deadline, not kept, and the copy fails."""
    path, copies = group
    source = tmp_path / "source"
    source.write_bytes(b"y" * MIB)
    with open(source, "rb") as reader, open(tmp_path / "target", "wb") as writer:
        with copies.charged_to(path, time.monotonic() + 30) as copy:
            copy(reader.fileno(), writer.fileno())
        [stuck] = copies.helper_pids
        os.kill(stuck, signal.SIGSTOP)  # our own child, by pid
        started = time.monotonic()
        with pytest.raises(TimeoutError), copies.charged_to(path, started + 1.0) as copy:
            copy(reader.fileno(), writer.fileno())
    assert time.monotonic() - started < 30
    assert copies.helper_pids == []
    with pytest.raises(ChildProcessError):
        os.waitpid(stuck, os.WNOHANG)  # killed and reaped


def test_a_copy_the_full_group_refuses_is_tried_again_until_memory_is_freed(group, tmp_path):
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
            with copies.charged_to(path, time.monotonic() + 60) as copy:
                copy(reader.fileno(), target)
        assert os.fstat(target).st_size == 64 * MIB
        assert os.pread(target, 8, 64 * MIB - 8) == b"y" * 8
        with open(os.path.join(path, "memory.usage_in_bytes")) as usage:
            assert int(usage.read()) >= 60 * MIB  # charged there
        assert len(copies.helper_pids) == 1  # back home, kept for the next restore
    finally:
        freed.join()
        os.close(target)
