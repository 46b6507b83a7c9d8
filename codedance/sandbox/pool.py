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

import os
from collections.abc import Iterable
from concurrent.futures import Executor

from codedance.sandbox.inputs import ImageInput
from codedance.sandbox.pool_base import PoolBase
from codedance.sandbox.sandbox import Sandbox
from codedance.sandbox.service import URL_ENV, SandboxService


class SandboxPool(PoolBase):
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
        self.service = service or SandboxService()
        self._owns_service = service is None
        super().__init__(max_running, sandbox_defaults)
        self.isolation = self.service.isolation

    def _make(self, images: Iterable[ImageInput], executor: Executor, **options) -> Sandbox:
        return Sandbox(images, service=self.service, executor=executor, **options)

    def _release(self) -> None:
        if self._owns_service:
            self.service.close()
