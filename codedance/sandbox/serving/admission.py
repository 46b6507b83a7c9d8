"""Which connections the service keeps, decided when it accepts them, before a byte is read.

Every connection costs the service a descriptor, and descriptors are what its live sandboxes need
to take their next step. So a connection is a resource of its client, bounded like sandboxes are:

- on the Unix socket the kernel says who connected (``SO_PEERCRED``); a uid outside the
  allow-list is closed at accept, so it holds nothing;
- a connection closed at accept is first sent its one-line answer (403, or 503 for a full
  service) in one write that never waits: HTTP clients read a response that arrives before
  their request is sent, so the client says why, and the service never reads from it;
- each client holds at most ``per_client`` connections at once (a uid on the Unix socket, an
  address over TCP), and all clients together at most ``total``: half of the descriptors left
  above `RESERVE_FDS`, so the other half and the reserve stay for the sandboxes;
- a TCP connection has not shown its token yet: at most ``unauthenticated`` such connections at
  once, a new one displacing the one that has waited longest (a token holder's request follows
  its connection at once, so peers without a token cannot keep it out), and every connection
  must make an admitted request within ``first_request_s`` or it is closed (a client that
  connects and sends nothing, or sends its request a byte at a time); a connection so closed
  leaves the counts at once, though its transport lets its descriptor go a few turns of the
  event loop later;
- at most `ACCEPT_BURST` connections are kept per turn of the event loop (the rest wait in the
  kernel's backlog for the next turn), so connections displaced faster than their transports
  close cannot pile up: those still closing are at most a few bursts, not the whole backlog;
- out of descriptors at accept (``EMFILE``), the service closes a spare descriptor it keeps for
  that moment, accepts and closes the waiting connection (its client sees it refused at once,
  not a hang), and opens the spare again: never a busy loop, never a crash.

`GuardedListener` is the listening socket handed to aiohttp (``web.SockSite``): asyncio calls its
``accept``, so nothing here replaces aiohttp's server.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import socket
import time
from dataclasses import dataclass

from codedance.sandbox.serving.peers import LocalPolicy, not_allowed, peer_of

RESERVE_FDS = 256  # descriptors kept for the controller's own work: a step's files, a restore
FDS_PER_SANDBOX = 16  # a live trajectory's descriptors in the controller (about seven), doubled
LOG_EVERY_S = 10.0  # a refusal is logged at most this often (an attacker must not fill the log)
ACCEPT_BURST = 64  # connections kept per turn of the event loop (`GuardedListener.accept`)

log = logging.getLogger(__name__)


def descriptor_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def descriptors_left() -> int:
    """How many more descriptors this process may open now."""
    return descriptor_limit() - len(os.listdir("/proc/self/fd"))


@dataclass(frozen=True)
class ConnectionLimits:
    """How many connections the service keeps (see the module's docstring)."""

    per_client: int = 2048 + 64  # a client's steps in flight hold one each, and its session one
    total: int | None = None  # None: half the descriptors above RESERVE_FDS
    unauthenticated: int = 64  # TCP connections that have not made an admitted request yet
    first_request_s: float = 10.0

    def total_now(self) -> int:
        if self.total is not None:
            return self.total
        return max(16, (descriptor_limit() - RESERVE_FDS) // 2)


class _Connection(socket.socket):
    """An accepted connection that gives back its place in the `Gate` when it closes."""

    gate: Gate | None = None
    key = ""
    served = False  # it made a request the service serves

    def close(self) -> None:
        if self.gate is not None:
            self.gate.release(self)
        super().close()


class Gate:
    """The counts of live connections by client, and the rules of the module's docstring."""

    def __init__(self, policy: LocalPolicy, limits: ConnectionLimits):
        self.policy = policy
        self.limits = limits
        self.total = limits.total_now()
        self.by_client: dict[str, int] = {}
        self.live = 0
        self.waiting: dict[_Connection, None] = {}  # TCP, no token shown yet; the oldest first
        self._by_fd: dict[int, _Connection] = {}
        self._logged: dict[str, float] = {}

    def refusal(self, conn: socket.socket, address) -> tuple[int, str] | None:
        """The HTTP status and one line ``conn`` is closed with at once; None when it is kept
        (then counted as its ``key``)."""
        if conn.family == socket.AF_UNIX:
            peer = peer_of(conn)
            if not self.policy.admits(peer):
                return 403, not_allowed(peer.uid)
            key = f"uid:{peer.uid}"
        else:
            key = f"address:{address[0]}"
        if self.live >= self.total:
            return 503, (f"the sandbox service holds {self.live} connections, the most it keeps: "
                         "try again later")  # fmt: skip
        if self.by_client.get(key, 0) >= self.limits.per_client:
            return 503, (
                f"{key} holds {self.limits.per_client} connections to the sandbox "
                "service, the most a client may (--client-connections): close some"
            )
        conn.key = key
        return None

    def keep(self, conn: _Connection) -> None:
        conn.gate = self
        self.live += 1
        self.by_client[conn.key] = self.by_client.get(conn.key, 0) + 1
        self._by_fd[conn.fileno()] = conn
        if conn.family != socket.AF_UNIX:  # a Unix peer was checked above
            if len(self.waiting) >= self.limits.unauthenticated:
                self._cut(next(iter(self.waiting)), "displaced by a newer one without a token")
            self.waiting[conn] = None
        asyncio.get_running_loop().call_later(
            self.limits.first_request_s, self._expire, conn, conn.fileno()
        )

    def served(self, fileno: int) -> None:
        """The connection on ``fileno`` made a request the service serves (an allowed peer, a
        valid token)."""
        conn = self._by_fd.get(fileno)
        if conn is not None and not conn.served:
            conn.served = True
            self.waiting.pop(conn, None)

    def release(self, conn: _Connection) -> None:
        """``conn`` leaves the counts (when it is cut, or closed if it never was)."""
        if conn.gate is not self:
            return
        conn.gate = None
        self.live -= 1
        left = self.by_client[conn.key] - 1
        if left:
            self.by_client[conn.key] = left
        else:
            del self.by_client[conn.key]
        self._by_fd.pop(conn.fileno(), None)
        self.waiting.pop(conn, None)

    def _expire(self, conn: _Connection, fileno: int) -> None:
        if conn.gate is self and not conn.served and conn.fileno() == fileno:
            self._cut(conn, f"no admitted request in {self.limits.first_request_s:g} s")

    def _cut(self, conn: _Connection, why: str) -> None:
        """End ``conn``: its transport sees the end of the stream and closes it (and so its
        descriptor, and its place here)."""
        self.release(conn)  # it is on its way out: it keeps no one else out meanwhile
        self.note("connections", f"closed a connection of {conn.key}: {why}")
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def note(self, kind: str, line: str) -> None:
        now = time.monotonic()
        if now - self._logged.get(kind, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[kind] = now
            log.warning("sandbox service: %s (such lines at most every %g s)", line, LOG_EVERY_S)


class GuardedListener(socket.socket):
    """A listening socket whose ``accept`` returns only the connections the `Gate` keeps."""

    def __init__(self, family: int, gate: Gate):
        super().__init__(family, socket.SOCK_STREAM)
        self.gate = gate
        self._spare: int | None = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self._kept_this_turn = 0

    def accept(self):
        if self._kept_this_turn >= ACCEPT_BURST:
            raise BlockingIOError  # asyncio stops accepting until the event loop's next turn
        while True:
            try:
                fd, address = self._accept()
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._shed():
                    raise  # asyncio pauses accepting for a second and tries again
                continue
            conn = _Connection(self.family, self.type, self.proto, fileno=fd)
            try:
                refusal = self.gate.refusal(conn, address)
            except OSError:  # the peer is gone already
                conn.close()
                continue
            if refusal is None:
                self.gate.keep(conn)
                if not self._kept_this_turn:
                    asyncio.get_running_loop().call_soon(self._next_turn)
                self._kept_this_turn += 1
                return conn, address
            self.gate.note("refused", f"refused a connection: {refusal[1]}")
            _answer(conn, *refusal)
            conn.close()

    def _next_turn(self) -> None:
        self._kept_this_turn = 0

    def _shed(self) -> bool:
        """Out of descriptors: refuse the waiting connection with the spare's descriptor.
        False when there is no spare (asyncio then pauses accepting for a second)."""
        if self._spare is None:
            return False
        os.close(self._spare)
        try:
            fd, _ = self._accept()  # BlockingIOError: none waits any more (asyncio stops here)
        except BlockingIOError:
            raise
        except OSError:
            return False
        else:
            os.close(fd)
        finally:
            try:
                self._spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._spare = None
        self.gate.note("descriptors", "out of descriptors: new connections are refused")
        return True

    def close(self) -> None:
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
        super().close()


def _answer(conn: socket.socket, status: int, line: str) -> None:
    """Send ``line`` as a complete HTTP response in one write that never waits."""
    body = line.encode() + b"\n"
    head = (f"HTTP/1.1 {status} {'Forbidden' if status == 403 else 'Service Unavailable'}\r\n"
            f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n")  # fmt: skip
    try:
        conn.send(head.encode() + body, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
    except OSError:
        pass  # the peer went, or its buffer is full: it sees the connection closed
