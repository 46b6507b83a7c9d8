"""The sandbox service (``codedance sandbox serve``) and its clients, end to end: a real server
process, real sandboxes, clients as other uids over the Unix socket and over TCP.

SAFETY: the server is a child of this test process, so it lives in the PID namespace the suite
runs in (``unshare --pid``); hostile snippets run only where the service reports the jail's PID
namespace and seccomp. Non-root clients are started with ``setpriv`` under uids that exist only
as numbers (nothing is added to the host's users); they keep CAP_DAC_READ_SEARCH alone, so that
they can import the project from a root-owned interpreter while the service sees their uid.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip(
    "aiohttp", reason="the sandbox service needs the serve extra: pip install 'codedance[serve]'"
)
from codedance.policy import ScriptedPolicy
from codedance.rollout import run_episode
from codedance.sandbox import Sandbox, SandboxPool
from codedance.sandbox.checks import CHECKS, _Context, example_image
from codedance.sandbox.layout import Limits
from codedance.sandbox.remote import wire
from codedance.sandbox.remote.client import (
    SLACK_S,
    Connection,
    QuotaExceeded,
    RemotePool,
    RemoteSandbox,
)
from codedance.sandbox.service import URL_ENV, ServiceError
from codedance.types import ExecStatus, StopReason, Task

pytestmark = pytest.mark.tier("integration")

ROOT = Path(__file__).resolve().parents[2]
CLIENT_UID = 64123  # allowed: runs the contract suite
DYING_UID = 64125  # allowed: the client killed mid-session
STRANGER_UID = 64124  # not allowed
MEMBER_UID, ALLOWED_GROUP = 64126, 64200  # allowed by a supplementary group only
TOKEN = secrets.token_hex(16)
SERVE_WAIT_S = 120.0


class Served:
    """One ``codedance sandbox serve`` process and the urls it printed."""

    def __init__(self, directory: Path, *args: str, nofile: int | None = None):
        self.socket = directory / "sandbox.sock"
        tokens = directory / "tokens"
        tokens.write_text(f"workstation {TOKEN}\n")
        tokens.chmod(0o600)
        limit = ["prlimit", f"--nofile={nofile}:{nofile}"] if nofile else []
        self.process = subprocess.Popen(
            [
                *limit,
                sys.executable,
                "-c",
                "from codedance.cli import main; main()",
                "sandbox",
                "serve",
                "--socket",
                str(self.socket),
                "--tcp",
                "127.0.0.1:0",
                "--token-file",
                str(tokens),
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
            cwd=ROOT,
        )
        self.output: list[str] = []
        deadline = time.monotonic() + SERVE_WAIT_S
        for line in self.process.stdout:
            self.output.append(line)
            if line.startswith("serving sandboxes on "):
                self.unix, self.tcp = line.split("on ", 1)[1].strip().split(" and ")
                break
            assert time.monotonic() < deadline, "".join(self.output)
        else:
            raise AssertionError("the service did not start:\n" + "".join(self.output))
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for line in self.process.stdout:
            self.output.append(line)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (URL_ENV, wire.TOKEN_ENV)}
    return {**env, "PYTHONPATH": str(ROOT), "HOME": "/tmp", **extra}


def as_uid(
    uid: int,
    code: str,
    *,
    url: str,
    popen: bool = False,
    timeout_s: float = 600,
    group: int | None = None,
    **env: str,
):
    """Run ``code`` in a Python process of ``uid`` (not root; in supplementary ``group`` if
    given) with CODEDANCE_SANDBOX_URL=url."""
    groups = f"--groups={group}" if group is not None else "--clear-groups"
    command = [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        groups,
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
        sys.executable,
        "-c",
        code,
    ]
    options = {"env": _env(**{URL_ENV: url}, **env), "cwd": "/tmp", "text": True}
    if popen:
        return subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **options
        )
    return subprocess.run(command, check=False, capture_output=True, timeout=timeout_s, **options)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server = Served(
        tmp_path_factory.mktemp("serve"),
        "--allow-user",
        str(CLIENT_UID),
        "--allow-user",
        str(DYING_UID),
        "--allow-group",
        str(ALLOWED_GROUP),
        "--client-sandboxes",
        "6",
        "--client-memory-mib",
        str(3 * 4096),
    )
    if not (server.output and "isolation: full" in server.output[0]):
        server.stop()
        pytest.skip(f"the service tests need full isolation: {server.output[:3]}")
    yield server
    server.stop()


@pytest.fixture
def fresh(tmp_path):
    """A service of this test alone (it gets killed or restarted)."""
    servers = []

    def start(directory: Path = tmp_path, *args: str, nofile: int | None = None) -> Served:
        servers.append(Served(directory, *args, nofile=nofile))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


# ------------------------------------------------------------------ the contract, through the
# service
def test_the_contract_suite_passes_through_the_service_as_a_non_root_client(served):
    """tests/sandbox/test_contract.py and the public checks, run by uid 64123 against the service
    (its conftest creates every sandbox through CODEDANCE_SANDBOX_URL)."""
    run = as_uid(
        CLIENT_UID,
        (
            "import sys, pytest\nsys.exit(pytest.main(['-q', '-m', '', '-p', "
            "'no:cacheprovider', '--rootdir', "
            f"{str(ROOT)!r}, {str(ROOT / 'tests/sandbox/test_contract.py')!r}, "
            f"{str(Path(__file__))!r} + '::test_each_check_holds_for_a_client_of_the_service']))"
        ),
        url=served.unix,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    passed = re.search(r"(\d+) passed", run.stdout)
    # test_contract.py's 15 other tests and the 8 checks (test_property skips itself: no service
    # here)
    assert passed and int(passed.group(1)) >= 23 and "skipped" in run.stdout, run.stdout[-2000:]


HOSTILE_SUITES = ("test_hostile.py", "test_hostile_holder.py", "test_hostile_pages.py")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_hostile_suites_pass_through_the_service_as_a_non_root_client(fresh, tmp_path):
    """The snippet-level hostile tests (fork and memory bombs, kill(-1), escapes, attacks on a
    neighbour), run by uid 64123 against a service of their own; the tests that need the holder's
    internals (its cgroup, its files, its lock) or a controller in the test's process skip
    themselves there, each saying why."""
    server = fresh(tmp_path, "--allow-user", str(CLIENT_UID))
    suites = [str(ROOT / "tests/sandbox" / name) for name in HOSTILE_SUITES]
    run = as_uid(
        CLIENT_UID,
        "import sys, pytest\nsys.exit(pytest.main(['-q', '-rfs', '-m', '', '-p', "
        "'no:cacheprovider', "
        f"'--rootdir', {str(ROOT)!r}, *{suites!r}]))",
        url=server.unix,
        timeout_s=1100,
    )
    summary = "\n".join(
        line for line in run.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))
    )
    assert run.returncode == 0, summary + run.stdout[-4000:] + run.stderr[-2000:]
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed and int(passed.group(1)) >= 100, run.stdout[-3000:]
    assert server.process.poll() is None, "".join(server.output[-20:])


class _RemoteContext(_Context):
    """The public checks' context with sandboxes in the service (CODEDANCE_SANDBOX_URL)."""

    def __init__(self, image: bytes):
        super().__init__(None, image)
        self.isolation = None

    def sandbox(self, **options):
        sandbox = Sandbox([self.image], **options)
        self.isolation = sandbox.isolation
        return sandbox

    @property
    def hostile_allowed(self) -> bool:
        return self.isolation is not None and self.isolation.namespaces and self.isolation.seccomp


