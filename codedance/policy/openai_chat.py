"""`OpenAIChatPolicy`: any OpenAI-compatible ``/v1/chat/completions`` server, over httpx.

What it does: sends the conversation with images as ``data:image/png;base64`` URLs, the sampling
settings, and stop strings; bounds each request by ``timeout_s``; retries with exponential
backoff (honouring ``Retry-After``) on 429, 5xx, connection errors and timeouts; keeps the
sampled token ids and logprobs when the server returns them.

Token ids: with ``server_extras`` (default) the request also carries vLLM's
``return_token_ids`` (ids in ``choices[0].token_ids``, prompt ids in ``prompt_token_ids``) and,
with stop strings, ``include_stop_str_in_output`` so the text keeps the stop string the model
generated. A conversation whose last message is ``continued`` (`codedance.types.Message`) is
sent with vLLM's ``continue_final_message: true, add_generation_prompt: false``: the server
renders that message open and the reply is its continuation. With ``logprobs`` and vLLM's
``--return-tokens-as-token-ids``, tokens arrive as ``token_id:N`` and the ids are read from
there. Servers that reject unknown fields (the OpenAI API itself) need ``server_extras=False``.

Errors: unreachable server -> `PolicyConnectionError`; unknown model -> `ModelNotFoundError`;
context overflow (a 400 that says so) -> `ContextOverflowError`; too many images for the
server's per-prompt limit (vLLM: "At most N image(s) may be provided in one prompt") ->
`ImageLimitError`; other 4xx/5xx -> `PolicyHTTPError`; a body that is not a chat completion ->
`MalformedResponseError`. vLLM 0.32 no longer answers 400 when prompt + ``max_tokens`` exceed
the context: it clamps and finishes with ``length`` (a ``max_tokens`` stop for the loop).

Text and token ids (checked against recorded vLLM replies,
``tests/policy/test_vllm_recordings.py``): the loop trusts ``content``; ``token_ids`` may hold more
(see `Completion`). With a stop string and ``include_stop_str_in_output`` the text ends right after
the stop string even when that is inside a token, while the ids hold the whole token.
``stop_reason`` and ``usage`` are kept. If a server parses tool calls itself
(``message.tool_calls``), they are written back into the text in the hermes ``<tool_call>`` form the
model generated; ``content: null`` becomes "". Connections: up to ``max_connections``, split over
small httpx clients (`ClientShards`; one big httpx pool costs time quadratic in its connections at
hundreds of concurrent requests). Not handled: streaming, ``n > 1``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from codedance.messages import error_text
from codedance.policy.base import (
    Completion,
    ContextOverflowError,
    ImageLimitError,
    MalformedResponseError,
    ModelNotFoundError,
    PolicyConnectionError,
    PolicyHTTPError,
    SamplingParams,
)
from codedance.policy.http_pool import ClientShards
from codedance.policy.wire import data_url, message_json
from codedance.types import Message

_OVERFLOW_MARKERS = (
    "maximum context length",
    "context length",
    "context_length_exceeded",
    "too long",
)
_TRANSIENT = (httpx.TransportError,)
_IMAGE_LIMIT = re.compile(r"at most \d+ image\(s\) may be provided", re.IGNORECASE)


@dataclass(frozen=True)
class RetrySettings:
    """Retry ``max_retries`` times after the first try, sleeping ``backoff_s * 2**k`` (capped)."""

    max_retries: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    retry_statuses: tuple[int, ...] = (408, 429, 500, 502, 503, 504)

    def delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(self.max_backoff_s, max(0.0, float(retry_after)))
            except ValueError:
                pass
        return min(self.max_backoff_s, self.backoff_s * (2**attempt))


DEFAULT_SAMPLING = SamplingParams()


def api_base(url: str) -> str:
    """The API root: a bare ``http://host:port`` gets ``/v1``; any other path is kept.

    >>> api_base("http://localhost:8000"), api_base("http://h:1/openai/v1/")
    ('http://localhost:8000/v1', 'http://h:1/openai/v1')
    """
    url = url.rstrip("/")
    if urlsplit(url).path in ("", "/"):
        url += "/v1"
    return url


def _error_for(status: int, body: str, url: str, model: str) -> PolicyHTTPError:
    lowered = body.lower()
    if status == 400 and _IMAGE_LIMIT.search(body):
        return ImageLimitError(
            f"too many images for the server at {url}: {body[:300]} (start vLLM with a "
            f"larger --limit-mm-per-prompt, or lower the per-trajectory image cap)",
            status,
            body,
        )
    if status in (400, 413, 422) and any(marker in lowered for marker in _OVERFLOW_MARKERS):
        return ContextOverflowError(
            f"context overflow at {url}: {error_text(body, 500)}", status, body
        )
    if status == 404 or (status == 400 and "model" in lowered and "not exist" in lowered):
        if "model" in lowered:
            return ModelNotFoundError(
                f"the server at {url} does not serve model {model!r}: {body[:300]} "
                f"(GET {url.rsplit('/chat/completions', 1)[0]}/models lists the names it serves)",
                status,
                body,
            )
        return PolicyHTTPError(
            f"404 from {url}: is this an OpenAI-compatible /v1 endpoint?", status, body
        )
    if status in (401, 403):
        return PolicyHTTPError(
            f"{status} from {url}: check the API key. {error_text(body)}", status, body
        )
    return PolicyHTTPError(f"HTTP {status} from {url}: {error_text(body, 500)}", status, body)


def _token_ids_from_logprobs(content: list[Mapping[str, Any]]) -> tuple[int, ...]:
    ids = []
    for entry in content:
        token = str(entry.get("token", ""))
        if not token.startswith("token_id:"):
            return ()
        ids.append(int(token.split(":", 1)[1]))
    return tuple(ids)


def parse_completion(data: object) -> Completion:
    """A `Completion` from a decoded chat-completion body; `MalformedResponseError` otherwise."""
    try:
        assert isinstance(data, dict)
        choice = data["choices"][0]
        message = choice["message"]
        text = message.get("content") or ""
        assert isinstance(text, str)
        for call in message.get("tool_calls") or ():
            function = call["function"]
            arguments = function.get("arguments", "{}")
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
            payload = json.dumps(
                {"name": function["name"], "arguments": arguments}, ensure_ascii=False
            )
            text += f"\n<tool_call>\n{payload}\n</tool_call>"
        logprob_content = (choice.get("logprobs") or {}).get("content") or []
        logprobs = tuple(float(entry["logprob"]) for entry in logprob_content)
        token_ids = tuple(int(t) for t in choice.get("token_ids") or ())
        token_ids = token_ids or _token_ids_from_logprobs(logprob_content)
        prompt_ids = tuple(
            int(t) for t in data.get("prompt_token_ids") or choice.get("prompt_token_ids") or ()
        )
        usage = data.get("usage") or {}
        stop_reason = choice.get("stop_reason")
        return Completion(
            text=text,
            finish_reason=str(choice.get("finish_reason") or "stop"),
            token_ids=token_ids,
            logprobs=logprobs,
            prompt_token_ids=prompt_ids,
            model=str(data.get("model", "")),
            stop_reason=stop_reason if isinstance(stop_reason, (str, int)) else None,
            prompt_tokens=int(usage["prompt_tokens"])
            if usage.get("prompt_tokens") is not None
            else None,
            completion_tokens=int(usage["completion_tokens"])
            if usage.get("completion_tokens") is not None
            else None,
        )
    except (AssertionError, KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise MalformedResponseError(
            f"not a chat completion ({type(exc).__name__}: {exc}): {str(data)[:300]}"
        ) from exc


class OpenAIChatPolicy:
    """A `Policy` backed by an OpenAI-compatible server at `base_url` serving `model`."""

    def __init__(
        self,
        base_url: str,
        model: str,
        sampling: SamplingParams = DEFAULT_SAMPLING,
        *,
        api_key: str = "EMPTY",
        timeout_s: float = 300.0,
        connect_timeout_s: float = 10.0,
        retry: RetrySettings = RetrySettings(),
        server_extras: bool = True,
        max_connections: int = 512,
    ) -> None:
        self.base_url = api_base(base_url)
        self.model = model
        self.sampling = sampling
        self.retry = retry
        self.server_extras = server_extras
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self._max_connections = max_connections
        self._clients: ClientShards[httpx.Client] = (
            self._sync_shards()
        )  # no client made until a request
        self._aclients: ClientShards[httpx.AsyncClient] | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def request_body(self, messages: tuple[Message, ...]) -> dict[str, object]:
        """The JSON body for `messages` (wire format, built only here)."""
        s = self.sampling
        body: dict[str, object] = {
            "model": self.model,
            "messages": [message_json(m) for m in messages],
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
            "n": 1,
        }
        if s.stop:
            body["stop"] = list(s.stop)
        if messages and messages[-1].continued:
            # vLLM renders the last message open (no end-of-turn) and generates its continuation;
            # it refuses the pair unless the generation prompt is turned off explicitly
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        if s.seed is not None:
            body["seed"] = s.seed
        if s.logprobs:
            body["logprobs"] = True
        if self.server_extras:
            body["return_token_ids"] = True
            if s.stop:
                body["include_stop_str_in_output"] = True
            if s.top_k is not None:
                body["top_k"] = s.top_k
            if s.repetition_penalty is not None:
                body["repetition_penalty"] = s.repetition_penalty
        return body

    def _result(self, response: httpx.Response) -> Completion:
        if response.status_code >= 400:
            raise _error_for(response.status_code, response.text, self.url, self.model)
        try:
            data = response.json()
        except ValueError as exc:
            raise MalformedResponseError(
                f"{self.url} answered non-JSON: {response.text[:300]!r}"
            ) from exc
        return parse_completion(data)

    def _retryable(self, response: httpx.Response) -> bool:
        return response.status_code in self.retry.retry_statuses

    def _client_args(self, limits: httpx.Limits, verify: Any) -> dict[str, Any]:
        return {
            "timeout": self._timeout,
            "limits": limits,
            "headers": self._headers,
            "verify": verify,
        }

    def _sync_shards(self) -> ClientShards[httpx.Client]:
        return ClientShards(
            lambda limits, verify: httpx.Client(**self._client_args(limits, verify)),
            self._max_connections,
        )

    def _post(self, body: dict[str, object]) -> httpx.Response:
        with self._clients.lease() as client:
            return client.post(self.url, json=body)

    async def _apost(self, body: dict[str, object]) -> httpx.Response:
        loop = asyncio.get_running_loop()
        if self._aclients is None or self._aloop is not loop:
            self._aclients = ClientShards(
                lambda limits, verify: httpx.AsyncClient(**self._client_args(limits, verify)),
                self._max_connections,
            )
            self._aloop = loop
        with self._aclients.lease() as client:
            return await client.post(self.url, json=body)

    def complete(self, messages: tuple[Message, ...]) -> Completion:
        return self.send(self.request_body(messages))

    def send(self, body: dict[str, object]) -> Completion:
        """One chat completion of a body already in wire form (`request_body`, or a caller's own
        text-only messages: the LLM judge), with the retries above."""
        for attempt in range(self.retry.max_retries + 1):
            last = attempt == self.retry.max_retries
            try:
                response = self._post(body)
            except _TRANSIENT as exc:
                if last:
                    raise PolicyConnectionError(
                        f"cannot reach {self.url}: {type(exc).__name__}: {exc}"
                    ) from exc
                time.sleep(self.retry.delay(attempt, None))
                continue
            if self._retryable(response) and not last:
                time.sleep(self.retry.delay(attempt, response.headers.get("retry-after")))
                continue
            return self._result(response)
        raise AssertionError("unreachable")  # pragma: no cover

    async def acomplete(self, messages: tuple[Message, ...]) -> Completion:
        body = self.request_body(messages)
        for attempt in range(self.retry.max_retries + 1):
            last = attempt == self.retry.max_retries
            try:
                response = await self._apost(body)
            except _TRANSIENT as exc:
                if last:
                    raise PolicyConnectionError(
                        f"cannot reach {self.url}: {type(exc).__name__}: {exc}"
                    ) from exc
                await asyncio.sleep(self.retry.delay(attempt, None))
                continue
            if self._retryable(response) and not last:
                await asyncio.sleep(self.retry.delay(attempt, response.headers.get("retry-after")))
                continue
            return self._result(response)
        raise AssertionError("unreachable")  # pragma: no cover

    def list_models(self) -> tuple[str, ...]:
        """The model names the server serves (``GET /v1/models``)."""
        try:
            response = httpx.get(
                f"{self.base_url}/models", headers=self._headers, timeout=self._timeout
            )
        except httpx.TransportError as exc:
            raise PolicyConnectionError(f"cannot reach {self.base_url}/models: {exc}") from exc
        if response.status_code >= 400:
            raise _error_for(
                response.status_code, response.text, f"{self.base_url}/models", self.model
            )
        try:
            return tuple(str(entry["id"]) for entry in response.json()["data"])
        except (ValueError, KeyError, TypeError) as exc:
            raise MalformedResponseError(
                f"{self.base_url}/models answered {response.text[:300]!r}"
            ) from exc

    def close(self) -> None:
        """Close the blocking clients (the asyncio ones close with their loop or `aclose`)."""
        for client in self._clients.take_all():
            client.close()

    async def aclose(self) -> None:
        if self._aclients is not None:
            for client in self._aclients.take_all():
                await client.aclose()


__all__ = ["OpenAIChatPolicy", "RetrySettings", "api_base", "data_url", "parse_completion"]
