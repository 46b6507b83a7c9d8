"""The sandbox service's server: one privileged controller per host, used by unprivileged clients.

Built on aiohttp's server: one library serves HTTP/1.1 on a Unix socket and on TCP (with TLS),
streams responses (a client's session is one open response, below), and hands each handler its
connection's socket, from which the kernel's peer credentials are read (``peers``). An ASGI
stack (uvicorn) exposes no socket to the application, and gRPC would need generated code and a
second client library beside httpx. Bodies are msgpack (``wire``): images stay binary.

Sessions. A client opens ``GET /v1/session`` and keeps the response open: its first line names
the session, then the server writes a newline every ``BEAT_S``. Every sandbox belongs to a
session; when the connection goes (the client closed it, died, or its host vanished and a write
fails) the session's sandboxes are closed. A client whose session stream stops knows the service
is gone, and its sandboxes report ``lost``.

Steps. Each ``run`` carries the step's sequence number; a number already received is refused,
so no layer can run a step twice. Who may do what: `SandboxServer` and ``docs/sandbox.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any

from aiohttp import web

from codedance.sandbox.isolation import SandboxUnavailable
from codedance.sandbox.layout import Limits, seconds
from codedance.sandbox.remote import wire
from codedance.sandbox.sandbox import Sandbox, SandboxClosed
from codedance.sandbox.service import SandboxService, ServiceError
from codedance.sandbox.serving.admission import (
    FDS_PER_SANDBOX,
    RESERVE_FDS,
    ConnectionLimits,
    Gate,
    GuardedListener,
    descriptors_left,
)
from codedance.sandbox.serving.peers import LocalPolicy, Tokens, not_allowed, peer_of
from codedance.types import ExecResult, ExecStatus

BEAT_S = 1.0  # between two heartbeats of a session stream
TCP_UNACKED_S = 30.0  # a TCP client's session ends when its beats go unacknowledged this long
# a step's request: its code (at most a few MiB in any rollout) and a few fields; read no further
# (a body is held about twice while it is read: aiohttp's buffer and the unpacked copy)
MAX_RUN_BODY_BYTES = 4 << 20
BACKLOG = 1024  # connections the kernel holds before the service accepts them
# the most blocking sandbox calls (runs, creations, closes) at once; threads start as needed
WORKERS = 4096
SESSION_ENDED = "the client's session ended (its connection closed): the sandbox was closed"


@dataclass(frozen=True)
class Quotas:
    """What one client (a local uid, or a token's name) may hold at once."""

    sandboxes: int = 2048  # live sandboxes
    memory: int | None = None  # the sum of their ``Limits.memory`` (each enforced by its cgroup)
    # a creation request's images, read only when its Content-Length is at most this
    images: int = 64 << 20
    # the bodies of a client's requests in flight together (each is held about twice while read)
    request_bytes: int = 256 << 20
    requests: int | None = None  # a client's requests in flight; None: ``sandboxes`` + 16
    # the largest `Limits` a client may ask, field by field (a client's processes, CPUs and disk
    # are the host's): a request above it is refused, never clamped
    ceiling: Limits = field(default_factory=Limits)


def above_ceiling(limits: Limits, ceiling: Limits) -> str | None:
    """The first field of `limits` above `ceiling`, said in one line; None when none is.

    >>> above_ceiling(Limits(processes=2000), Limits()) is not None
    True
    >>> above_ceiling(Limits(memory=1 << 30), Limits()) is None
    True
    """
    for name in (f.name for f in fields(Limits)):
        asked, most = getattr(limits, name), getattr(ceiling, name)
        if asked > most:
            return (
                f"Limits.{name} = {asked} is above this service's ceiling ({most}): "
                "ask for less, or "
                f"ask its operator to raise it (codedance sandbox serve --ceiling {name}=VALUE)"
            )
    return None


class _Client:
    def __init__(self, name: str):
        self.name = name
        self.sandboxes = 0
        self.memory = 0
        self.requests = 0  # in flight
        self.request_bytes = 0


@dataclass(eq=False)
class _Entry:
    sandbox: Sandbox
    session: _Session
    memory: int
    last_seq: int = 0
    running: bool = False  # a step is in flight (a client runs one step of a sandbox at a time)
    ended: str | None = None  # why the service closed it (the client did not ask)


@dataclass(eq=False)
class _Session:
    id: str
    client: _Client
    entries: dict[str, _Entry] = field(default_factory=dict)
    open: bool = True


class SandboxServer:
    """Sandboxes of one `SandboxService` for authenticated clients.

    A client may create sandboxes (within its `Quotas`), run code in them and close them; it
    can neither see nor touch another client's sandboxes (ids are unguessable, and each request
    is checked against the sandbox's owner), nor the service itself. Local clients are admitted
    by ``policy`` (peer credentials); TCP clients by ``tokens``.
    """

    def __init__(
        self,
        service: SandboxService,
        *,
        policy: LocalPolicy,
        tokens: Tokens | None = None,
        quotas: Quotas = Quotas(),
        connections: ConnectionLimits | None = None,
    ):
        self.service = service
        self.policy = policy
        self.tokens = tokens
        self.quotas = quotas
        self.gate = Gate(policy, connections or ConnectionLimits())
        self.instance = secrets.token_hex(8)  # a restarted service is another instance
        self._clients: dict[str, _Client] = {}
        self._sessions: dict[str, _Session] = {}
        self._entries: dict[str, _Entry] = {}
        self._executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="codedance-serve")
        self._stopping = asyncio.Event()  # session streams end (else shutting down waits for them)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=max(self.quotas.images, MAX_RUN_BODY_BYTES))
        app.add_routes([
            web.get("/v1/health", self._health),
            web.get("/v1/session", self._session),
            web.post("/v1/sessions/{session}/sandboxes", self._create),
            web.post("/v1/sandboxes/{sandbox}/run", self._run),
            web.delete("/v1/sandboxes/{sandbox}", self._close),
        ])  # fmt: skip
        app.on_shutdown.append(self._shutdown)
        return app

    # ----------------------------------------------------------------- who
    def _client(self, request: web.Request) -> _Client:
        """The caller's client record; 401/403 with one line saying what to do otherwise."""
        sock = request.transport.get_extra_info("socket") if request.transport else None
        if sock is None:
            raise web.HTTPServiceUnavailable(text="the connection closed")
        if sock.family == socket.AF_UNIX:
            peer = peer_of(sock)
            if not self.policy.admits(peer):
                raise web.HTTPForbidden(text=not_allowed(peer.uid))
            name = f"uid:{peer.uid}"
        else:
            token_name = (
                self.tokens.name_of(request.headers.get("Authorization")) if self.tokens else None
            )
            if token_name is None:
                raise web.HTTPUnauthorized(
                    text="a valid bearer token is required over TCP: set "
                    f"{wire.TOKEN_ENV} to a token from the service's --token-file"
                )
            name = f"token:{token_name}"
        self.gate.served(sock.fileno())
        if name not in self._clients:
            self._clients[name] = _Client(name)
        return self._clients[name]

    def _entry(self, request: web.Request, client: _Client) -> _Entry:
        entry = self._entries.get(request.match_info["sandbox"])
        if entry is None or entry.session.client is not client:
            raise web.HTTPNotFound(
                text="no such sandbox on this service (closed, or the service restarted)"
            )
        return entry

    # ----------------------------------------------------------------- handlers
    async def _health(self, request: web.Request) -> web.Response:
        """This instance, and what the caller holds on it."""
        client = self._client(request)
        return web.json_response(
            {
                "instance": self.instance,
                "client": client.name,
                "sandboxes": client.sandboxes,
                "memory": client.memory,
            }
        )

    async def _session(self, request: web.Request) -> web.StreamResponse:
        client = self._client(request)
        sock = request.transport.get_extra_info("socket")
        if sock.family != socket.AF_UNIX:
            # a TCP client whose host vanished: the kernel fails the connection once the beats go
            # unacknowledged for TCP_UNACKED_S (not after ~15 min of retransmissions), and the
            # session's sandboxes are closed then
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(TCP_UNACKED_S * 1000))
        session = _Session(secrets.token_urlsafe(16), client)
        self._sessions[session.id] = session
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        try:
            await response.prepare(request)
            header = {"session": session.id, "instance": self.instance, "client": client.name,
                      "isolation": wire.isolation_fields(self.service.isolation)}  # fmt: skip
            await response.write(json.dumps(header).encode() + b"\n")
            while request.transport is not None and not request.transport.is_closing():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), BEAT_S)
                if self._stopping.is_set():  # the response ends: the client sees the service go
                    break
                await response.write(b"\n")
        except ConnectionError:  # the client went: a write to its closed connection failed
            pass
        finally:  # also when cancelled (the service stopping): the session's sandboxes close
            await asyncio.shield(self._end_session(session, SESSION_ENDED))
        return response

    async def _create(self, request: web.Request) -> web.Response:
        client = self._client(request)
        session = self._sessions.get(request.match_info["session"])
        if session is None or session.client is not client or not session.open:
            raise web.HTTPNotFound(
                text="no such session on this service (it ended, or the service restarted)"
            )
        _bounded(request, self.quotas.images, "a sandbox's images", "--max-images-mib")
        with self._in_flight(client, request.content_length):
            return await self._create_read(request, client, session)

    async def _create_read(
        self, request: web.Request, client: _Client, session: _Session
    ) -> web.Response:
        try:
            body = wire.unpack(await request.read())
            images = body["images"]
            if not isinstance(images, list) or not all(isinstance(i, bytes) for i in images):
                raise ValueError(
                    "images must be a list of image bytes (the client reads files itself)"
                )
            limits = wire.limits_from(body["limits"])
            if (why := above_ceiling(limits, self.quotas.ceiling)) is not None:
                raise ValueError(why)
            options = {
                "timeout_s": seconds("timeout_s", body["timeout_s"]),
                "limits": limits,
                "require": body["require"],
                "start_timeout_s": body["start_timeout_s"],
            }
        except (ValueError, TypeError, KeyError) as exc:
            raise web.HTTPBadRequest(text=f"bad sandbox request: {exc}") from None
        if descriptors_left() < RESERVE_FDS + FDS_PER_SANDBOX:
            raise web.HTTPServiceUnavailable(
                text="the sandbox service is out of descriptors for another sandbox: close some "
                "first, or ask its operator to raise its RLIMIT_NOFILE (LimitNOFILE=)"
            )
        self._reserve(client, limits.memory)
        loop = asyncio.get_running_loop()
        try:
            sandbox = await loop.run_in_executor(
                self._executor, lambda: Sandbox(images, service=self.service, **options)
            )
        except BaseException as exc:
            client.sandboxes -= 1
            client.memory -= limits.memory
            if isinstance(exc, SandboxUnavailable):
                raise web.HTTPConflict(text=str(exc)) from None
            if isinstance(exc, (ValueError, TypeError)):
                raise web.HTTPBadRequest(text=str(exc)) from None
            if isinstance(exc, ServiceError):
                raise web.HTTPServiceUnavailable(text=str(exc)) from None
            raise
        entry = _Entry(sandbox, session, limits.memory)
        sandbox_id = secrets.token_urlsafe(16)
        self._entries[sandbox_id] = entry
        session.entries[sandbox_id] = entry
        if not session.open:  # the client went while its sandbox started
            await self._release(sandbox_id, SESSION_ENDED)
            raise web.HTTPGone(text=SESSION_ENDED)
        return _packed({"sandbox": sandbox_id, "workdir": sandbox.workdir,
                        "isolation": wire.isolation_fields(sandbox.isolation)})  # fmt: skip

    def _reserve(self, client: _Client, memory: int) -> None:
        quotas = self.quotas
        if client.sandboxes + 1 > quotas.sandboxes:
            raise web.HTTPTooManyRequests(
                text=f"quota: {client.name} already has {client.sandboxes} live sandboxes, "
                f"the most this service allows a client (--client-sandboxes); "
                "close some first"
            )
        if quotas.memory is not None and client.memory + memory > quotas.memory:
            raise web.HTTPTooManyRequests(
                text=f"quota: {client.name}'s live sandboxes may use {client.memory >> 20} MiB "
                f"and this one {memory >> 20} MiB more, over the {quotas.memory >> 20} MiB "
                "this service allows a client (--client-memory-mib); close some or lower "
                "Limits.memory"
            )
        client.sandboxes += 1
        client.memory += memory

    @contextlib.contextmanager
    def _in_flight(self, client: _Client, size: int):
        """Count a request of ``client`` while it is read and served: 429 over its bounds."""
        quotas = self.quotas
        most = quotas.requests if quotas.requests is not None else quotas.sandboxes + 16
        if client.requests >= most:
            raise web.HTTPTooManyRequests(
                text=f"quota: {client.name} has {client.requests} requests in flight, the most "
                "this service allows a client; wait for some to end"
            )
        if client.request_bytes + size > quotas.request_bytes:
            raise web.HTTPTooManyRequests(
                text=f"quota: {client.name}'s requests in flight hold {client.request_bytes >> 20} "
                f"MiB and this one {size >> 20} MiB more, over the "
                f"{quotas.request_bytes >> 20} MiB "
                "this service allows a client (--client-request-mib); wait for some to end"
            )
        client.requests += 1
        client.request_bytes += size
        try:
            yield
        finally:
            client.requests -= 1
            client.request_bytes -= size

    async def _run(self, request: web.Request) -> web.Response:
        client = self._client(request)
        entry = self._entry(request, client)
        _bounded(request, MAX_RUN_BODY_BYTES, "a step's request", None)
        if entry.running:
            raise web.HTTPConflict(
                text="a step of this sandbox is running: send the next when it has ended"
            )
        with self._in_flight(client, request.content_length):
            entry.running = True
            try:
                return await self._run_read(request, entry)
            finally:
                entry.running = False

    async def _run_read(self, request: web.Request, entry: _Entry) -> web.Response:
        try:
            body = wire.unpack(await request.read())
            code, timeout_s, seq = body["code"], body["timeout_s"], body["seq"]
            if not isinstance(code, str) or type(seq) is not int:
                raise TypeError("code must be a str and seq an int")
            if timeout_s is not None:
                timeout_s = seconds("timeout_s", timeout_s)
        except (ValueError, TypeError, KeyError) as exc:
            raise web.HTTPBadRequest(text=f"bad run request: {exc}") from None
        if seq <= entry.last_seq:  # a replayed request: this step was received once already
            raise web.HTTPConflict(
                text=f"step {seq} of this sandbox was already received; it is never run twice"
            )
        entry.last_seq = seq
        # no queue here: a step waiting for a turn would spend its client's deadline (the client's
        # pool bounds its running steps; each trajectory's cgroup bounds its CPU)
        try:
            result = await asyncio.get_running_loop().run_in_executor(
                self._executor, entry.sandbox.run, code, timeout_s
            )
        except SandboxClosed:
            if entry.ended is None:
                raise web.HTTPGone(
                    text="this sandbox is closed; create a new one to run more code"
                ) from None
            result = None
        if entry.ended is not None:
            result = ExecResult(status=ExecStatus.LOST, notes=(entry.ended,))
        return _packed(wire.result_fields(result))

    async def _close(self, request: web.Request) -> web.Response:
        client = self._client(request)
        self._entry(request, client)
        await self._release(request.match_info["sandbox"], None)
        return web.Response(status=204)

    # ----------------------------------------------------------------- ending
    async def _release(self, sandbox_id: str, why: str | None) -> None:
        entry = self._entries.pop(sandbox_id, None)
        if entry is None:
            return
        entry.ended = why
        entry.session.entries.pop(sandbox_id, None)
        entry.sandbox.begin_closing()  # a run in flight is woken now, not after the close below
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, entry.sandbox.close)
        finally:
            entry.session.client.sandboxes -= 1
            entry.session.client.memory -= entry.memory

    async def _end_session(self, session: _Session, why: str) -> None:
        session.open = False
        self._sessions.pop(session.id, None)
        await asyncio.gather(
            *(self._release(sandbox_id, why) for sandbox_id in list(session.entries))
        )

    async def _shutdown(self, _app: web.Application) -> None:
        self._stopping.set()
        await asyncio.gather(
            *(
                self._end_session(s, "the sandbox service stopped")
                for s in list(self._sessions.values())
            )
        )
        self._executor.shutdown(wait=False, cancel_futures=True)


