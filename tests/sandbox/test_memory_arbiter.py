"""When all trajectories together reach ``memory_total``, the trajectory that grew most gives
memory back, never an honest neighbour (the kernel's OOM killer,
which ranks by RSS, kills a neighbour's running step or idle holder for another trajectory's
tmpfs files).

A service of its own here (``memory_total`` 640 MiB, each trajectory allowed 600 MiB: memory is
overcommitted, as when a pool runs many trajectories). Hostile code runs only in sandboxes from
the ``jail`` fixture (PID namespace and seccomp asserted first). The arbiter needs a writable
memory cgroup (v1's ``memory.oom_control``, v2's ``memory.high``); elsewhere these tests skip and
docs/sandbox.md says what happens. On cgroup v2 they run in the QEMU guest
(``scripts/test-in-cgroup-v2-vm.sh``).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from codedance.sandbox import Limits, SandboxService
from codedance.sandbox.memory.arbiter import (
    ESCALATE_S,
    IDLE_FLOOR_BYTES,
    SLACK_BYTES,
    idle_floor,
    rank_victims,
)
from codedance.sandbox.sandbox import MEMORY_VICTIM
from codedance.types import ExecStatus
from tests.sandbox.conftest import assert_only_holder_and_spare
from tests.sandbox.test_hostile_holder import hostile

pytestmark = pytest.mark.tier("integration")

LIMITS = Limits(memory=600 << 20, workdir_bytes=1 << 30)
NEIGHBOUR_STATE = "import numpy as np\nx = np.ones(250 << 20, np.uint8)\nprint(int(x.sum()))"


@pytest.fixture(scope="module")
def service():
    """Overrides the suite's shared service for this module's ``make``/``jail`` fixtures."""
    svc = SandboxService(memory_total=640 << 20)
    if svc.cgroup_layout is None:
        svc.close()
        pytest.skip("the OOM arbiter needs a writable memory cgroup (root)")
    assert svc.oom_arbiter is not None, (
        "cgroups are writable here, yet the service has no OOM arbiter"
    )
    yield svc
    svc.close()


def test_no_trajectory_can_take_every_inode_slot_of_the_work_root_before_its_memory(service):
    """Every name on the work root's tmpfs takes an inode slot, a hard link for ~200 B of the
    trajectory's kernel memory; with too many slots, links alone take every slot of the pool
    with the service far from full, and an honest neighbour's restore then fails. Filling the
    slots must cost more memory than the service has, so the arbiter decides first."""
    if not service.work_on_tmpfs:
        pytest.skip("the work root is not a tmpfs here")
    slots = os.statvfs(service.work_root).f_files
    assert slots * 200 > 1.25 * service.memory_total, (slots, service.memory_total)


def test_the_largest_growers_come_first_idle_ones_past_a_floor_and_only_past_the_slack_when_nearly_full():  # noqa: E501
    mib = 1 << 20
    growths = [
        ("a", 10 * mib, 10 * mib, True),
        ("b", 300 * mib, 300 * mib, True),
        ("c", 200 * mib, 200 * mib, False),
    ]
    assert rank_victims(growths, out_of_memory=True) == ["b", "c", "a"]
    assert rank_victims(growths, out_of_memory=False) == [
        "b",
        "c",
    ]  # nearly full: past the slack only
    # out of memory, idle growth past the floor ranks with running steps
    assert rank_victims(
        [("a", -5, 0, True), ("idle", 20 * mib, 20 * mib, False)], out_of_memory=True
    ) == ["idle", "a"]
    assert rank_victims(
        [("a", 22 * mib, 22 * mib, True), ("idle", 20 * mib, 20 * mib, False)], out_of_memory=True
    ) == ["a", "idle"]
    assert (
        rank_victims([("a", -5, 0, True), ("idle", 20 * mib, 20 * mib, False)], out_of_memory=False)
        == []
    )
    # within the floor an idle trajectory holds committed state and noise (a fresh spare's pages)
    assert (
        rank_victims(
            [("idle", IDLE_FLOOR_BYTES, IDLE_FLOOR_BYTES, False), ("idle2", -3, 0, False)],
            out_of_memory=True,
        )
        == []
    )
    assert rank_victims(
        [("idle", SLACK_BYTES, SLACK_BYTES, False), ("a", SLACK_BYTES + 1, SLACK_BYTES + 1, True)],
        out_of_memory=False,
    ) == ["a"]
    assert rank_victims([], out_of_memory=True) == []
    assert idle_floor(True) == IDLE_FLOOR_BYTES < SLACK_BYTES == idle_floor(False)
    # kernel memory (inodes of empty files) ranks a running step only while
    # out of memory (the kernel has reclaimed its cache); never an idle one, nor while nearly full
    kernel = [("files", 3 * mib, 400 * mib, True), ("honest", 40 * mib, 41 * mib, True)]
    assert rank_victims(kernel, out_of_memory=True) == ["files", "honest"]
    assert rank_victims(kernel + [("idle", 3 * mib, 400 * mib, False)], out_of_memory=True) == [
        "files",
        "honest",
    ]
    assert rank_victims([("files", 3 * mib, 400 * mib, True)], out_of_memory=False) == []


def _while_running(background, code: str, action):
    """Run ``code`` in ``background`` (a sandbox) on a thread; once it has created the file
    ``ready`` in its working directory, call ``action()``; returns (background's result,
    action's)."""
    results = {}
    thread = threading.Thread(target=lambda: results.setdefault("background", background.run(code)))
    thread.start()
    try:
        ready, deadline = os.path.join(background.workdir, "ready"), time.monotonic() + 60
        while not os.path.exists(ready):
            assert thread.is_alive() and time.monotonic() < deadline, f"no 'ready' file: {results}"
            time.sleep(0.01)
        results["action"] = action()
    finally:
        thread.join(timeout=120)
    return results["background"], results["action"]


def _neighbour_holding(mib: int) -> str:
    """An honest step that holds ``mib`` MiB, says it is ready, and finishes a few seconds later."""
    return (
        f"import numpy as np, time\nx = np.ones({mib} << 20, np.uint8)\nopen('ready', "
        "'w').close()\n"
        "time.sleep(6)\nprint('B done', int(x[-1]))"
    )


def test_a_trajectory_filling_memory_with_files_is_stopped_not_its_running_neighbour(jail):
    """A writes files until the service's memory is full while B's honest step holds 250 MiB:
    A's step ends as oom (rolled back, its trajectory kept), B's step finishes."""
    a, b = jail(timeout_s=60, limits=LIMITS), jail(timeout_s=60, limits=LIMITS)
    result_b, result_a = _while_running(
        b,
        _neighbour_holding(250),
        lambda: a.run(
            "buf = b'x' * (1 << 20)\nfor i in range(900):\n"
            "    with open(f'f{i}', 'wb') as f: f.write(buf)\nprint('A wrote it all')"
        ),
    )
    assert result_b.status is ExecStatus.OK and result_b.stdout == "B done 1\n", result_b
    assert result_a.status is ExecStatus.OOM and result_a.rolled_back, (result_a, result_a.error)
    assert result_a.notes[0] == MEMORY_VICTIM
    after = a.run("import os\nprint([n for n in os.listdir('.') if n.startswith('f')])")
    assert after.ok and after.stdout == "[]\n", after  # rolled back, and the trajectory goes on
    assert_only_holder_and_spare(a)
    assert a.service.oom_arbiter.victims >= 1


WRITE_FILES = """
_n = [0]
def ACTION():
    try:
        with open(f'h{_n[0]}', 'wb') as f: f.write(b'x' * (1 << 20))
        _n[0] += 1
    except OSError:
        pass
"""


def test_a_patched_holder_writing_files_costs_its_own_step_not_a_neighbours_state(jail):
    """A's patched holder writes files while A's next step runs (charged to A, in no process's
    RSS): A pays — its step is stopped and rolled back, or its whole trajectory is lost (its
    holder caught waiting for memory and giving nothing back within 5 s, about 1 run in 10, or,
    seen once in CI, the holder gone during the rollback: a patched holder's end is its own);
    B's idle holder and its 250 MiB state survive either way."""
    a, b = jail(timeout_s=60, limits=LIMITS), jail(timeout_s=60, limits=LIMITS)
    assert b.run(NEIGHBOUR_STATE).stdout == "262144000\n"
    assert a.run(hostile(WRITE_FILES)).ok
    result = a.run("import time; time.sleep(50)")
    stopped = result.status is ExecStatus.OOM and result.rolled_back
    lost = (
        result.status is ExecStatus.CRASHED and "state is lost" in result.notes[0] and not a.alive
    )
    assert stopped or lost, result
    assert result.duration_s < 30, result  # not the step's 50 s
    state = b.run("print(int(x[0]), x.size)")
    assert state.ok and state.stdout == "1 262144000\n", state


KEEP_MEMORY = """
_kept = []
def ACTION():
    _kept.append(b'x' * (4 << 20))
"""


def test_a_holder_that_keeps_memory_after_its_step_is_stopped_loses_its_trajectory(jail):
    """A's patched holder allocates while A's next step runs and keeps it once the step is
    stopped: the rollback cannot give the memory back, so A is lost (within seconds: the arbiter
    kills the holder if it still holds its growth 5 s after its step was stopped); B's
    state survives."""
    a, b = jail(timeout_s=60, limits=LIMITS), jail(timeout_s=60, limits=LIMITS)
    assert b.run(NEIGHBOUR_STATE).stdout == "262144000\n"
    assert a.run(hostile(KEEP_MEMORY)).ok
    result = a.run("import time; time.sleep(50)")
    assert result.status is ExecStatus.CRASHED and not result.rolled_back, result
    assert "kept it" in result.notes[0] and not a.alive, result
    assert result.duration_s < 30, result  # not the step's 60 s + recovery
    state = b.run("print(int(x[0]), x.size)")
    assert state.ok and state.stdout == "1 262144000\n", state


def test_a_step_child_in_its_own_process_group_is_stopped_with_the_step(jail):
    """A's step forks a child that leaves the step's process group and allocates more than the
    service has: the arbiter stops every process of A's step, not only its group (else
    the child keeps the memory, waiting in the kernel's OOM wait where no freezer reaches it,
    and every trajectory stalls until A's recovery deadline); B's state survives."""
    a, b = jail(timeout_s=60, limits=LIMITS), jail(timeout_s=60, limits=LIMITS)
    assert b.run(NEIGHBOUR_STATE).stdout == "262144000\n"
    result = a.run(
        "import os, numpy as np\npid = os.fork()\nif pid == 0:\n    os.setpgid(0, 0)\n"
        "    hoard = np.ones(560 << 20, np.uint8)\n    os._exit(0)\nos.waitpid(pid, 0)"
    )
    assert result.status is ExecStatus.OOM and result.rolled_back, result
    assert result.duration_s < 30, result  # not the step's 60 s + recovery
    assert_only_holder_and_spare(a)
    state = b.run("print(int(x[0]), x.size)")
    assert state.ok and state.stdout == "1 262144000\n", state


GROW_AFTER_ANSWERING = r"""
import sys, numpy as np
runtime = sys.modules["__main__"]
_finish = runtime._PreparedStep.finish
def finish(self, pages):  # runs right after this step's "ok" was sent
    global hoard
    hoard = np.ones(520 << 20, np.uint8)
    return _finish(self, pages)
runtime._PreparedStep.finish = finish
"""


def test_growth_after_answering_is_charged_to_the_trajectory_that_grew(jail):
    """A step patches its runtime to allocate right after its answer (while the controller
    commits it): that growth is not committed state, so when the service runs out A pays (its
    step, if stopped before its files were saved; else its trajectory, grown outside any step),
    not B's honest running step (a mark taken at the commit must not launder A's
    growth)."""
    a, b = jail(timeout_s=60, limits=LIMITS), jail(timeout_s=60, limits=LIMITS)
    result_b, result_a = _while_running(
        b, _neighbour_holding(150), lambda: a.run(GROW_AFTER_ANSWERING)
    )
    assert result_b.status is ExecStatus.OK and result_b.stdout == "B done 1\n", result_b
    after = a.run("print('hoard' in globals())")
    if a.alive:  # stopped before its commit: rolled back, nothing of it kept
        assert result_a.status is ExecStatus.OOM and after.ok and after.stdout == "False\n", (
            result_a,
            after,
        )
    else:  # committed first, its holder then holding the growth: lost
        assert after.status is ExecStatus.CRASHED and "state is lost" in after.notes[0], (
            result_a,
            after,
        )


HOLD_WHILE_IDLE = """
_kept = []
def ACTION():  # once, right after its commit: kept between steps, in no step
    if not _kept:
        _kept.append(b'x' * (27 << 20))
        open('held', 'w').close()
"""
# waits for the holder's allocation (thawing it if the idle freezer stopped it mid-way), then
# fails: the rollback leaves the holder's memory, and the mark stays at the last commit
AFTER_THE_HOLDER_HELD = (
    "import os, time\nwhile not os.path.exists('held'): time.sleep(0.01)\nraise "
    "RuntimeError('on purpose')"
)


def _headroom(service) -> int:
    """``memory_total`` less what the service's group holds but its file cache (kernel memory
    counted: at most what allocations can still get without the arbiter). On cgroup v2 the
    arbiter acts from ``memory.high``, ``margin`` below ``memory_total``: the headroom is to it."""
    from codedance.sandbox.memory.cgroup_memory import unreclaimable

    version = service.cgroup_layout.version
    usage, stat = (
        Path(service.cgroup_layout.memory_parent, name).read_bytes()
        for name in ("memory.usage_in_bytes" if version == 1 else "memory.current", "memory.stat")
    )
    limit = service.memory_total if version == 1 else service.oom_arbiter._memory.high
    return limit - unreclaimable(version, usage, stat, prefix=b"total_" if version == 1 else b"")


def test_idle_trajectories_each_keeping_under_the_slack_pay_before_a_smaller_running_step(jail):
    """Three patched holders each keep ~27 MiB between steps (under the 32 MiB slack, past the
    8 MiB floor); a neighbour's committed state brings the service within ~10 MiB of full (its
    next spare's fork needs some); an honest step then allocates 20 MiB: an idle grower pays
    (lost), the honest step finishes and the neighbour's state survives (if idle growth within the
    slack is never charged, the honest step is stopped)."""
    attackers = [jail(timeout_s=60, limits=LIMITS) for _ in range(3)]
    honest, filler = jail(timeout_s=60, limits=LIMITS), jail(timeout_s=60, limits=LIMITS)
    for attacker in attackers:
        assert attacker.run(hostile(HOLD_WHILE_IDLE)).ok
        failed = attacker.run(AFTER_THE_HOLDER_HELD)
        assert failed.status is ExecStatus.ERROR and failed.rolled_back, failed
    grown = [attacker.memory_growth() for attacker in attackers]
    assert all(24 << 20 < growth < SLACK_BYTES for growth in grown), grown  # the honest step: ~21
    # committed state in two steps: the second, nearly full, grows less than the slack
    assert filler.run(
        f"import numpy as np\nbig = np.ones({(_headroom(filler.service) >> 20) - 30} "
        "<< 20, np.uint8)"
    ).ok
    assert filler.run(
        f"small = np.ones({(_headroom(filler.service) >> 20) - 10} << 20, np.uint8)"
    ).ok
    assert all(attacker.alive for attacker in attackers)  # none taken yet
    result = honest.run("buf = b'h' * (20 << 20)\nprint(len(buf) >> 20)")
    assert result.status is ExecStatus.OK and result.stdout == "20\n", result
    lost = [
        attacker for attacker in attackers if not attacker.alive
    ]  # (the arbiter counts it a moment later)
    assert lost, [attacker.memory_growth() for attacker in attackers]
    after = lost[0].run(
        "print('still here')"
    )  # the arbiter's note: lost for growth outside any step
    assert after.status is ExecStatus.CRASHED and "outside any step" in after.notes[0], after
    state = filler.run("print(int(big[0]), int(small[-1]))")
    assert state.ok and state.stdout == "1 1\n", state


def test_a_kernel_oom_kill_takes_the_whole_step_and_never_the_holder(jail, service):
    """cgroup v2: the kernel's OOM killer (here at the trajectory's own limit; at the service's
    when memory.high could not hold it) picks the step's largest process, and ``memory.oom.group``
    kills every other process of the step with it, never the holder at -1000: the step's parent,
    which waits for the child and would go on, dies too, and the trajectory keeps its state.
    (The child allocates in small pieces: one large allocation would meet the address-space
    rlimit first, a MemoryError, not the kernel's killer.)"""
    if service.cgroup_layout.version != 2:
        pytest.skip("memory.oom.group is cgroup v2's")
    a = jail(timeout_s=120, limits=Limits(memory=200 << 20, workdir_bytes=1 << 30))
    assert a.run("state = 'kept'").ok
    group = Path(a._cgroup.memory_dir)
    assert (group / "memory.oom.group").read_text().strip() == "1"
    result = a.run(
        "import os, time\npid = os.fork()\nif pid == 0:\n    hoard = []\n    try:\n"
        "        while True: hoard.append(bytearray(1 << 20))\n"
        "    except MemoryError:\n        os._exit(3)\nos.waitpid(pid, 0)\ntime.sleep(60)\n"
        "print('the parent went on')"
    )
    assert result.status is ExecStatus.OOM and "went on" not in result.stdout, result
    assert result.duration_s < 50, result  # not the parent's 60 s
    after = a.run("print(state)")
    assert after.ok and after.stdout == "kept\n", after


def test_the_default_memory_total_respects_the_controllers_own_cgroup_limit():
    """Under an outer memory limit (a container's), the service's default ``memory_total`` is
    85 % of it, not of the host's memory: otherwise the outer limit is reached first and the
    kernel's OOM killer, not the arbiter, chooses."""
    import subprocess
    import sys

    from codedance.sandbox import cgroups

    parents = cgroups.service_parents()
    memory = [
        p for p in parents if p.startswith("/sys/fs/cgroup/memory/")
    ] or parents  # v1, or v2's one
    if os.geteuid() != 0 or not memory:
        pytest.skip("needs root and a writable memory cgroup")
    v1 = os.path.exists(os.path.join(memory[0], "memory.limit_in_bytes"))
    outer = os.path.join(memory[0], f"outer-{os.getpid()}")
    os.mkdir(outer)
    try:
        with open(
            os.path.join(outer, "memory.limit_in_bytes" if v1 else "memory.max"), "w"
        ) as handle:
            handle.write(str(700 << 20))
        code = (
            f"import os\nopen({os.path.join(outer, 'cgroup.procs')!r}, "
            "'w').write(str(os.getpid()))\n"
            "from codedance.sandbox.service import "
            "default_memory_total\nprint(default_memory_total())"
        )
        child = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
        assert int(child.stdout) == int(0.85 * (700 << 20)), child
    finally:
        cgroups._rmdir_when_empty(outer)


def test_a_restore_is_no_credit_to_grow_by(jail):
    """A commits 300 MiB of files, then a step deletes them and fails, and the rollback writes
    them back. A's next growth must still count in full, so A, not B's honest running step, pays
    when the service runs out (with restores charged to the controller, A's mark would keep
    the deleted files and B be chosen; restores are charged to A)."""
    a, b = jail(timeout_s=60, limits=LIMITS), jail(timeout_s=60, limits=LIMITS)
    assert a.run(
        "chunk = b'x' * (1 << 20)\nfor i in range(3):\n    with open(f'f{i}', 'wb') as f:\n"
        "        for _ in range(100): f.write(chunk)"
    ).ok
    failed = a.run(
        "import os\nfor i in range(3): os.remove(f'f{i}')\nraise RuntimeError('on purpose')"
    )
    assert failed.status is ExecStatus.ERROR and failed.rolled_back, failed
    result_b, result_a = _while_running(
        b,
        _neighbour_holding(100),
        lambda: a.run("import numpy as np\nhoard = np.ones(560 << 20, np.uint8)"),
    )
    assert result_b.status is ExecStatus.OK and result_b.stdout == "B done 1\n", result_b
    assert result_a.status is ExecStatus.OOM and result_a.rolled_back, (result_a, result_a.error)


def test_a_step_holding_the_service_through_writes_alone_is_stopped(jail):
    """A's running step holds most of the service in files written with ``write()`` alone (no
    page fault, so no process waits and the kernel reports no OOM); B's honest step then writes a
    64 MiB file: it must not fail with ENOMEM: crossing the "nearly full" threshold wakes the
    arbiter, which stops A."""
    a, b = jail(timeout_s=60, limits=LIMITS), jail(timeout_s=60, limits=LIMITS)
    result_a, result_b = _while_running(
        a,
        "chunk = b'x' * (1 << 20)\nfor i in range(560):\n    with open(f'f{i}', 'wb') "
        "as f: f.write(chunk)\n"
        "open('ready', 'w').close()\nimport time\ntime.sleep(30)",
        lambda: b.run(
            "import time\nchunk = b'r' * (1 << 20)\nwith open('result.bin', 'wb') as f:\n"
            "    for _ in range(64):\n        f.write(chunk); f.flush(); time.sleep(0.005)\n"
            "print('B wrote it')"
        ),
    )
    assert result_b.status is ExecStatus.OK and result_b.stdout == "B wrote it\n", result_b
    assert result_a.status is ExecStatus.OOM and result_a.rolled_back, (result_a, result_a.error)


def test_kernel_cache_a_stopped_step_leaves_does_not_lose_the_trajectory(jail):
    """A step makes ~45 MiB of negative dentries (kernel cache that outlives it), then grows past
    what the service has left: it is stopped and rolled back, and the trajectory goes on (the
    dentries must not count as growth its holder kept, which would lose the trajectory)."""
    a, b = jail(timeout_s=60, limits=LIMITS), jail(timeout_s=60, limits=LIMITS)
    assert a.run("state = 'kept'").ok
    assert b.run(NEIGHBOUR_STATE).ok
    result = a.run(
        "import os, time, uuid\ntag = uuid.uuid4().hex + 'q' * 168\nfor i in range(100000):\n"
        "    try: os.stat(f'/usr/{tag}{i}')\n    except OSError: pass\nchunks = []\n"
        "for i in range(500):\n    chunks.append(b'x' * (1 << 20)); time.sleep(0.002)"
    )
    assert result.status is ExecStatus.OOM and result.rolled_back, result
    after = a.run("print(state)")
    assert after.ok and after.stdout == "kept\n", after


def _beside_faulting_neighbour(neighbour, mib: int, action, before: str = ""):
    """Run in ``neighbour`` an honest step that runs ``before``, holds ``mib`` MiB and then keeps
    faulting fresh pages in (so a full service is *out of memory*: someone waits, the kernel has
    reclaimed what it could) until this side creates ``stop`` in its inputs directory (outside what
    a rollback restores); meanwhile call ``action()``. Returns (neighbour's result, action's)."""
    stop = os.path.join(neighbour._inputs_dir, "stop")
    code = (
        f"import mmap, os, time, numpy as np\n{before}\nx = np.ones({mib} << 20, "
        "np.uint8)\nopen('ready', 'w').close()\n"
        f"while not os.path.exists({stop!r}):\n    time.sleep(0.002)\n"
        # a mapping is kernel memory the syscall allocates: while the service is out of
        # memory (documented) it can fail with ENOMEM rather than wait, as a page fault does
        "    try: m = mmap.mmap(-1, 1 << 20)\n    except OSError: continue\n"
        "    for i in range(0, 1 << 20, 4096): m[i] = 1\n    m.close()\n"
        "os.remove('ready')\nprint('B done', int(x[-1]))"
    )

    def then_stop():
        try:
            return action()
        finally:
            Path(stop).touch()

    return _while_running(neighbour, code, then_stop)


EMPTY_FILES = """
import os, time
os.mkdir('d')
name, n, end = 'x' * 200, 0, time.monotonic() + 30
while time.monotonic() < end:  # until stopped: each empty file is ~1 KiB of kernel memory
    try:
        os.close(os.open(f'd/{name}{n}', os.O_CREAT | os.O_WRONLY, 0o600))
        n += 1
    except OSError:  # ENOMEM: the service is full
        time.sleep(0.01)
print(n, 'files')
"""


def test_a_step_filling_memory_with_empty_files_is_stopped_not_its_running_neighbour(jail):
    """A's step creates empty files (inodes and dentries: kernel memory, none of it reclaimable
    while the files exist) until the service is full, while B's honest step holds 40 MiB: A's
    step ends as oom and B's finishes (with kernel
    memory left out of the measure, A's growth reads a few MiB and B pays)."""
    a, b, filler = (jail(timeout_s=60, limits=LIMITS) for _ in range(3))
    # committed state leaves ~200 MiB: fewer files fill it
    assert filler.run(
        f"import numpy as np\nbig = np.ones({(_headroom(filler.service) >> 20) - 200} "
        "<< 20, np.uint8)"
    ).ok
    result_b, result_a = _beside_faulting_neighbour(b, 40, lambda: a.run(EMPTY_FILES))
    assert result_b.status is ExecStatus.OK and result_b.stdout == "B done 1\n", result_b
    assert result_a.status is ExecStatus.OOM and result_a.rolled_back, (result_a, result_a.error)
    assert result_a.notes[0] == MEMORY_VICTIM
    after = a.run("import os\nprint(os.path.exists('d'))")
    assert after.ok and after.stdout == "False\n", after  # rolled back, and the trajectory goes on


def test_a_replaced_holders_memory_is_no_credit_to_grow_by(jail):
    """A commits 300 MiB, then commits ``del big``: the holder that step replaced frees the
    300 MiB only once it has exited, after A's mark was taken. A's next step grows ~350 MiB while
    B's honest step holds 200 MiB: A's step pays, not B's (with the
    replaced holder's memory as credit, A's growth reads -300 MiB until its next run ends)."""
    a, b = jail(timeout_s=60, limits=LIMITS), jail(timeout_s=60, limits=LIMITS)
    assert a.run("import numpy as np\nbig = np.ones(300 << 20, np.uint8)").ok
    assert a.run("del big").ok
    result_b, result_a = _beside_faulting_neighbour(
        b,
        200,
        lambda: a.run(
            "chunks = []\nfor _ in range(50): chunks.append(np.ones(10 << 20, np.uint8))"
        ),
    )
    assert result_b.status is ExecStatus.OK and result_b.stdout == "B done 1\n", result_b
    assert result_a.status is ExecStatus.OOM and result_a.rolled_back, (result_a, result_a.error)
    assert result_a.notes[0] == MEMORY_VICTIM


MISSING_PATHS = (
    "import uuid\ntag = uuid.uuid4().hex + 'q' * 168\nfor i in range(150000):\n"
    "    try: os.stat(f'/usr/{tag}{i}')\n    except OSError: pass"
)


def test_an_honest_steps_kernel_cache_does_not_make_it_pay(jail):
    """B's honest step looks up 150,000 missing paths (~70 MiB of negative dentries: kernel
    cache; a running step's kernel growth is ranked while the service is out of memory) and keeps
    running; A's step then grows past what the service has left: A's step pays, B's finishes (the
    kernel reclaims B's cache as the service fills: ~1 MiB of it was left when the arbiter chose,
    in the runs measured)."""
    a, b, filler = (jail(timeout_s=60, limits=LIMITS) for _ in range(3))
    assert filler.run(
        f"import numpy as np\nbig = np.ones({(_headroom(filler.service) >> 20) - 130} "
        "<< 20, np.uint8)"
    ).ok
    result_b, result_a = _beside_faulting_neighbour(
        b,
        1,
        lambda: a.run(
            "import numpy as np\nchunks = []\nfor _ in range(50): "
            "chunks.append(np.ones(4 << 20, np.uint8))"
        ),
        before=MISSING_PATHS,
    )
    assert result_b.status is ExecStatus.OK and result_b.stdout == "B done 1\n", result_b
    assert result_a.status is ExecStatus.OOM and result_a.rolled_back, (result_a, result_a.error)


def test_unreclaimable_leaves_out_file_cache_and_kernel_memory():
    from codedance.sandbox.memory.cgroup_memory import unreclaimable

    stat = (
        b"cache 15\nrss 3\nactive_file 10\ninactive_file 5\ntotal_active_file "
        b"12\ntotal_inactive_file 6\n"
    )
    assert unreclaimable(1, b"100\n", stat, b"20\n") == 65
    assert unreclaimable(1, b"100\n", stat, b"20\n", prefix=b"total_") == 62
    # v2: all kernel memory, its "kernel" line where listed, else its parts
    v2_stat = b"active_file 10\ninactive_file 5\nslab_reclaimable 7\nslab 9\npagetables 2\n"
    assert unreclaimable(2, b"100\n", v2_stat) == 74
    assert unreclaimable(2, b"100\n", b"kernel 20\n" + v2_stat) == 65


def test_v2_out_of_memory_is_an_allocation_throttled_now(tmp_path, monkeypatch):
    """cgroup v2: the parent group gets memory.high a margin below memory_total; it is out of
    memory only while charged past memory.high with a high/max/oom event within the longest
    throttle sleep (a group merely charged past it, with nothing throttled since, is not), and
    nearly full when what it holds but file cache and kernel memory reaches memory.high. Laid out
    in plain files, so it runs on any host."""
    from codedance.sandbox.memory import cgroup_memory

    mib = 1 << 20
    files = {
        "memory.current": "0\n",
        "memory.stat": "",
        "memory.pressure": "",
        "memory.high": "max",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    events = tmp_path / "memory.events.local"
    events.write_text("low 0\nhigh 3\nmax 0\noom 0\noom_kill 0\n")
    memory = cgroup_memory.arbitrate_oom(2, str(tmp_path), 640 * mib)
    try:
        assert isinstance(memory, cgroup_memory.ThrottledServiceMemory)
        assert (tmp_path / "memory.high").read_text() == str(620 * mib)  # 640 - max(16, 640/32)
        (tmp_path / "memory.current").write_text(f"{630 * mib}\n")
        assert not memory.under_oom()  # the high events counted are from before
        events.write_text("low 0\nhigh 4\nmax 0\noom 0\noom_kill 0\n")
        assert memory.under_oom()
        clock = [cgroup_memory.time.monotonic() + cgroup_memory.THROTTLE_S + 0.1]
        monkeypatch.setattr(cgroup_memory.time, "monotonic", lambda: clock[0])
        assert not memory.under_oom()  # no allocation throttled for longer than any sleep
        events.write_text("low 0\nhigh 4\nmax 1\noom 0\noom_kill 0\n")
        assert memory.under_oom()
        (tmp_path / "memory.current").write_text(f"{600 * mib}\n")
        assert not memory.under_oom()  # reclaimed below memory.high
        stat = f"anon {500 * mib}\nactive_file {30 * mib}\nkernel {80 * mib}\n"
        (tmp_path / "memory.stat").write_text(stat)
        (tmp_path / "memory.current").write_text(f"{630 * mib}\n")
        assert memory.fullness() == (True, False) and memory.held() == 520 * mib
        (tmp_path / "memory.stat").write_text(f"anon {625 * mib}\nkernel {5 * mib}\n")
        assert memory.fullness() == (True, True)
    finally:
        memory.close()


def _fill_leaving(filler, service, mib: int) -> None:
    """Commit files in ``filler`` until the service has about ``mib`` MiB left (in two files:
    one would pass `Limits.file_size`)."""
    fill_mib = (_headroom(service) >> 20) - mib
    assert filler.run(
        f"chunk = b'f' * (1 << 20)\nfor k in range(2):\n    with open(f'f{{k}}', 'wb') as f:\n"
        f"        for _ in range({fill_mib // 2}): f.write(chunk)"
    ).ok


TAKE_WHAT_ITS_STEP_FREES = """
_taken = []
def ACTION():  # once A's step has deleted A's 200 MiB of committed files, take as much
    if not _taken and not os.path.exists('big0') and not os.path.exists('big1'):
        _taken.append(None)
        for _ in range(50):
            try:
                _taken.append(b'\\1' * (4 << 20))
            except MemoryError:
                break
"""


def test_a_holder_taking_what_its_step_freed_pays_itself_and_the_service_goes_on(jail, service):
    """A commits 200 MiB of files; its patched holder allocates as much as soon as they are gone;
    A's next step deletes them and fails, so A's restore needs 200 MiB back from a full service.
    Each kind of memory counts alone, so the deleted files do not hide the holder's growth (a
    net measure reads ~0, and B's honest running step pays), and the arbiter's kill of A's every
    process is not held up by the freeze of A's restore (on v1 a frozen process ignores SIGKILL:
    the whole service would wait for A's run deadline, and E, whose restore waits too, be lost).
    B and E keep everything; A is lost within seconds."""
    a, b, e, filler = (jail(timeout_s=30, limits=LIMITS) for _ in range(4))
    assert e.run("open('data', 'wb').write(b'e' * (30 << 20))").ok
    assert a.run("for i in range(2): open(f'big{i}', 'wb').write(b'x' * (100 << 20))").ok
    assert a.run(hostile(TAKE_WHAT_ITS_STEP_FREES)).ok
    _fill_leaving(filler, service, 120)  # 120 MiB left: B's 80 MiB, then A's holder fills it
    results = {}
    threads = [
        threading.Thread(
            target=lambda: results.setdefault(
                "b", b.run("import time\nx = b'b' * (80 << 20)\ntime.sleep(4)\nprint(len(x) >> 20)")
            )
        )
    ]
    threads[0].start()
    time.sleep(0.8)
    threads.append(
        threading.Thread(
            target=lambda: results.setdefault(
                "e",
                e.run(
                    "import os, time\ntime.sleep(1.5)\nos.remove('data')\nraise "
                    "ValueError('an honest bug')"
                ),
            )
        )
    )
    threads[1].start()
    time.sleep(0.1)
    result_a = a.run(
        "import os, time\nos.remove('big0'); os.remove('big1')\ntime.sleep(0.6)\nraise "
        "RuntimeError('fails')"
    )
    for thread in threads:
        thread.join(timeout=120)
    assert result_a.status is ExecStatus.CRASHED and not a.alive, result_a
    assert result_a.duration_s < 15, result_a  # not its 30 s + recovery
    assert not os.path.exists(a.workdir)  # its files freed at once, not left charged until close()
    assert results["b"].ok and results["b"].stdout == "80\n", results["b"]
    assert results["e"].status is ExecStatus.ERROR and results["e"].rolled_back, results["e"]
    after = e.run("import os\nprint(os.path.getsize('data'))")
    assert after.ok and after.stdout == f"{30 << 20}\n", after


def test_a_rollback_that_would_hold_more_than_its_committed_state_loses_that_trajectory_first(
    jail, service
):
    """A's committed step keeps a memfd open; A's next step deletes its 200 MiB of committed
    files and writes as much into that memfd (kept by the holder: killing the step frees none
    of it), then fails, in a full service. Every measure by kind nets out; A's waiting restore
    would leave A holding 200 MiB past its committed state, and A is lost at its first wait
    (before, the 5 s escalation lost it; meanwhile its restore's retries took what E's honest
    rollback needed back, and E's restore failed once). E keeps everything."""
    a, e, filler = (jail(timeout_s=30, limits=LIMITS) for _ in range(3))
    assert e.run("open('data', 'wb').write(b'e' * (30 << 20))").ok
    assert a.run(
        "import os\nkeep = os.memfd_create('keep')\n"
        "for i in range(2): open(f'big{i}', 'wb').write(b'x' * (100 << 20))"
    ).ok
    _fill_leaving(filler, service, 120)
    results = {}
    honest = threading.Thread(
        target=lambda: results.setdefault(
            "e",
            e.run(
                "import os, time\ntime.sleep(1.0)\nos.remove('data')\nraise "
                "ValueError('an honest bug')"
            ),
        )
    )
    honest.start()
    result_a = a.run(
        "import os\nos.remove('big0'); os.remove('big1')\n"
        "for _ in range(50): os.write(keep, b'k' * (4 << 20))\nraise RuntimeError('fails')"
    )
    honest.join(timeout=120)
    assert result_a.status is ExecStatus.CRASHED and not a.alive, result_a
    assert result_a.duration_s < ESCALATE_S, (
        result_a
    )  # at its restore's first wait (~0.3 s), not the escalation's
    assert results["e"].status is ExecStatus.ERROR and results["e"].rolled_back, results["e"]
    after = e.run("import os\nprint(os.path.getsize('data'))")
    assert after.ok and after.stdout == f"{30 << 20}\n", after


def test_an_honest_rollback_of_a_file_its_holder_keeps_mapped_is_not_taken_for_one_past_its_state(
    jail, service
):
    """A keeps a committed file mapped (``np.load(mmap_mode="r")``); A's next
    step deletes it (freeing nothing: the holder maps it) and fails while B's honest step has
    filled the service. A's restore needs a new copy beyond what A holds below its mark, yet
    that is no memory A's step took: A's step is rolled back, not its trajectory lost (the rule
    of the test above leaves out files its holder has open or mapped). Afterwards A holds its
    restored copy beside the mapped one, which the ranking counts as growth: in a service still
    full A may be the next to pay (a bound in docs/sandbox.md), so nothing after is read."""
    a, b, filler = (jail(timeout_s=30, limits=LIMITS) for _ in range(3))
    assert a.run(
        "import numpy as np\nnp.save('big.npy', np.ones(100 << 20, np.uint8))\n"
        "arr = np.load('big.npy', mmap_mode='r')\nprint(int(arr[:10].sum()))"
    ).ok
    _fill_leaving(filler, service, 120)
    results = {}
    grower = threading.Thread(
        target=lambda: results.setdefault(
            "b", b.run("import time\nx = b'b' * (80 << 20)\ntime.sleep(4)\nprint(len(x) >> 20)")
        )
    )
    grower.start()
    time.sleep(1.0)
    result_a = a.run("import os\nos.remove('big.npy')\nraise ValueError('an honest bug')")
    grower.join(timeout=120)
    assert result_a.status is ExecStatus.ERROR and result_a.rolled_back, result_a


PAGE_TABLES = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, \
ctypes.c_long]
def page_tables():
    return next(int(line.split()[1]) << 10 for line in open("/proc/self/status") if \
line.startswith("VmPTE:"))
made, base = 0, 0x100000000000
while page_tables() < TARGET:  # one page a GiB apart: two table pages each, and no anonymous memory
    addr = base + made * (1 << 30)
    if libc.mmap(addr, 4096, 1, 0x02 | 0x20 | 0x100000, -1, 0) != addr:  # read-only, private, \
anonymous, fixed
        raise OSError(ctypes.get_errno(), f"mmap after {made} mappings")
    ctypes.string_at(addr, 1)
    made += 1
"""


def test_a_commit_of_page_tables_cannot_take_what_a_neighbours_rollback_needs(jail, service):
    """B's running step deleted its 150 MiB committed file (owed to its rollback); A's step fills
    what that freed with page tables alone: kernel memory, which no reclaim gives back. A's commit
    counts it and is refused (else it commits, then sits idle out of the arbiter's
    reach, and B's restore finds no memory and B is lost). B's rollback gets its file back."""
    a, b, filler = (jail(timeout_s=30, limits=LIMITS) for _ in range(3))
    assert b.run("open('big', 'wb').write(b'b' * (150 << 20))").ok
    assert a.run("x = 1").ok
    fill_mib = (
        _headroom(service) >> 20
    ) - 300  # A then makes ~400 MiB of page tables (one process's most: ~500)
    assert filler.run(
        "chunk = b'f' * (1 << 20)\nwith open('f', 'wb') as f:\n    for _ in "
        f"range({fill_mib}): f.write(chunk)"
    ).ok
    results = {}
    thread = threading.Thread(
        target=lambda: results.setdefault(
            "b",
            b.run(
                "import os, time\nos.remove('big')\ntime.sleep(4)\nraise "
                "RuntimeError('an honest failure')"
            ),
        )
    )
    thread.start()
    time.sleep(1.0)  # B's step has deleted its file
    target = _headroom(service) - (48 << 20)  # below "nearly full": nothing stops A while it grows
    result_a = a.run(f"TARGET = {target}\n{PAGE_TABLES}")
    thread.join(timeout=60)
    assert result_a.status is ExecStatus.OOM and result_a.rolled_back, (result_a, result_a.error)
    assert results["b"].status is ExecStatus.ERROR and results["b"].rolled_back, results["b"]
    after = b.run("import os\nprint(os.path.getsize('big') >> 20)")
    assert after.ok and after.stdout == "150\n", after


def test_a_steps_kernel_cache_does_not_refuse_a_neighbours_commits(jail, service):
    """B's step deletes its 150 MiB committed file (owed to its rollback), then fills what that
    freed with negative dentries (kernel cache) and stays running: A's trivial steps still commit
    (counting all of v1's kernel memory in the owed check would refuse every one)."""
    a, b, filler = (jail(timeout_s=60, limits=LIMITS) for _ in range(3))
    assert b.run("open('big', 'wb').write(b'b' * (150 << 20))").ok
    assert a.run("x = 1").ok
    fill_mib = (_headroom(service) >> 20) - 250
    assert filler.run(
        "chunk = b'f' * (1 << 20)\nwith open('f', 'wb') as f:\n    for _ in "
        f"range({fill_mib}): f.write(chunk)"
    ).ok
    stop = os.path.join(b._inputs_dir, "stop")
    code = (
        "import os, time\nos.remove('big')\n"
        f"{MISSING_PATHS.replace('150000', '700000')}\nopen('ready', 'w').close()\n"
        f"while not os.path.exists({stop!r}): "
        "time.sleep(0.01)\nos.remove('ready')\nraise RuntimeError('fails')"
    )

    def neighbour_commits():
        try:
            return [a.run(f"y = {i}") for i in range(3)]
        finally:
            Path(stop).touch()

    result_b, results_a = _while_running(b, code, neighbour_commits)
    assert all(result.ok for result in results_a), results_a
    assert result_b.status is ExecStatus.ERROR and result_b.rolled_back, result_b


def test_the_arbiter_runs_in_a_controller_that_holds_over_1024_descriptors():
    """An arbiter waiting in ``select()``, which refuses descriptors of 1,024 and above, dies
    in a controller holding that many (a pool of a few hundred sandboxes): a new service would
    have no arbiter thread while the kernel's OOM killer was off for its parent group."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 1200:
        pytest.skip(f"this process may open only {hard} descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [
        os.open(os.devnull, os.O_RDONLY) for _ in range(1100 - len(os.listdir("/proc/self/fd")))
    ]
    try:
        svc = SandboxService(memory_total=640 << 20)
        try:
            if svc.oom_arbiter is None:
                pytest.skip("the OOM arbiter needs a writable memory cgroup (root)")
            arbiter = svc.oom_arbiter
            assert arbiter._memory.event >= 1024
            os.eventfd_write(
                arbiter._memory.event, 1
            )  # the kernel's word: it looks, finds no pressure
            time.sleep(0.3)
            assert arbiter._thread.is_alive(), "the arbiter thread died"
            assert arbiter.last_error is None
        finally:
            svc.close()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_step_waits_for_a_closed_sandboxs_files_rather_than_pay_for_them(
    make, service, monkeypatch
):
    """close() leaves a huge working directory to the background remover, whose files stay
    charged until removed; the arbiter must not stop an honest step for that memory. It waits
    for them instead, and the step runs once they are gone. (Removal is fast, ~300,000
    directories a second: a tree that takes seconds would not fit in this service, so
    the remover's thread is made to start 2 s late, and close() hands it everything.)"""
    from codedance.sandbox import remover

    real_remove_tree = remover.remove_tree

    def late_remove_tree(path, deadline=None, stop=None):
        if deadline is None:  # the remover's thread
            time.sleep(2.0)
        return real_remove_tree(path, deadline, stop)

    monkeypatch.setattr(remover, "remove_tree", late_remove_tree)
    monkeypatch.setattr(service.remover, "inline_s", 0.0)
    hostile, honest = make(timeout_s=60, limits=LIMITS), make(timeout_s=60, limits=LIMITS)
    ready = os.path.join(hostile.workdir, "ready")
    leave_a_huge_tree = (
        "import os\nfor k in range(4):\n    open(f'data{k}', 'wb').write(b'd' * (50 << 20))\n"
        "for i in range(40):\n    os.mkdir(f'd{i}')\n    for j in range(1000):\n"
        "        os.mkdir(f'd{i}/{j}', 0)\nopen('ready', 'w').close()\nimport time\ntime.sleep(60)"
    )
    thread = threading.Thread(target=hostile.run, args=(leave_a_huge_tree,))
    thread.start()
    for _ in range(3000):
        if os.path.exists(ready):
            break
        time.sleep(0.01)
    hostile.close()  # everything goes to the background (inline_s 0), removed 2 s later
    thread.join(30)
    assert service.remover.busy(), (
        "the working directory was removed within close(): nothing to test"
    )
    need_mib = (
        _headroom(service) >> 20
    ) + 100  # fits only once the closed sandbox's files are gone
    result = honest.run(f"x = b'h' * ({need_mib} << 20)\nprint('ok')")
    assert result.ok and result.stdout == "ok\n", result