@pytest.mark.parametrize(
    "number,name,check",
    [c for c in CHECKS if c[1] != "no leaks after close"],
    ids=[name for _, name, _ in CHECKS if name != "no leaks after close"],
)
def test_each_check_holds_for_a_client_of_the_service(number, name, check):
    if not os.environ.get(URL_ENV):
        pytest.skip("run by the contract test above, as a client of the service")
    context = _RemoteContext(example_image())
    with Sandbox([context.image]) as probe:
        assert isinstance(probe, RemoteSandbox)
        if not (probe.isolation.namespaces and probe.isolation.seccomp):
            pytest.skip("the checks run hostile code only inside the jail")
    assert check(context)


def test_a_uid_not_allowed_is_refused_with_one_line(served):
    run = as_uid(
        STRANGER_UID, "from codedance.sandbox import SandboxPool\nSandboxPool()", url=served.unix
    )
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert f"uid {STRANGER_UID} is not allowed to use this sandbox service" in last, run.stderr[
        -2000:
    ]


def test_a_second_service_on_a_live_socket_is_refused_with_one_line(served):
    second = subprocess.run(
        [
            sys.executable,
            "-c",
            "from codedance.cli import main; main()",
            "sandbox",
            "serve",
            "--socket",
            str(served.socket),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        check=False,
    )
    assert second.returncode == 2 and second.stdout == "", second.stdout
    assert second.stderr.strip() == (
        f"error: a sandbox service already listens on {served.socket}; "
        "stop it first or pass another --socket"
    )
    assert Connection(served.unix).health()["instance"]  # the first still serves


def test_a_member_of_an_allowed_group_is_served_by_its_supplementary_groups(served):
    code = "from codedance.sandbox import Sandbox\nprint(Sandbox().run('print(5)').stdout)"
    member = as_uid(MEMBER_UID, code, url=served.unix, group=ALLOWED_GROUP)
    assert member.stdout.strip() == "5", member.stderr[-2000:]
    outsider = as_uid(MEMBER_UID, code, url=served.unix)  # the same uid outside the group
    assert f"uid {MEMBER_UID} is not allowed" in outsider.stderr.strip().splitlines()[-1]


# ------------------------------------------------------------------ TCP
def test_tcp_with_the_token_runs_and_without_it_is_refused(served):
    with SandboxPool(url=served.tcp, token=TOKEN) as pool:
        assert isinstance(pool, RemotePool)
        with pool.sandbox([example_image()]) as sb:
            result = sb.run(
                "from PIL import Image\nprint(input_image.size)\nImage.new('RGB', (64, "
                "48), (0, 0, 255))"
            )
    assert result.status is ExecStatus.OK, result
    assert result.images[0].size == (64, 48) and result.images[0].to_pil().getpixel((1, 1))[:3] == (
        0,
        0,
        255,
    )
    for token in ("0" * 32, ""):
        with pytest.raises(ServiceError, match="a valid bearer token is required over TCP"):
            SandboxPool(url=served.tcp, token=token)


def test_tcp_over_tls_with_a_private_ca(fresh, tmp_path, monkeypatch):
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(tmp_path / "key.pem"),
            "-out",
            str(tmp_path / "cert.pem"),
        ],
        check=True,
        capture_output=True,
    )
    server = fresh(
        tmp_path, "--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")
    )
    assert server.tcp.startswith("https://127.0.0.1:")
    with pytest.raises(
        ServiceError, match="CERTIFICATE_VERIFY_FAILED"
    ):  # not a CA the client knows
        SandboxPool(url=server.tcp, token=TOKEN)
    monkeypatch.setenv(wire.CA_ENV, str(tmp_path / "cert.pem"))
    with SandboxPool(url=server.tcp, token=TOKEN) as pool:
        assert pool.sandbox().run("print(3)").stdout == "3\n"


