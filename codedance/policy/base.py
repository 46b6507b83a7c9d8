"""The `Policy` seam: given the conversation so far, return the model's next message.

A policy is stateless across calls: each call gets every message (text and images) so far and
returns a `Completion`. Backends: `OpenAIChatPolicy` (vLLM, SGLang or any OpenAI-compatible
server), `TransformersPolicy` (a local Qwen2.5-VL-family model), `ScriptedPolicy` (tests, demos).

Errors a caller can act on are subclasses of `PolicyError`; `ContextOverflowError` and
`ImageLimitError` are the ones the episode runner turns into a clean stop (``max_tokens``,
``image_limit``) instead of an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from codedance.errors import BackendError
from codedance.types import Message


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings sent with every request. ``max_tokens`` bounds one assistant turn.

    ``logprobs`` asks the server for the sampled tokens' log-probabilities; ``stop`` strings end
    generation (OpenAI semantics: the stop string itself is not returned unless the server is
    told to keep it, see `OpenAIChatPolicy`)."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 2048
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False
    top_k: int | None = None
    repetition_penalty: float | None = None


@dataclass(frozen=True)
class Completion:
    """One assistant message. ``finish_reason`` is the server's (``stop``, ``length``, ...).

    ``token_ids`` / ``logprobs`` are the sampled tokens when the backend returned them (empty
    otherwise; never re-tokenized from the text). ``prompt_token_ids`` is the prompt as the server
    tokenized it, when it says. ``stop_reason`` is vLLM's: the stop string or token id that ended
    generation (None at EOS or the length limit); ``prompt_tokens`` / ``completion_tokens`` come
    from ``usage`` when the server sends it.

    Text versus token ids: the episode loop trusts ``text`` (it is what the model's next turn
    sees and what is parsed and scored). The ids are kept as the server returned them for
    training, and with vLLM they can hold more than the text: the whole token that a stop string
    cut in the middle, sampled special tokens (vLLM skips them in the text), EOS, and trailing
    bytes of incomplete UTF-8 (withheld from the text)."""

    text: str
    finish_reason: str = "stop"
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    prompt_token_ids: tuple[int, ...] = ()
    model: str = ""
    stop_reason: str | int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    @property
    def truncated(self) -> bool:
        """True when generation hit the token limit."""
        return self.finish_reason == "length"


@runtime_checkable
class Policy(Protocol):
    """Anything that can continue a conversation, blocking or on an asyncio loop."""

    def complete(self, messages: tuple[Message, ...]) -> Completion: ...

    async def acomplete(self, messages: tuple[Message, ...]) -> Completion: ...


class PolicyError(BackendError):
    """The model backend could not produce a message; the text says what to check."""


class PolicyConnectionError(PolicyError):
    """The server could not be reached (after retries)."""


class PolicyHTTPError(PolicyError):
    """The server answered with an error status (after retries, for retryable ones)."""

    def __init__(self, message: str, status: int, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class ModelNotFoundError(PolicyHTTPError):
    """The server does not serve the requested model name."""


class ContextOverflowError(PolicyHTTPError):
    """The conversation no longer fits the model's context window."""


class ImageLimitError(PolicyHTTPError):
    """The conversation holds more images than the server accepts per prompt (vLLM's
    ``--limit-mm-per-prompt``)."""


class MalformedResponseError(PolicyError):
    """The server answered, but not with an OpenAI chat-completion object."""


class ScriptExhaustedError(PolicyError):
    """A `ScriptedPolicy` was asked for more replies than it was given."""
