"""`ServerConfig`: one OpenAI-compatible server, the same settings wherever a served model is
called (``codedance solve`` and ``eval``, curate's ``weak``/``strong``/``judge`` endpoints, the
LLM judge), declared once for the one loader (`codedance.config`).

`ServerConfig.policy` builds the one HTTP client, `OpenAIChatPolicy`. Keys: ``url`` (``/v1`` is
added to a bare ``http://host:port``), ``model`` ('' = the first the server lists, where the
command asks), ``api_key``, ``temperature``, ``max_tokens``, ``timeout_s`` (per request),
``retries`` and ``backoff_s`` (after the first try, see `RetrySettings`), ``max_in_flight``
(requests to this server at once), ``breaker_failures`` (consecutive failed requests after
which a long pipeline stops calling the server: curate's circuit breaker) and ``vllm_extras``
(false for servers that refuse vLLM's extra request fields, the OpenAI API itself).
Renamed keys are refused with their new name (`RENAMED`, checked by `codedance.config.build`).

What defines a run (``run.json``): the model, temperature and max_tokens; the rest may change
between attempts. Not here: a command's own defaults (curate's endpoints and the judge start from
their own instances, `codedance.grading.judge.JUDGE_SERVER`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from codedance.config import bounded, check_bounds, not_resumed, secret
from codedance.policy.base import SamplingParams
from codedance.policy.openai_chat import OpenAIChatPolicy, RetrySettings


@dataclass(frozen=True)
class ServerConfig:
    """An OpenAI-compatible server and how it is called (see the module docstring)."""

    RENAMED: ClassVar[dict[str, str]] = {
        "name": "model",
        "base_url": "url",
        "request_timeout_s": "timeout_s",
        "max_retries": "retries",
        "max_concurrency": "max_in_flight",
        "plain_openai": (
            "vllm_extras, with the opposite meaning (plain_openai: true is vllm_extras: false)"
        ),
    }

    url: str = not_resumed("")
    model: str = ""
    api_key: str = secret("EMPTY")
    temperature: float = bounded(0.0, at_least=0)
    max_tokens: int = bounded(2048, at_least=1)
    timeout_s: float = not_resumed(300.0, above=0)
    retries: int = not_resumed(4, at_least=0)
    backoff_s: float = not_resumed(0.5, at_least=0)
    max_in_flight: int = not_resumed(512, at_least=1)
    breaker_failures: int = not_resumed(5, at_least=1)
    vllm_extras: bool = not_resumed(True)

    def __post_init__(self) -> None:
        check_bounds(self)

    def policy(
        self, api_key: str | None = None, seed: int | None = None, top_p: float = 1.0
    ) -> OpenAIChatPolicy:
        """The client (its model name is ``model``, or '?' until the caller asks the server);
        ``api_key`` replaces the configured one (a command's ``--api-key``)."""
        sampling = SamplingParams(
            temperature=self.temperature, top_p=top_p, max_tokens=self.max_tokens, seed=seed
        )
        return OpenAIChatPolicy(
            self.url,
            self.model or "?",
            sampling,
            api_key=api_key or self.api_key,
            timeout_s=self.timeout_s,
            server_extras=self.vllm_extras,
            retry=RetrySettings(max_retries=self.retries, backoff_s=self.backoff_s),
            max_connections=self.max_in_flight,
        )
