"""`SandboxPool`: many live trajectories on one service, with a bound on running steps.

For the rollout loop and RL (2048 live trajectories per step in the paper's setting): every
sandbox of a pool shares one jailed zygote, and its steps run in a thread pool of
``max_running`` workers (default: the number of CPUs), so at most that many snippets execute at
once while any number of trajectories stay alive, idle, at a few MB each. The asyncio methods
never block the event loop.

    pool = SandboxPool(max_running=8)
    sb = await pool.asandbox(images=[png_bytes])
    result = await sb.arun("print(input_image.size)")
    await pool.aclose()
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Self

from codedance.sandbox.inputs import ImageInput
from codedance.sandbox.sandbox import Sandbox
from codedance.sandbox.service import URL_ENV, SandboxService


class SandboxPool:
    """Creates sandboxes on a private service; closing the pool closes all of them."""

    def __new__(
        cls,
        *,
        service: SandboxService | None = None,
        url: str | None = None,
        token: str | None = None,
        **options,
    ):
        """A `RemotePool` on the sandbox service at ``url`` (default: ``CODEDANCE_SANDBOX_URL``
        when no ``service`` is given); otherwise a pool on a service of this process."""
        url = url or (os.environ.get(URL_ENV) if service is None else None)
        if url:
            from codedance.sandbox.remote.client import RemotePool

            return RemotePool(url=url, token=token, **options)
        return super().__new__(cls)

    def __init__(
        self,
        *,
        max_running: int | None = None,
        service: SandboxService | None = None,
        url: str | None = None,
        token: str | None = None,
        **sandbox_defaults,
    ):
        self.max_running = max_running or os.cpu_count() or 1
        self.service = service or SandboxService()
        self._owns_service = service is None
        self._executor = ThreadPoolExecutor(self.max_running, thread_name_prefix="codedance-step")
        self._defaults = sandbox_defaults
        self._live: weakref.WeakSet[Sandbox] = weakref.WeakSet()
        self._lock = threading.Lock()
        self.isolation = self.service.isolation

    def sandbox(self, images: Iterable[ImageInput] = (), **options) -> Sandbox:
        sandbox = Sandbox(images, service=self.service, executor=self._executor,
                          **{**self._defaults, **options})  # fmt: skip
        with self._lock:
            self._live.add(sandbox)
        return sandbox

    async def asandbox(self, images: Iterable[ImageInput] = (), **options) -> Sandbox:
        """`sandbox` without blocking the event loop."""
        loop = asyncio.get_running_loop()
        images = list(images)
        return await loop.run_in_executor(self._executor, lambda: self.sandbox(images, **options))

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
        if self._owns_service:
            self.service.close()

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
