"""One model server as the pipeline uses it: bounded in-flight requests, retries, a circuit
breaker and request/token accounting.

`Endpoint.ask(messages, temperature=...)` sends one chat completion through `OpenAIChatPolicy`
(which retries 408/429/5xx, dropped connections and timeouts with exponential backoff and
``Retry-After``). At most ``max_in_flight`` requests are outstanding at once (an asyncio
semaphore). After ``breaker_failures`` consecutive requests that failed even after their retries
for a reason of the server's (`codedance.runs.batch.server_fault`: unreachable, 429, 5xx, or a
key / model name it refuses), the breaker opens and every later call raises `EndpointDown` at
once: the pipeline stops that stage, keeps what it finished, and a rerun resumes. A reply that is
not a chat completion (`MalformedResponseError`) or another 4xx is the item's problem, not the
server's: it is raised to the caller and does not trip the breaker.

Counted per endpoint: requests, failures, prompt and completion tokens (from ``usage``), seconds
spent waiting for replies. Not handled: rate limits in tokens per minute (bound ``max_in_flight``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

from codedance.errors import BackendError
from codedance.policy.base import Completion, PolicyConnectionError, PolicyHTTPError
from codedance.policy.openai_chat import OpenAIChatPolicy
from codedance.policy.server_config import ServerConfig
from codedance.prompts import bound_text
from codedance.runs.batch import server_fault
from codedance.types import Message


class EndpointDown(BackendError):
    """The endpoint's circuit breaker is open: too many consecutive failed requests."""


@dataclass
class EndpointStats:
    requests: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "requests": self.requests,
            "failures": self.failures,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "seconds": round(self.seconds, 3),
        }


class Endpoint:
    """The server for one role (``weak``, ``strong`` or ``judge``)."""

    def __init__(self, role: str, config: ServerConfig) -> None:
        self.role = role
        self.config = config
        self.stats = EndpointStats()
        self._policies: dict[float, OpenAIChatPolicy] = {}
        self._semaphore: asyncio.Semaphore | None = None
        self._consecutive_failures = 0
        self.down_reason = ""

    def _policy(self, temperature: float) -> OpenAIChatPolicy:
        if temperature not in self._policies:
            self._policies[temperature] = replace(self.config, temperature=temperature).policy()
        return self._policies[temperature]

    async def ask(
        self, messages: tuple[Message, ...], temperature: float | None = None
    ) -> Completion:
        """One completion; raises `EndpointDown` if the breaker is open, else `PolicyError`."""
        if self.down_reason:
            raise EndpointDown(self.down_reason)
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.config.max_in_flight)
        policy = self._policy(self.config.temperature if temperature is None else temperature)
        async with self._semaphore:
            if self.down_reason:
                raise EndpointDown(self.down_reason)
            start = time.perf_counter()
            self.stats.requests += 1
            try:
                completion = await policy.acomplete(messages)
            except (PolicyConnectionError, PolicyHTTPError) as exc:
                self.stats.failures += 1
                self.stats.seconds += time.perf_counter() - start
                if server_fault(exc):
                    self._consecutive_failures += 1
                    if self._consecutive_failures >= self.config.breaker_failures:
                        self.down_reason = (
                            f"endpoint {self.role} ({self.config.url}) is down: "
                            f"{self._consecutive_failures} consecutive failures, last: {exc}"
                        )
                raise
            except Exception:
                self.stats.failures += 1
                self.stats.seconds += time.perf_counter() - start
                raise
            self.stats.seconds += time.perf_counter() - start
            self._consecutive_failures = 0
            self.stats.prompt_tokens += completion.prompt_tokens or 0
            self.stats.completion_tokens += completion.completion_tokens or 0
            return completion

    async def aclose(self) -> None:
        for policy in self._policies.values():
            await policy.aclose()


class Counted:
    """`endpoint` for one item: the same `ask`, counting this item's requests in ``calls`` (the
    endpoint's own counters mix every item in flight)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.calls = 0

    async def ask(
        self, messages: tuple[Message, ...], temperature: float | None = None
    ) -> Completion:
        self.calls += 1
        return await self.endpoint.ask(messages, temperature)


Asker = Endpoint | Counted  # what a stage asks: the endpoint itself or its per-item counter


def error_text(exc: BaseException, limit: int = 200) -> str:
    """``Type: message`` of a failed request for a record, the message bounded to `limit`
    characters (`codedance.prompts.bound_text`: head and tail kept, the cut marked)."""
    return f"{type(exc).__name__}: {bound_text(str(exc), limit)}"


def endpoints_from(configs: dict[str, ServerConfig]) -> dict[str, Endpoint]:
    return {role: Endpoint(role, c) for role, c in configs.items()}
