"""An ordinary user's controller in a delegated cgroup v2 group (systemd's `Delegate=yes`, a
Slurm job's group) makes its service's groups there: each trajectory gets its memory and process
limits, and the OOM arbiter watches the service's memory (``memory.high``, ``memory.events``).

Delegation is simulated as cgroup-v2.rst describes it: root creates a group, enables the memory
and pids controllers for its children, and gives the user the directory and its
``cgroup.procs``, ``cgroup.threads`` and ``cgroup.subtree_control``; the user's controller is
started in a leaf of it, as systemd starts a scope's command. Needs root (to create the user and
the group) on cgroup v2: on this project's cgroup v1 machine it skips, and runs in the QEMU guest
(``scripts/test-in-cgroup-v2-vm.sh tests/sandbox/test_delegated_cgroup.py``).
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from codedance.sandbox.cgroups import CONTROLLER_LEAF
from tests.sandbox.test_ordinary_user import _run_as_user, ordinary_user  # noqa: F401 - a fixture

pytestmark = pytest.mark.tier("integration")

ROOT = "/sys/fs/cgroup"


@pytest.fixture
def delegated(ordinary_user):  # noqa: F811 - the imported fixture
    """(user, home, the ``cgroup.procs`` of the leaf the controller starts in): a group delegated
    to the user, with the memory and pids controllers for its children."""
    user, home = ordinary_user
    if not os.path.exists(os.path.join(ROOT, "cgroup.controllers")):
        pytest.skip("needs cgroup v2 (run it in scripts/test-in-cgroup-v2-vm.sh)")
    with open(os.path.join(ROOT, "cgroup.subtree_control"), "w") as handle:
        handle.write("+memory +pids")  # as systemd leaves the root
    group = os.path.join(ROOT, f"codedance-delegated-{uuid.uuid4().hex[:8]}")
    leaf = os.path.join(group, CONTROLLER_LEAF)
    os.mkdir(group)
    try:
        with open(os.path.join(group, "cgroup.subtree_control"), "w") as handle:
            handle.write("+memory +pids")
        os.mkdir(leaf)
        for directory in (group, leaf):
            for name in ("", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"):
                os.chown(os.path.join(directory, name), user.pw_uid, user.pw_gid)
        yield user, home, os.path.join(leaf, "cgroup.procs")
    finally:
        for directory, children, _ in sorted(os.walk(group), key=lambda item: -len(item[0])):
            if not children:
                os.rmdir(directory)


# Run by the ordinary user in the delegated group. B's honest step holds 100 MiB; A's step then
# allocates more than the service has left, growing far past B's step: A pays (its step stopped,
# rolled back, its state kept), B's step finishes and B keeps its committed state.
USES_THE_GROUP = """
import json, os, threading, time
from codedance.sandbox import Limits, Sandbox, SandboxService
from codedance.sandbox.promises import host_of, verdicts
service = SandboxService(memory_total=640 << 20)
layout = service.cgroup_layout
out = {"version": layout and layout.version, "arbiter": service.oom_arbiter is not None,
       "missing": dict(service.isolation.missing), "parent": layout and layout.memory_parent,
       "verdicts": {key: verdict.state for key, _, _, verdict in verdicts(host_of(service))}}
limits = Limits(memory=600 << 20, processes=16)
with Sandbox(service=service, limits=limits, timeout_s=120) as a, Sandbox(service=service, \
limits=limits, timeout_s=120) as b:
    group = a._cgroup.memory_dir
    out["limits"] = [open(os.path.join(group, name)).read().strip() for name in ("memory.max", \
"pids.max")]
    out["a_state"] = a.run("state = 'kept'").ok
    out["b_state"] = b.run("import numpy as np\\nkeep = np.ones(100 << 20, np.uint8)").ok
    out["forks"] = a.run("import os\\nn = 0\\ntry:\\n    for _ in range(64):\\n        if \
os.fork() == 0:\\n"
                         "            import time; time.sleep(5); os._exit(0)\\n        n += 1\\n"
                         "except OSError:\\n    pass\\nprint(n)").stdout.strip()
    over = a.run("import numpy as np\\nx = np.ones(700 << 20, np.uint8)")
    out["over_own_limit"] = over.status.value
    results = {}
    honest = threading.Thread(target=lambda: results.setdefault("b", b.run(
        "import numpy as np, time\\nx = np.ones(100 << 20, np.uint8)\\nopen('ready', \
'w').close()\\n"
        "time.sleep(8)\\nprint('B done', int(x[-1]))")))
    honest.start()
    while not os.path.exists(os.path.join(b.workdir, "ready")) and honest.is_alive():
        time.sleep(0.05)
    grower = a.run("import numpy as np\\nx = np.ones(500 << 20, np.uint8)\\nprint('A grew')")
    honest.join(300)
    out["a"] = [grower.status.value, grower.rolled_back, list(grower.notes)[:1]]
    out["b"] = [results["b"].status.value, results["b"].stdout, list(results["b"].notes)[:1]]
    out["a_after"] = a.run("print(state)").stdout.strip()
    out["b_after"] = b.run("print(int(keep.sum()) >> 20)").stdout.strip()
    out["victims"] = service.oom_arbiter.victims if service.oom_arbiter else None
service.close()
print("RESULT " + json.dumps(out))
"""


def test_an_ordinary_users_controller_uses_its_delegated_cgroup_v2_group(delegated):
    user, home, procs = delegated
    done = _run_as_user(user, home, ["-c", USES_THE_GROUP], timeout_s=900, cgroup_procs=procs)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["version"] == 2 and "cgroups" not in out["missing"], out
    assert out["parent"].startswith(os.path.dirname(os.path.dirname(procs))), out
    assert out["arbiter"], out
    assert out["limits"] == [str(600 << 20), "16"], out
    assert out["a_state"] and out["b_state"], out
    assert 0 < int(out["forks"]) < 16, (
        out
    )  # pids.max: the trajectory's 16, holder and spare included
    assert out["over_own_limit"] == "oom", out
    assert out["a"][0] == "oom" and out["a"][1], out  # A paid: its step stopped, rolled back
    assert out["b"][:2] == ["ok", "B done 1\n"], out  # B's honest step finished
    assert out["a_after"] == "kept" and out["b_after"] == "100", out
    assert out["victims"] >= 1, out
    for key in ("memory", "processes", "who_pays"):
        assert out["verdicts"][key] != "does not hold", out["verdicts"]