def _bounded(request: web.Request, most: int, what: str, option: str | None) -> None:
    """413, before the body is read, unless its length is given and at most ``most``."""
    if request.content_length is None or request.content_length > most:
        raise web.HTTPRequestEntityTooLarge(
            max_size=most,
            actual_size=request.content_length or 0,
            text=f"{what} must give its length and hold at most {most >> 20} MiB"
            + (f" (this service's {option})" if option else ""),
        )


def _packed(value: Any) -> web.Response:
    return web.Response(body=wire.pack(value), content_type=wire.CONTENT_TYPE)


@dataclass(frozen=True)
class Listen:
    """Where the service listens: a Unix socket, and optionally TCP (with TLS when given)."""

    socket_path: str
    socket_mode: int = 0o666  # who may connect(); who may *use* it is `LocalPolicy`
    socket_group: int | None = None
    tcp_host: str | None = None
    tcp_port: int = 0
    tls_cert: str | None = None
    tls_key: str | None = None


def claim_socket_path(path: str) -> None:
    """Remove a socket left by a dead service; refuse when a live one answers on it."""
    if not os.path.exists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nobody listens: what a killed service left
    else:
        raise ServiceError(
            f"a sandbox service already listens on {path}; stop it first or pass another --socket"
        )
    finally:
        probe.close()


