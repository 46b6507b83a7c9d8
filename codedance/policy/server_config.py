"""`ServerConfig`: the model-server settings every command that calls a served model shares
(``codedance eval``, ``codedance solve``), declared once for the one loader (`codedance.config`).

`ServerConfig.policy` builds the `OpenAIChatPolicy`. Not here: the API key (never printed or
saved; commands take ``--api-key`` / ``$OPENAI_API_KEY``).
"""

from __future__ import annotations

from dataclasses import dataclass

from codedance.config import not_resumed
from codedance.policy.base import SamplingParams
from codedance.policy.openai_chat import OpenAIChatPolicy, RetrySettings


@dataclass(frozen=True)
class ServerConfig:
    """The model server: URL, served name ('' = the server's first), sampling, requests."""

    url: str = ""
    name: str = ""
    temperature: float = 0.0
    max_tokens: int = 2048
    request_timeout_s: float = not_resumed(300.0)
    retries: int = not_resumed(4)
    plain_openai: bool = False

    def policy(self, api_key: str = "EMPTY", seed: int | None = None, top_p: float = 1.0) -> OpenAIChatPolicy:
        """The client (its model name is ``name``, or '?' until the caller asks the server)."""
        sampling = SamplingParams(temperature=self.temperature, top_p=top_p, max_tokens=self.max_tokens, seed=seed)
        return OpenAIChatPolicy(self.url, self.name or "?", sampling, api_key=api_key,
                                timeout_s=self.request_timeout_s, server_extras=not self.plain_openai,
                                retry=RetrySettings(max_retries=self.retries))