# ------------------------------------------------------------------ quotas
def test_a_client_over_its_quota_is_refused_and_another_client_is_not(served):
    with SandboxPool(url=served.tcp, token=TOKEN) as pool:
        held = [pool.sandbox() for _ in range(3)]  # 3 x the default 4 GiB: the memory quota
        with pytest.raises(
            QuotaExceeded, match=r"^quota: token:workstation's live sandboxes may use 12288 MiB"
        ):
            pool.sandbox()
        other = as_uid(
            CLIENT_UID,
            "from codedance.sandbox import Sandbox\nprint(Sandbox().run('print(7)').stdout)",
            url=served.unix,
        )
        assert other.stdout.strip() == "7", other.stdout + other.stderr[-2000:]
        for sandbox in held:
            sandbox.close()
        small = [pool.sandbox(limits=Limits(memory=64 << 20)) for _ in range(6)]
        with pytest.raises(
            QuotaExceeded, match=r"^quota: token:workstation already has 6 live sandboxes"
        ) as refused:
            pool.sandbox(limits=Limits(memory=64 << 20))
        assert "\n" not in str(refused.value)
        assert all(sandbox.run("print(1)").ok for sandbox in small)


def test_limits_above_the_ceiling_and_oversized_steps_are_refused_in_one_line(served):
    """A client's `Limits` are the host's processes, CPUs and disk: above the service's ceiling
    (the defaults unless the operator raises them) a creation is refused, never clamped; a step's
    request over its cap is refused before its body is read."""
    with (
        SandboxPool(url=served.tcp, token=TOKEN) as pool,
        pytest.raises(
            ValueError, match=r"Limits.processes = 2000 is above this service's ceiling \(32\)"
        ),
    ):
        pool.sandbox(limits=Limits(processes=2000))
    connection = Connection(served.tcp, TOKEN)
    try:
        sandbox = RemoteSandbox(connection=connection)
        body = {"code": "#" * (5 << 20), "timeout_s": 5.0, "seq": 1}
        status, text = connection.call(
            "POST", f"/v1/sandboxes/{sandbox._id}/run", body, timeout_s=60
        )
        assert status == 413, text
        sandbox._seq = 1
        assert sandbox.run("print(1)").stdout == "1\n"
    finally:
        connection.close()


