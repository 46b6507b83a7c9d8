"""The sandbox service under hostile connections and bodies: a local uid outside the allow-list, a
TCP peer without a token and an allowed client with oversized or too many requests must neither
exhaust the service's descriptors or memory nor cost an allowed client its sandbox.

Real ``codedance sandbox serve`` processes with a small RLIMIT_NOFILE (so that a few hundred
connections would exhaust them), attackers as other uids with ``setpriv``. No hostile snippet runs
in a sandbox here; the service is a child of the test, in the suite's PID namespace.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from pathlib import Path

import httpcore
import pytest

from codedance.sandbox import Sandbox
from codedance.sandbox.remote import wire
from codedance.sandbox.remote.client import Connection, RemoteSandbox
from codedance.sandbox.serving.admission import RESERVE_FDS
from tests.sandbox.test_service_remote import CLIENT_UID, STRANGER_UID, TOKEN, Served, as_uid

pytestmark = pytest.mark.tier("integration")

# the service's descriptors: (600 - RESERVE_FDS) // 2 = 172 connections at most; an attacker opens
# (and keeps, where the service lets it) more connections than that
NOFILE, HELD = 600, 1000
# over TCP, more: the 64 waiting connections and those displaced in the last few accepting bursts
# (`admission.ACCEPT_BURST` each) are open together until their transports close them
TCP_NOFILE, TCP_HELD = 2600, 3000
HOLD = """
import os, resource, socket, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, ({held} + 64, \
resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
for _ in range({held}):
    s = socket.socket({family}); s.settimeout(3)
    try:
        s.connect({address!r})
    except OSError as exc:
        print('stopped:', exc, flush=True); break
    held.append(s)
print('holding', len(held), flush=True)
time.sleep(600)
"""


@pytest.fixture
def small(tmp_path):
    """A service of this test alone with NOFILE descriptors, serving CLIENT_UID."""
    servers = []

    def start(*args: str, nofile: int = NOFILE) -> Served:
        servers.append(Served(tmp_path, "--allow-user", str(CLIENT_UID), *args, nofile=nofile))
        if "isolation: full" not in servers[-1].output[0]:
            pytest.skip(f"the service tests need full isolation: {servers[-1].output[:3]}")
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def _descriptors(server: Served) -> int:
    return len(os.listdir(f"/proc/{server.process.pid}/fd"))


def _attack(code: str):
    attacker = as_uid(STRANGER_UID, code, url="unix:///nonexistent", popen=True)
    line = attacker.stdout.readline()
    assert line.startswith("holding"), line + attacker.stdout.read(2000)
    return attacker


def _assert_served(server: Served, old: Sandbox, nofile: int = NOFILE) -> None:
    """The allowed client's sandbox kept its state, and a new one starts."""
    assert old.run("print(x)").stdout == "7\n"
    with Sandbox(url=server.unix, timeout_s=5, start_timeout_s=20) as new:
        assert new.run("print(1)").stdout == "1\n"
    assert _descriptors(server) < nofile - RESERVE_FDS


def test_connections_of_a_uid_not_allowed_are_closed_at_accept_and_cost_nothing(small):
    server = small()
    old = Sandbox(url=server.unix, timeout_s=10)
    assert old.run("x = 7").ok
    attacker = _attack(HOLD.format(held=HELD, family="socket.AF_UNIX", address=str(server.socket)))
    try:
        _assert_served(server, old)
        refused = as_uid(
            STRANGER_UID,
            "from codedance.sandbox import SandboxPool\nSandboxPool()",
            url=server.unix,
        )
        last = refused.stderr.strip().splitlines()[-1]
        assert f"uid {STRANGER_UID} is not allowed to use this sandbox service" in last, last
    finally:
        attacker.kill()
        attacker.wait()
        old.close()


def test_tcp_peers_without_a_token_hold_few_connections_and_only_briefly(small):
    server = small(nofile=TCP_NOFILE)
    host, port = re.match(r"http://(.+):(\d+)$", server.tcp).groups()
    old = Sandbox(url=server.unix, timeout_s=10)
    assert old.run("x = 7").ok
    attacker = _attack(HOLD.format(held=TCP_HELD, family="", address=(host, int(port))))
    try:
        connection = Connection(server.tcp, TOKEN)  # its 64 waiting connections keep no one out
        assert connection.health()["client"] == "token:workstation"
        connection.close()
        _assert_served(server, old, TCP_NOFILE)
        slow = socket.create_connection((host, int(port)))  # a request a byte at a time
        started = time.monotonic()
        with pytest.raises(OSError):  # the service closes it: its request never completes
            for byte in b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" * 4:
                slow.send(bytes([byte]))
                time.sleep(0.3)
        slow.close()
        assert time.monotonic() - started < 20, "a slow request kept its connection"
        assert _descriptors(server) < 100  # the attacker's waiting ones are gone too
    finally:
        attacker.kill()
        attacker.wait()
        old.close()


def test_images_above_the_ceiling_are_refused_before_they_are_read(small):
    server = small("--max-images-mib", "8")
    connection = Connection(server.unix)
    session = connection.session()
    size = 700 << 20
    header = b"\xc6" + size.to_bytes(4, "big")  # msgpack bin32: one 700 MiB image

    def body():
        yield header
        chunk = b"q" * (1 << 20)
        for _ in range(size >> 20):
            yield chunk

    started = time.monotonic()
    with httpcore.ConnectionPool(uds=str(server.socket)) as pool:
        response = pool.request(
            "POST",
            f"http://x/v1/sessions/{session.id}/sandboxes",
            headers=[("Content-Length", str(len(header) + size))],
            content=body(),
        )
    assert response.status == 413, response.content
    assert b"at most 8 MiB (this service's --max-images-mib)" in response.content
    assert time.monotonic() - started < 30
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    peak = int(re.search(r"VmHWM:\s+(\d+)", status)[1])
    assert peak < 400 << 10, f"the service peaked at {peak >> 10} MiB"
    connection.close()


def test_a_clients_bodies_and_steps_in_flight_are_bounded(small):
    server = small("--max-images-mib", "12", "--client-request-mib", "16")
    image = wire.pack({"images": [b"i" * (10 << 20)], "limits": {}, "timeout_s": 5.0,
                       "require": None, "start_timeout_s": 20.0})  # fmt: skip
    connection = Connection(server.unix)
    session = connection.session()
    path = f"http://x/v1/sessions/{session.id}/sandboxes"
    outcome = {}

    def slow_body():
        yield image[: len(image) // 2]
        time.sleep(3)  # the first request is in flight (10 MiB of the client's 16) meanwhile
        yield image[len(image) // 2 :]

    def first():
        with httpcore.ConnectionPool(uds=str(server.socket)) as pool:
            outcome["first"] = pool.request(
                "POST", path, headers=[("Content-Length", str(len(image)))], content=slow_body()
            ).status

    thread = threading.Thread(target=first)
    thread.start()
    time.sleep(1)
    with httpcore.ConnectionPool(uds=str(server.socket)) as pool:
        second = pool.request("POST", path, content=image)
    thread.join()
    assert second.status == 429 and b"--client-request-mib" in second.content, second.content
    assert outcome["first"] != 429, outcome

    sandbox = RemoteSandbox(connection=connection)
    running = threading.Thread(target=sandbox.run, args=("import time; time.sleep(3)",))
    running.start()
    time.sleep(1)
    body = {"code": "print(2)", "timeout_s": 5.0, "seq": 99}
    status, text = connection.call("POST", f"/v1/sandboxes/{sandbox._id}/run", body, timeout_s=30)
    running.join()
    assert status == 409 and b"a step of this sandbox is running" in text, text
    sandbox._seq = 99
    assert sandbox.run("print(3)").stdout == "3\n"
    connection.close()
