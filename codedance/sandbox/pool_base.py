"""What every pool of sandboxes does, wherever its sandboxes live (this process's service, or
a sandbox service reached over a socket): the bound on running steps, the asyncio methods,
the count of live sandboxes and closing them all. `SandboxPool` and `RemotePool` differ only in
how one sandbox is made and what the pool holds besides its sandboxes.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Iterable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Self

from codedance.sandbox.inputs import ImageInput


class PoolBase:
    """Sandboxes made by `_make`, their steps run by at most ``max_running`` threads."""

    def __init__(self, max_running: int | None, sandbox_defaults: dict[str, Any]):
        self.max_running = max_running or os.cpu_count() or 1
        self._executor = ThreadPoolExecutor(self.max_running, thread_name_prefix="codedance-step")
        self._defaults = sandbox_defaults
        self._live: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()

    def _make(self, images: Iterable[ImageInput], executor: Executor, **options) -> Any:
        """One sandbox of this pool, its async steps run by ``executor``."""
        raise NotImplementedError

    def _release(self) -> None:
        """Close what the pool holds besides its sandboxes (called once they are closed)."""

    def sandbox(self, images: Iterable[ImageInput] = (), **options):
        sandbox = self._make(images, self._executor, **{**self._defaults, **options})
        with self._lock:
            self._live.add(sandbox)
        return sandbox

    async def asandbox(self, images: Iterable[ImageInput] = (), **options):
        """`sandbox` without blocking the event loop."""
        images = list(images)
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, lambda: self.sandbox(images, **options)
        )

    @property
    def live(self) -> int:
        """How many sandboxes of this pool are open."""
        with self._lock:
            return sum(1 for sandbox in self._live if sandbox.alive)

    def close(self) -> None:
        with self._lock:
            sandboxes = list(self._live)
        for sandbox in sandboxes:  # every run woken first: closing one does not wait on another's
            sandbox.begin_closing()
        for sandbox in sandboxes:
            sandbox.close()
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._release()

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_exc) -> None:
        await self.aclose()
