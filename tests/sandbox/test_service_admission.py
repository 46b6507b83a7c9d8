"""The service's listening socket out of descriptors: a connection that arrives then is refused at
once (not left to hang in the backlog), the event loop goes on, and once descriptors are free
again connections are served. A real asyncio server on `GuardedListener`, in a child process
whose RLIMIT_NOFILE is used up on purpose."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.tier("unit")

ROOT = Path(__file__).resolve().parents[2]
SERVER = """
import asyncio, os, resource, socket, sys
from codedance.sandbox.serving.admission import ConnectionLimits, Gate, GuardedListener
from codedance.sandbox.serving.peers import LocalPolicy

class Hello(asyncio.Protocol):
    def connection_made(self, transport):
        transport.write(b"ok")
        transport.close()

async def main():
    loop = asyncio.get_running_loop()
    listener = GuardedListener(socket.AF_UNIX, Gate(LocalPolicy(frozenset(), frozenset()),
                                                    ConnectionLimits(total=100)))
    listener.bind(sys.argv[1])
    await loop.create_server(Hello, sock=listener)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    filler = []
    while True:
        try:
            filler.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            break
    print("full", flush=True)
    told = asyncio.Event()  # the test says when to free them
    loop.add_reader(0, told.set)
    await told.wait()
    for fd in filler:
        os.close(fd)
    print("free", flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def _reply(path: Path) -> bytes:
    """What the server sends a new connection before closing it (b"" when it refuses it)."""
    client = socket.socket(socket.AF_UNIX)
    client.settimeout(5)
    client.connect(str(path))
    try:
        data = b""
        while chunk := client.recv(100):
            data += chunk
        return data
    except ConnectionResetError:
        return b""
    finally:
        client.close()


def test_out_of_descriptors_a_connection_is_refused_at_once_and_serving_resumes(tmp_path):
    path = tmp_path / "s.sock"
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(path)],
        cwd=ROOT,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert server.stdout.readline() == "full\n", server.stderr.read()
        for _ in range(3):
            started = time.monotonic()
            assert _reply(path) == b""  # refused: closed, not left waiting in the backlog
            assert time.monotonic() - started < 2
        server.stdin.write("\n")
        server.stdin.flush()
        assert server.stdout.readline() == "free\n", server.stderr.read()
        assert _reply(path) == b"ok"
        assert server.poll() is None
    finally:
        server.kill()
        _, errors = server.communicate()
    assert "out of system resource" not in errors, errors  # asyncio's log-and-pause never ran
    assert errors.count("out of descriptors") == 1, errors  # one line per 10 s


def _tcp_gate(**limits):
    from codedance.sandbox.serving.admission import ConnectionLimits, Gate, GuardedListener
    from codedance.sandbox.serving.peers import LocalPolicy

    gate = Gate(LocalPolicy(frozenset(), frozenset()), ConnectionLimits(**limits))
    listener = GuardedListener(socket.AF_INET, gate)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.setblocking(False)
    return gate, listener


def test_a_displaced_connection_leaves_the_counts_before_its_transport_closes_it():
    """Peers without a token that connect faster than displaced connections close must not fill
    the service's count of connections: a token holder arriving among them is still kept."""
    import asyncio

    async def main():
        gate, listener = _tcp_gate(total=2, unauthenticated=1)
        clients = [socket.create_connection(listener.getsockname()) for _ in range(4)]
        kept = [listener.accept()[0] for _ in range(4)]  # no transport closes anything meanwhile
        assert gate.live == 1 and len(gate.waiting) == 1, (gate.live, len(gate.waiting))
        assert all(c.fileno() >= 0 for c in kept)  # displaced, shut down, not closed by us
        for conn in kept + clients:
            conn.close()
        assert gate.live == 0 and gate.by_client == {}
        listener.close()

    asyncio.run(main())


def test_at_most_a_burst_of_connections_is_kept_per_turn_of_the_event_loop(monkeypatch):
    """So that displaced connections still closing are a few bursts at most, not the backlog."""
    import asyncio

    from codedance.sandbox.serving import admission

    monkeypatch.setattr(admission, "ACCEPT_BURST", 2)

    async def main():
        gate, listener = _tcp_gate(unauthenticated=8)
        clients = [socket.create_connection(listener.getsockname()) for _ in range(3)]
        kept = [listener.accept()[0] for _ in range(2)]
        with pytest.raises(BlockingIOError):
            listener.accept()  # the third waits in the backlog for the next turn
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        kept.append(listener.accept()[0])
        assert gate.live == 3
        for conn in kept + clients:
            conn.close()
        listener.close()

    asyncio.run(main())
