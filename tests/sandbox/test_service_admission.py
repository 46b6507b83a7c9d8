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
