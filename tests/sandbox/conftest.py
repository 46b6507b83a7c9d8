"""Fixtures for the sandbox tests.

SAFETY: hostile snippets (``os.kill(-1, 9)``, fork bombs, memory bombs) run only in sandboxes from
the ``jail`` fixture, which first asserts that the jail's own PID namespace and the seccomp filter
are in force (and skips otherwise). ``scripts/run-tests.sh`` additionally runs the whole suite in
a fresh PID namespace when it can.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from codedance.sandbox import Sandbox, SandboxService
from codedance.sandbox.service import URL_ENV
from codedance.types import ExecStatus


@pytest.fixture(scope="session")
def service():
    if os.environ.get(URL_ENV):
        pytest.skip(
            f"a test of this process's own service ({URL_ENV} is set: sandboxes are the service's)"
        )
    svc = SandboxService()
    yield svc
    svc.close()


@pytest.fixture
def make(request):
    """Create sandboxes on the shared service (or, with CODEDANCE_SANDBOX_URL set, in the sandbox
    service there: `test_service_remote.py` runs this suite so); all are closed after the test."""
    created = []
    on = {} if os.environ.get(URL_ENV) else {"service": request.getfixturevalue("service")}

    def factory(images=(), **options):
        sandbox = Sandbox(images, **on, **options)
        created.append(sandbox)
        return sandbox

    yield factory
    for sandbox in created:
        sandbox.close()


def in_fresh_pid_namespace(pid: int) -> bool:
    """True when ``pid`` (a host pid) lives in a PID namespace other than ours."""
    return os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")


@pytest.fixture
def local():
    """For a test that reads the controller's own objects: skipped for a client of a sandbox
    service (`test_service_remote.py` runs the hostile suites so), which has none of them."""
    if os.environ.get(URL_ENV):
        pytest.skip(
            "reads the controller's own objects (a holder's cgroup, pid, files or lock, or a "
            "service of its own), which a client of a sandbox service does not have"
        )


# binds no name in the trajectory: what the holder itself says of its PID namespace and seccomp
_JAILED_PROBE = (
    "print(__import__('os').readlink('/proc/self/ns/pid'), "
    "'Seccomp:\\t2' in open('/proc/self/status').read())"
)


@pytest.fixture
def jail(make):
    """A factory of sandboxes in which hostile code may run: PID namespace and seccomp asserted."""

    def factory(images=(), **options):
        sandbox = make(images, **options)
        if not (sandbox.isolation.namespaces and sandbox.isolation.seccomp):
            pytest.skip(
                "hostile tests need the jail's PID namespace and seccomp: "
                f"{sandbox.isolation.describe()}"
            )
        if os.environ.get(URL_ENV):  # a client of a sandbox service: the holder asserts it itself
            probe = sandbox.run(_JAILED_PROBE)
            assert probe.ok, probe
            namespace, seccomp = probe.stdout.split()
            assert namespace != os.readlink("/proc/self/ns/pid"), (
                "the holder is in our PID namespace"
            )
            assert seccomp == "True", "the holder runs without its seccomp filter"
            return sandbox
        assert in_fresh_pid_namespace(sandbox._holder_pid), (
            "the holder is in the host's PID namespace"
        )
        assert "Seccomp:\t2" in Path(f"/proc/{sandbox._holder_pid}/status").read_text()
        return sandbox

    return factory


_LISTING = "print(x, open('keep.txt').read(), sorted(os.listdir('.')), os.getcwd())"


def prepare_state(sandbox) -> str:
    """Known state (variable, import, file, cwd) that every failure must leave intact; returns
    what `assert_state_intact` must see."""
    result = sandbox.run(
        "import os, numpy as np\nx = 1\nopen('keep.txt', "
        "'w').write('good')\nos.makedirs('sub', exist_ok=True)"
    )
    assert result.status is ExecStatus.OK, result
    listing = sandbox.run(_LISTING)
    assert listing.status is ExecStatus.OK, listing
    return listing.stdout


def assert_state_intact(sandbox, expected: str) -> None:
    """The state of `prepare_state` survived, no stray process is left, and new steps work."""
    result = sandbox.run(_LISTING)
    assert result.status is ExecStatus.OK, result
    assert result.stdout == expected
    assert_only_holder_and_spare(sandbox)


def assert_only_holder_and_spare(sandbox) -> None:
    """No stray process: the cgroup holds the holder and at most its idle spare (its child), once
    the holders replaced by the last commits (killed then, reaped lazily) have exited. (Not seen
    from a client of a sandbox service.)"""
    if getattr(sandbox, "_cgroup", None) is None:
        return
    with sandbox._lock:  # the idle freezer reaps them too
        sandbox._reap_dying(time.monotonic() + 5.0)
    assert not sandbox._dying, "a replaced holder outlived its SIGKILL by 5 s"
    others = sandbox._cgroup.pids() - {sandbox._holder_pid}
    assert len(others) <= 1, others
    for pid in others:
        with open(f"/proc/{pid}/stat") as handle:
            assert int(handle.read().rsplit(")", 1)[1].split()[1]) == sandbox._holder_pid


@pytest.fixture(autouse=True)
def _no_descriptor_left_held():
    """Every sandbox test lets go of what it held: a closed descriptor left in `forks`' set would be
    replaced by /dev/null in every later forked child, whatever that number then names."""
    from codedance.sandbox import forks

    before = forks.held()
    yield
    stale = {fd for fd in forks.held() - before if not os.path.exists(f"/proc/self/fd/{fd}")}
    assert stale == set(), f"descriptors closed while still held: {sorted(stale)}"
