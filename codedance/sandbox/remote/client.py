"""Clients of a sandbox service: `RemoteSandbox` and `RemotePool`, the API of `Sandbox` and
`SandboxPool` over HTTP (httpcore, httpx's transport) to ``codedance sandbox serve``.

    pool = SandboxPool(url="unix:///run/codedance/sandbox.sock")   # or CODEDANCE_SANDBOX_URL
    sb = pool.sandbox(images=[png])
    sb.run("print(input_image.size)")

URLs: ``unix:///path/to/socket`` (a local service; the kernel tells it who we are) or
``http(s)://host:port`` (a remote one; the token comes from ``token=`` or
``CODEDANCE_SANDBOX_TOKEN``; ``CODEDANCE_SANDBOX_CA`` names the CA bundle of a privately signed
https service). Every call has a deadline: a step's is its timeout plus
``Limits.recovery_s`` plus `SLACK_S`. When the service goes away (killed, restarted, unreachable
past a deadline) the step in flight and every later step of its sandboxes return ``lost``, and
nothing is sent again: a step is never run twice. The next sandbox created opens a new session,
so a restarted service is picked up without restarting the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import threading
from collections.abc import Iterable
from concurrent.futures import Executor
from typing import Self
from urllib.parse import urlsplit

import httpcore

from codedance.errors import SandboxClosed
from codedance.sandbox.inputs import ImageInput, _as_bytes
from codedance.sandbox.isolation import Isolation, SandboxUnavailable, normalize_requirement
from codedance.sandbox.layout import Limits, seconds
from codedance.sandbox.pool_base import PoolBase
from codedance.sandbox.remote import wire
from codedance.sandbox.service import ServiceError
from codedance.types import ExecResult, ExecStatus

CONNECT_S = 10.0  # to reach the service
# beyond a call's own bound (a step's timeout plus recovery) before the service counts as gone
SLACK_S = 10.0
SESSION_SILENCE_S = (
    10.0  # the session stream beats every second: this long without a beat, the service is gone
)
CLOSE_S = (
    30.0  # a close waits this long for the service (its own close waits up to 15 s for a step)
)


# every way a request can fail for want of the service (httpcore's errors have no common base)
TRANSPORT_ERRORS = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    OSError,
)


class QuotaExceeded(ServiceError):
    """The service refused a new sandbox: this client holds its quota (live sandboxes or memory)."""


class _Session:
    """One open session stream: the service's sandboxes of this session live while it is open."""

    def __init__(self, connection: Connection):
        self.url = connection.url
        self.ended = threading.Event()
        self.why = ""
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._response: httpcore.Response | None = None
        self._thread = threading.Thread(
            target=self._hold, args=(connection,), name="codedance-session", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(CONNECT_S + SESSION_SILENCE_S) and self._error is None:
            self._error = ServiceError(
                f"the sandbox service at {self.url} did not open a session within "
                f"{CONNECT_S + SESSION_SILENCE_S:.0f} s"
            )
        if self._error is not None:
            self.end()
            raise self._error

    def _hold(self, connection: Connection) -> None:
        try:
            with connection.stream("GET", "/v1/session", timeout_s=SESSION_SILENCE_S) as response:
                self._response = response
                if response.status != 200:
                    self._error = _error_of(response.status, response.read(), self.url)
                    return
                buffer = b""
                for chunk in response.iter_stream():
                    if not self._ready.is_set():
                        buffer += chunk
                        if b"\n" in buffer:
                            header = json.loads(buffer.split(b"\n", 1)[0])
                            self.id, self.instance = header["session"], header["instance"]
                            self.isolation = wire.isolation_from(header["isolation"])
                            self._ready.set()
                    if self.ended.is_set():
                        return
            self.why = (
                f"the sandbox service at {self.url} closed the session (it stopped or restarted)"
            )
        except Exception as exc:  # noqa: BLE001 - every way the stream can end means the service is gone
            if not self._ready.is_set() and self._error is None:
                self._error = ServiceError(
                    f"cannot reach the sandbox service at {self.url}: {exc or type(exc).__name__}; "
                    "is `codedance sandbox serve` running there?"
                )
            self.why = f"the sandbox service at {self.url} went away ({type(exc).__name__}: {exc})"
        finally:
            if not self.why:
                self.why = f"the session with the sandbox service at {self.url} was closed"
            self.ended.set()
            self._ready.set()

    def end(self) -> None:
        """Close the stream: the service closes every sandbox of this session."""
        self.ended.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(
                Exception
            ):  # the reader thread's next read fails; the connection closes
                response.close()


class Connection:
    """One client's link to one service: an HTTP connection pool and, while sandboxes live, a
    session. httpcore (httpx's own transport) directly: a step's request costs half the CPU of
    httpx's client, which adds URL merging, cookies, redirects and auth that nothing here uses."""

    def __init__(self, url: str, token: str | None = None):
        self.url = url
        parts = urlsplit(url)
        token = token if token is not None else os.environ.get(wire.TOKEN_ENV)
        self._headers = [(b"Authorization", f"Bearer {token}".encode())] if token else []
        if parts.scheme == "unix" and parts.path:
            self._pool = httpcore.ConnectionPool(
                uds=parts.path, max_connections=None, max_keepalive_connections=64
            )
            self._base = "http://codedance-sandbox"
        elif parts.scheme in ("http", "https") and parts.hostname:
            ca = os.environ.get(wire.CA_ENV)
            context = (
                ssl.create_default_context(cafile=ca) if ca and parts.scheme == "https" else None
            )
            self._pool = httpcore.ConnectionPool(ssl_context=context, max_connections=None,
                                                 max_keepalive_connections=64)  # fmt: skip
            self._base = f"{parts.scheme}://{parts.netloc}"
        else:
            raise ValueError(
                f"sandbox service url {url!r}: expected unix:///path/to/socket or "
                "http(s)://host:port"
            )
        self._lock = threading.Lock()
        self._session: _Session | None = None

    def session(self) -> _Session:
        """The open session, or a new one when the last ended (the service restarted)."""
        with self._lock:
            if self._session is None or self._session.ended.is_set():
                self._session = _Session(self)
            return self._session

    def _options(self, body: object, timeout_s: float) -> dict:
        timeouts = {"connect": CONNECT_S, "read": timeout_s, "write": timeout_s, "pool": timeout_s}
        headers = (
            self._headers
            if body is None
            else [*self._headers, (b"Content-Type", wire.CONTENT_TYPE.encode())]
        )
        return {"headers": headers, "content": None if body is None else wire.pack(body),
                "extensions": {"timeout": timeouts}}  # fmt: skip

    def call(
        self, method: str, path: str, body: object = None, *, timeout_s: float
    ) -> tuple[int, bytes]:
        """One request, never retried: (status, body). `TRANSPORT_ERRORS` (the service gone)
        propagate."""
        response = self._pool.request(method, self._base + path, **self._options(body, timeout_s))
        return response.status, response.content

    def stream(self, method: str, path: str, *, timeout_s: float):
        return self._pool.stream(method, self._base + path, **self._options(None, timeout_s))

    def health(self) -> dict:
        """The service's instance, and what this client holds on it."""
        status, content = self.call("GET", "/v1/health", timeout_s=CONNECT_S)
        if status != 200:
            raise _error_of(status, content, self.url)
        return json.loads(content)

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.end()
        self._pool.close()


_shared: dict[tuple[int, str, str | None], Connection] = {}
_shared_lock = threading.Lock()


def shared_connection(url: str, token: str | None = None) -> Connection:
    """This process's connection to ``url`` (a forked child gets its own)."""
    key = (os.getpid(), url, token)
    with _shared_lock:
        if key not in _shared:
            _shared[key] = Connection(url, token)
        return _shared[key]


def _error_of(status: int, content: bytes, url: str) -> Exception:
    """The service's one-line refusal as the exception the local API raises for it."""
    text = content.decode("utf-8", "replace").strip() or f"HTTP {status}"
    if status == 429:
        return QuotaExceeded(text)
    if status == 400:
        return ValueError(text)
    if status == 409:
        return SandboxUnavailable(text)
    return ServiceError(f"the sandbox service at {url} refused: {text}")


class RemoteSandbox:
    """A `Sandbox` that lives in a sandbox service (see the module docstring)."""

    def __init__(
        self,
        images: Iterable[ImageInput] = (),
        *,
        timeout_s: float = 15.0,
        limits: Limits | None = None,
        require: str | tuple[str, ...] | None = None,
        start_timeout_s: float = 30.0,
        url: str | None = None,
        token: str | None = None,
        executor: Executor | None = None,
        connection: Connection | None = None,
    ):
        self.timeout_s = seconds("timeout_s", timeout_s)
        seconds("start_timeout_s", start_timeout_s)
        self.limits = limits or Limits()
        normalize_requirement(require)
        data = []
        for index, image in enumerate(
            images
        ):  # read here: the service never opens a client's paths
            data.append(_as_bytes(image, index))
            if not data[-1]:
                raise ValueError(f"input image {index} is empty")
        if connection is None and not url:
            raise ValueError(f"no sandbox service url: pass url= or set {wire.URL_ENV}")
        self._connection = connection or shared_connection(url, token)
        self._executor = executor
        self._lock = threading.Lock()
        self._closed = False
        self._released = False
        self._lost: str | None = None
        self._seq = 0
        self._session = self._connection.session()
        body = {
            "images": data,
            "timeout_s": self.timeout_s,
            "limits": wire.limits_fields(self.limits),
            "require": list(normalize_requirement(require)),
            "start_timeout_s": start_timeout_s,
        }
        try:
            status, content = self._connection.call(
                "POST",
                f"/v1/sessions/{self._session.id}/sandboxes",
                body,
                timeout_s=start_timeout_s + SLACK_S,
            )
        except TRANSPORT_ERRORS as exc:
            raise ServiceError(
                f"the sandbox service at {self._connection.url} did not create the sandbox: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if status != 200:
            raise _error_of(status, content, self._connection.url)
        reply = wire.unpack(content)
        self._id = reply["sandbox"]
        self.workdir: str = reply["workdir"]  # on the service's host (the path its snippets see)
        self.isolation: Isolation = wire.isolation_from(reply["isolation"])

    def run(self, code: str, timeout_s: float | None = None) -> ExecResult:
        """`Sandbox.run` in the service; ``lost`` (never an exception, never a second try) when
        the service goes away before answering."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        timeout = self.timeout_s if timeout_s is None else seconds("timeout_s", timeout_s)
        while not self._lock.acquire(timeout=0.05):
            if self._closed:
                raise SandboxClosed("this sandbox is closed; create a new Sandbox to run more code")
        try:
            if self._closed:
                raise SandboxClosed("this sandbox is closed; create a new Sandbox to run more code")
            if self._lost is None and self._session.ended.is_set():
                self._lost = (
                    f"{self._session.why}: the sandbox's state is lost; create a new sandbox"
                )
            if self._lost is not None:
                return _lost_result(self._lost)
            self._seq += 1
            body = {
                "code": code.encode("utf-8", "replace").decode("utf-8"),
                "timeout_s": timeout,
                "seq": self._seq,
            }
            try:
                status, content = self._connection.call(
                    "POST",
                    f"/v1/sandboxes/{self._id}/run",
                    body,
                    timeout_s=timeout + self.limits.recovery_s + SLACK_S,
                )
            except TRANSPORT_ERRORS as exc:
                return self._lose(
                    f"the sandbox service at {self._connection.url} did not answer this step "
                    f"({type(exc).__name__}: {exc})"
                )
            if status == 404:
                return self._lose(
                    f"the sandbox service at {self._connection.url} no longer has this sandbox "
                    "(it was restarted)"
                )
            if status == 410:
                self._closed = True
                raise SandboxClosed(content.decode("utf-8", "replace"))
            if status != 200:
                raise _error_of(status, content, self._connection.url)
            result = wire.result_from(wire.unpack(content))
            if result.status is ExecStatus.LOST:
                self._lost = result.notes[0] if result.notes else "lost"
            return result
        finally:
            self._lock.release()

    def _lose(self, why: str) -> ExecResult:
        self._lost = f"{why}: the sandbox's state is lost; create a new sandbox"
        threading.Thread(target=self._forget, name="codedance-forget", daemon=True).start()
        return _lost_result(self._lost)

    def _forget(self) -> None:
        """Ask the service to close this sandbox, if it is still there (a step it may still run
        is then stopped, and the sandbox's quota freed); nothing if it is gone."""
        with contextlib.suppress(*TRANSPORT_ERRORS):
            self._connection.call("DELETE", f"/v1/sandboxes/{self._id}", timeout_s=CLOSE_S)

    async def arun(self, code: str, timeout_s: float | None = None) -> ExecResult:
        executor = None if self._closed else self._executor
        return await asyncio.get_running_loop().run_in_executor(executor, self.run, code, timeout_s)

    @property
    def alive(self) -> bool:
        return not self._closed and self._lost is None and not self._session.ended.is_set()

    def begin_closing(self) -> None:
        """Refuse new runs; `close` asks the service to close it (a run in flight returns
        ``crashed``)."""
        self._closed = True

    def close(self, wait_s: float = CLOSE_S) -> None:
        """Close the sandbox in the service. Idempotent; a service gone has closed it already."""
        if self._released or not hasattr(self, "_id"):  # (no id: its creation failed)
            return
        self._released = True
        self._closed = True
        if self._session.ended.is_set():
            return
        with contextlib.suppress(*TRANSPORT_ERRORS):
            self._connection.call("DELETE", f"/v1/sandboxes/{self._id}", timeout_s=wait_s)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)


def _lost_result(why: str) -> ExecResult:
    return ExecResult(status=ExecStatus.LOST, notes=(why,), rolled_back=False)


class RemotePool(PoolBase):
    """A `SandboxPool` whose sandboxes live in a sandbox service; its own session, so closing
    the pool (or the process ending) closes all of them there."""

    def __init__(
        self,
        *,
        url: str,
        token: str | None = None,
        max_running: int | None = None,
        **sandbox_defaults,
    ):
        self.url = url
        self._connection = Connection(url, token)
        try:
            # an unreachable service: one line now
            self.isolation = self._connection.session().isolation
        except BaseException:
            self._connection.close()
            raise
        super().__init__(max_running, sandbox_defaults)

    def _make(self, images: Iterable[ImageInput], executor: Executor, **options) -> RemoteSandbox:
        return RemoteSandbox(images, connection=self._connection, executor=executor, **options)

    def _release(self) -> None:
        self._connection.close()
