"""`ClientShards`: several small httpx clients in place of one big one, for many requests at once.

Why: httpcore's connection pool (1.0.x) scans every connection of the pool for every queued
request and, for each idle connection, every connection again, each time a request starts or
ends. With 256 requests in flight on one client that scan was three quarters of the loop's
CPU time (``benchmarks/rollout_bench.py``). Splitting the same connection budget into
shards of at most ``per_shard`` connections keeps each scan small.

A request leases the least busy shard (fewest requests in flight); a new shard is created only
when every existing one has ``per_shard`` requests in flight, so one request at a time uses one
client and one connection, as before. Total connections never exceed ``max_connections``
(the last shard gets the remainder). All shards share one SSL context (building one per client
costs ~25 ms). Safe from threads (a lock guards the counts) and from one asyncio loop; an
async caller must make one `ClientShards` per event loop, as with a plain ``httpx.AsyncClient``.
Not handled: HTTP/2 (each shard would multiplex on its own).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

import httpx

C = TypeVar("C")
ClientFactory = Callable[[httpx.Limits, object], C]

_SSL: object | None = None
_SSL_LOCK = threading.Lock()


def shared_ssl_context() -> object:
    """One default SSL context for every shard of every policy (built on first use)."""
    global _SSL
    with _SSL_LOCK:
        if _SSL is None:
            _SSL = httpx.create_ssl_context()
        return _SSL


class ClientShards(Generic[C]):
    """Clients made by ``factory(limits, verify)``, leased least-busy first (module docstring)."""

    def __init__(
        self, factory: ClientFactory[C], max_connections: int, per_shard: int = 16
    ) -> None:
        if max_connections < 1 or per_shard < 1:
            raise ValueError("max_connections and per_shard must be at least 1")
        self._factory = factory
        self._max = max_connections
        self._per_shard = per_shard
        self._clients: list[C] = []
        self._sizes: list[int] = []
        self._busy: list[int] = []
        self._lock = threading.Lock()

    @property
    def clients(self) -> tuple[C, ...]:
        return tuple(self._clients)

    def _pick(self) -> int:
        with self._lock:
            best = min(range(len(self._busy)), key=self._busy.__getitem__, default=-1)
            full = best < 0 or self._busy[best] >= self._sizes[best]
            room = self._max - sum(self._sizes)
            if full and room > 0:
                size = min(self._per_shard, room)
                limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
                self._clients.append(self._factory(limits, shared_ssl_context()))
                self._sizes.append(size)
                self._busy.append(0)
                best = len(self._clients) - 1
            self._busy[best] += 1
            return best

    @contextmanager
    def lease(self) -> Iterator[C]:
        """A client for one request; hold it until the response has been read."""
        index = self._pick()
        client = self._clients[index]
        try:
            yield client
        finally:
            with self._lock:
                if index < len(self._clients) and self._clients[index] is client:
                    self._busy[index] -= 1

    def take_all(self) -> list[C]:
        """Forget every client and return them (for the caller to close)."""
        with self._lock:
            clients, self._clients, self._sizes, self._busy = self._clients, [], [], []
        return clients
