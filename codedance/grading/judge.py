"""An LLM judge over any OpenAI-compatible chat-completions server (vLLM, SGLang, ...).

The authors judged answers with Qwen2.5-72B-Instruct and a few-shot "Judgement: 1/0" prompt.
Here: the same protocol (our own wording and examples), deterministic settings (temperature 0,
fixed seed, a few output tokens), a *strict* verdict parser (the whole reply must be ``1``/``0``,
optionally prefixed by ``Judgement:``; anything else raises `JudgeVerdictError` instead of the
release's "any '1' in the reply" rule), a cache keyed by (question, gold, prediction, judge),
bounded concurrency over the one HTTP client of every served model (`ServerConfig.policy`, with
its retries), and `JudgeUnavailableError` with an actionable message when the server cannot be
reached.

Departures from the release: temperature 0 instead of 0.3 and a fixed seed instead of a random
one (reproducible verdicts); unparseable replies raise `JudgeVerdictError` (the eval scorer then
scores that one sample 0 and counts it). ``complete`` takes per-call ``temperature`` and ``seed``
for protocols that retry at other temperatures (VLMEvalKit's).
Not handled: CharXiv's per-item grading prompts and MathVerse's two-step extraction (they need
their own prompts; `JudgeClient.complete` is the building block).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Self

import httpx

from codedance.errors import BackendError, SettingsError
from codedance.grading.cache import JudgeCache, judge_cache_key
from codedance.policy.base import PolicyConnectionError, PolicyError
from codedance.policy.server_config import ServerConfig

PROMPT_VERSION = "judgement-v1"
SYSTEM_PROMPT = "You are a careful grader."
_INSTRUCTION = (
    "You compare a model's answer with the standard answer to a question about an image. "
    "They are consistent when they mean the same thing, even if worded differently (for example "
    "'blue' and 'it is blue'). Output 'Judgement: 1' if they are consistent and 'Judgement: 0' "
    "if they are not, and nothing else.\n\n"
)
_EXAMPLES = (
    ("What color is the umbrella?", "The umbrella is red.", "red", 1),
    ("Which side of the road is the bus on?", "The bus is on the right.", "left side", 0),
    ("Is the cup empty?", "No, the cup is full.", "no", 1),
    ("How many birds are there?", "3", "There are four birds.", 0),
)
_VERDICT_RE = re.compile(
    r"\s*(?:\**\s*judge?ment\s*\**\s*:?\s*\**\s*)?([01])\s*\**\.?\s*", re.IGNORECASE
)


class JudgeError(BackendError):
    """The judge could not produce a verdict (HTTP error, malformed response)."""


class JudgeUnavailableError(JudgeError):
    """The judge server cannot be reached."""


class JudgeVerdictError(JudgeError):
    """The judge replied, but not with a verdict this parser accepts."""


def build_prompt(*, question: str, gold: str, prediction: str) -> str:
    """The few-shot "Judgement: 1/0" prompt for one item.

    >>> prompt = build_prompt(question="Q?", gold="A", prediction="B")
    >>> prompt.endswith("[Model answer]: B\\nJudgement:")
    True
    """
    shots = "\n\n".join(
        f"[Question]: {q}\n[Standard answer]: {g}\n[Model answer]: {p}\nJudgement: {v}"
        for q, g, p, v in _EXAMPLES
    )
    item = (
        f"[Question]: {question}\n[Standard answer]: {gold}\n"
        f"[Model answer]: {prediction}\nJudgement:"
    )
    return f"{_INSTRUCTION}{shots}\n\n{item}"


def parse_verdict(reply: str) -> bool:
    """Strictly parse a judge reply.

    >>> parse_verdict("1"), parse_verdict("Judgement: 0"), parse_verdict(" **Judgement:** 1. ")
    (True, False, True)
    >>> parse_verdict("I think 1 but maybe 0")
    Traceback (most recent call last):
    ...
    codedance.grading.judge.JudgeVerdictError: judge reply is not a verdict: 'I think 1 but maybe 0'
    """
    match = _VERDICT_RE.fullmatch(reply or "")
    if match is None:
        raise JudgeVerdictError(f"judge reply is not a verdict: {reply[:200]!r}")
    return match.group(1) == "1"


JUDGE_SERVER = ServerConfig(
    model="Qwen/Qwen2.5-72B-Instruct", max_tokens=16, timeout_s=60.0, retries=3, max_in_flight=16
)
"""The judge's defaults (the authors' judge model; a verdict needs a few tokens); callers set
``url`` (and ``model``)."""
SEED = 0  # a fixed sampling seed: reproducible verdicts


@dataclass(frozen=True)
class JudgeItem:
    question: str
    gold: str
    prediction: str


class JudgeClient:
    """Judge answers through an OpenAI-compatible server; thread-safe; use as a context manager.

    ``judge(question=..., gold=..., prediction=...) -> bool`` for one item, ``judge_many(items)``
    for a batch (deduplicated, at most ``max_in_flight`` requests in flight, order kept).
    """

    def __init__(self, config: ServerConfig, cache: JudgeCache | None = None) -> None:
        if config.max_in_flight < 1:
            raise SettingsError("the judge's max_in_flight must be at least 1")
        self.config = config
        self.cache = cache if cache is not None else JudgeCache()
        self._policy = config.policy()
        self._slots = threading.BoundedSemaphore(config.max_in_flight)
        self.requests_sent = 0
        self._count_lock = threading.Lock()

    @property
    def name(self) -> str:
        """The judge in the cache key: model, prompt version and temperature."""
        return f"{self.config.model}|{PROMPT_VERSION}|t={self.config.temperature}"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._policy.close()

    def complete(
        self,
        messages: Sequence[dict[str, str]],
        max_tokens: int | None = None,
        *,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> str:
        """One chat completion's text, through the one HTTP client (`OpenAIChatPolicy.send`: its
        retries on 408/429/5xx and transport errors). ``max_tokens``, ``temperature`` and ``seed``
        override the config's (a verdict needs a few tokens, an extraction more; VLMEvalKit's
        protocols retry at other temperatures)."""
        body = {
            "model": self.config.model,
            "messages": list(messages),
            "temperature": self.config.temperature if temperature is None else temperature,
            "seed": SEED if seed is None else seed,
            "max_tokens": max_tokens or self.config.max_tokens,
            "n": 1,
        }
        url = self._policy.url
        with self._slots:
            with self._count_lock:
                self.requests_sent += 1
            try:
                return self._policy.send(body).text
            except PolicyConnectionError as exc:
                if isinstance(exc.__cause__, (httpx.ConnectError, httpx.ConnectTimeout)):
                    raise JudgeUnavailableError(
                        f"LLM judge at {url} is not reachable ({exc.__cause__}). Start an "
                        f"OpenAI-compatible server serving {self.config.model!r} (e.g. `vllm serve "
                        f"{self.config.model}`) or point the judge's url at one."
                    ) from exc
                raise JudgeError(f"LLM judge request to {url} failed: {exc}") from exc
            except PolicyError as exc:
                raise JudgeError(f"LLM judge at {url} answered {exc}") from exc

    def judge(self, *, question: str, gold: str, prediction: str) -> bool:
        """True when the judge says the prediction is consistent with the gold answer."""
        key = judge_cache_key(question=question, gold=gold, prediction=prediction, judge=self.name)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        prompt = build_prompt(question=question, gold=gold, prediction=prediction)
        reply = self.complete(
            [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
        )
        verdict = parse_verdict(reply)
        self.cache.put(key, verdict)
        return verdict

    def judge_many(self, items: Sequence[JudgeItem]) -> list[bool]:
        """Verdicts for many items, in order; the first error raises after in-flight calls end."""
        unique = list(dict.fromkeys(items))
        workers = min(self.config.max_in_flight, max(1, len(unique)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="judge") as pool:
            verdicts = list(
                pool.map(
                    lambda it: self.judge(
                        question=it.question, gold=it.gold, prediction=it.prediction
                    ),
                    unique,
                )
            )
        by_item = dict(zip(unique, verdicts, strict=True))
        return [by_item[item] for item in items]