# ------------------------------------------------------------------ faults
def test_the_service_killed_mid_step_gives_lost_at_once_and_a_restart_is_picked_up(fresh, tmp_path):
    server = fresh()
    with SandboxPool(url=server.unix) as pool:
        sandbox = pool.sandbox(timeout_s=60)
        assert sandbox.run("x = 1").ok
        outcome = {}

        def step() -> None:
            started = time.monotonic()
            outcome["result"] = sandbox.run("import time\ntime.sleep(50)")
            outcome["seconds"] = time.monotonic() - started

        thread = threading.Thread(target=step)
        thread.start()
        time.sleep(1.0)
        killed_at = time.monotonic()
        server.process.send_signal(signal.SIGKILL)
        thread.join(30)
        assert not thread.is_alive(), "the step hung after the service was killed"
        assert outcome["result"].status is ExecStatus.LOST, outcome["result"]
        assert time.monotonic() - killed_at < 5.0
        assert "did not answer this step" in outcome["result"].notes[0]
        later = sandbox.run("print(x)")
        assert later.status is ExecStatus.LOST and not sandbox.alive
        episode = run_episode(
            ScriptedPolicy(["<think>t</think>\n<code>\n```python\nprint(x)\n```\n</code>"]),
            Task(id="t", question="q", images=(), answer="1"),
            sandbox,
        )
        assert (
            episode.stop_reason is StopReason.SANDBOX_ERROR
        )  # not the model's fault: no reward for it
        server.process.wait(10)
        restarted = fresh(tmp_path)  # the same socket path: the dead service's file is taken over
        again = pool.sandbox()
        assert again.run("print(6 * 7)").stdout == "42\n"
        assert sandbox.run("print(x)").status is ExecStatus.LOST
    restarted.stop()


def test_a_stopped_service_stops_at_once_and_its_clients_see_their_sandboxes_lost(fresh):
    server = fresh()
    with SandboxPool(url=server.unix) as pool:
        sandbox = pool.sandbox()
        assert sandbox.run("x = 1").ok
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(15)  # the open session streams end with it, not after a grace period
        deadline = time.monotonic() + 10
        while sandbox.alive and time.monotonic() < deadline:
            time.sleep(0.1)
        result = sandbox.run("print(x)")
    assert result.status is ExecStatus.LOST and "closed the session" in result.notes[0], result


def test_a_frozen_service_gives_lost_by_the_steps_deadline_never_a_hang(fresh):
    server = fresh()
    with SandboxPool(url=server.unix) as pool:
        sandbox = pool.sandbox(timeout_s=1, limits=Limits(recovery_s=1))
        assert sandbox.run("x = 1").ok
        server.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            result = sandbox.run("print(x)")
            took = time.monotonic() - started
        finally:
            server.process.send_signal(signal.SIGCONT)
    assert result.status is ExecStatus.LOST, result
    assert took < 1 + 1 + SLACK_S + 5, took  # the step's timeout, its recovery, the client's slack


async def test_the_asyncio_api_through_the_service(served):
    async with SandboxPool(url=served.tcp, token=TOKEN, max_running=2) as pool:
        sandboxes = [await pool.asandbox() for _ in range(2)]
        results = await asyncio.gather(*(sb.arun(f"print({i})") for i, sb in enumerate(sandboxes)))
        assert [r.stdout for r in results] == ["0\n", "1\n"]
        assert pool.live == 2


def test_a_step_sent_twice_runs_once(served):
    """Each step carries its sequence number: a replayed request is refused, never run again."""
    connection = Connection(served.tcp, TOKEN)
    try:
        sandbox = RemoteSandbox(connection=connection)
        assert sandbox.run("n = 0").ok
        body = {"code": "n += 1", "timeout_s": 5.0, "seq": 2}
        first, _ = connection.call("POST", f"/v1/sandboxes/{sandbox._id}/run", body, timeout_s=30)
        replay, text = connection.call(
            "POST", f"/v1/sandboxes/{sandbox._id}/run", body, timeout_s=30
        )
        assert first == 200 and replay == 409, text
        assert b"never run twice" in text
        sandbox._seq = 2
        assert sandbox.run("print(n)").stdout == "1\n"
    finally:
        connection.close()