async def serve(
    server: SandboxServer, listen: Listen, stop: asyncio.Event, on_ready=lambda urls: None
) -> None:
    """Serve until ``stop`` is set; then close every session's sandboxes."""
    runner = web.AppRunner(server.app(), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        claim_socket_path(listen.socket_path)
        unix = GuardedListener(socket.AF_UNIX, server.gate)
        old_umask = os.umask(0o177)  # the socket is born private, then opened as asked
        try:
            unix.bind(listen.socket_path)
        finally:
            os.umask(old_umask)
        await web.SockSite(runner, unix, backlog=BACKLOG).start()
        if listen.socket_group is not None:
            os.chown(listen.socket_path, -1, listen.socket_group)
        os.chmod(listen.socket_path, listen.socket_mode)
        urls = [f"unix://{listen.socket_path}"]
        if listen.tcp_host is not None:
            ssl_context = None
            if listen.tls_cert:
                import ssl

                ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                ssl_context.load_cert_chain(listen.tls_cert, listen.tls_key)
            family, _, _, _, address = socket.getaddrinfo(
                listen.tcp_host, listen.tcp_port, type=socket.SOCK_STREAM
            )[0]
            tcp = GuardedListener(family, server.gate)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind(address)
            await web.SockSite(runner, tcp, ssl_context=ssl_context, backlog=BACKLOG).start()
            port = next(
                a[1] for a in runner.addresses if isinstance(a, tuple)
            )  # the one chosen for 0
            urls.append(f"{'https' if ssl_context else 'http'}://{listen.tcp_host}:{port}")
        on_ready(urls)
        await stop.wait()
    finally:
        await runner.cleanup()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(listen.socket_path)