def test_a_client_that_dies_has_its_sandboxes_closed(served):
    holder = as_uid(DYING_UID, (
        "from codedance.sandbox import SandboxPool\nimport time\npool = SandboxPool()\n"
        "held = [pool.sandbox() for _ in range(2)]\nprint('ready', flush=True)\ntime.sleep(600)"),
        url=served.unix, popen=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "ready", holder.stdout.read()[-2000:]
        assert _held_by(DYING_UID, served) == 2
        holder.kill()
        holder.wait(10)
        deadline = time.monotonic() + 15
        while _held_by(DYING_UID, served) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _held_by(DYING_UID, served) == 0, "the dead client's sandboxes are still open"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def _held_by(uid: int, server: Served) -> int:
    """How many live sandboxes the service counts for ``uid`` (asked as that uid)."""
    run = as_uid(
        uid,
        "import json\nfrom codedance.sandbox.remote.client import Connection\n"
        f"print(json.dumps(Connection({server.unix!r}).health()))",
        url=server.unix,
        timeout_s=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])["sandboxes"]


# ------------------------------------------------------------------ CODEDANCE_SANDBOX_URL
def test_code_that_creates_sandboxes_uses_the_service_named_by_the_environment(served, monkeypatch):
    monkeypatch.setenv(URL_ENV, served.tcp)
    monkeypatch.setenv(wire.TOKEN_ENV, TOKEN)
    with Sandbox(
        [example_image()], timeout_s=5
    ) as sandbox:  # as `codedance sandbox run`, eval's adapter
        assert isinstance(sandbox, RemoteSandbox)
        assert sandbox.run("print(input_image.size)").ok
    with SandboxPool(timeout_s=5) as pool:  # as eval, curate, the verl agent loop create theirs
        assert isinstance(pool, RemotePool) and pool.sandbox().run("print(1)").stdout == "1\n"


def test_a_bad_url_is_one_line_before_any_work():
    with pytest.raises(ValueError, match="expected unix:///path/to/socket or http"):
        SandboxPool(url="tcp://host")
    with pytest.raises(
        ServiceError, match="cannot reach the sandbox service at unix:///nonexistent"
    ):
        SandboxPool(url="unix:///nonexistent/sandbox.sock")


# ------------------------------------------------------------------ placement across hosts: Ray's
def test_ray_actors_on_two_nodes_each_use_their_own_nodes_service(fresh, tmp_path, monkeypatch):
    """Two Ray nodes on this machine, each started with CODEDANCE_SANDBOX_URL naming its own
    service (as `ray start` on each host would be); actors placed on a node as verl places its
    agent-loop workers (node affinity) create `SandboxPool()` with no url, and their sandboxes
    live in that node's service."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    services = {"a": fresh(tmp_path / "a"), "b": fresh(tmp_path / "b")}
    monkeypatch.setenv(URL_ENV, services["a"].unix)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"node_a": 1}, "include_dashboard": False},
    )
    try:
        monkeypatch.setenv(URL_ENV, services["b"].unix)
        cluster.add_node(num_cpus=1, resources={"node_b": 1})
        monkeypatch.delenv(URL_ENV)
        ray.init(address=cluster.address, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
        nodes = {
            name: next(
                n["NodeID"] for n in ray.nodes() if n["Alive"] and f"node_{name}" in n["Resources"]
            )
            for name in services
        }

        @ray.remote(num_cpus=0)
        class Worker:
            def open(self) -> str:
                from codedance.sandbox import SandboxPool

                self.pool = SandboxPool()
                self.sandbox = self.pool.sandbox()
                return self.sandbox.run("print('ran')").stdout

        def held() -> dict[str, int]:
            return {name: Connection(s.unix).health()["sandboxes"] for name, s in services.items()}

        workers = {
            name: Worker.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
            ).remote()
            for name, node in nodes.items()
        }
        assert ray.get(workers["a"].open.remote(), timeout=120) == "ran\n"
        assert held() == {"a": 1, "b": 0}
        assert ray.get(workers["b"].open.remote(), timeout=120) == "ran\n"
        assert held() == {"a": 1, "b": 1}
    finally:
        ray.shutdown()
        cluster.shutdown()
