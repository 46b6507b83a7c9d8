"""Model backends behind the `Policy` protocol (see `codedance.policy.base`).

`TransformersPolicy` is imported from ``codedance.policy.transformers_qwen`` explicitly: it needs
torch and transformers, which nothing else here imports.
"""

from codedance.policy.base import (
    Completion,
    ContextOverflowError,
    ImageLimitError,
    MalformedResponseError,
    ModelNotFoundError,
    Policy,
    PolicyConnectionError,
    PolicyError,
    PolicyHTTPError,
    SamplingParams,
    ScriptExhaustedError,
)
from codedance.policy.openai_chat import OpenAIChatPolicy, RetrySettings
from codedance.policy.scripted import ScriptedPolicy

__all__ = [
    "Completion",
    "ContextOverflowError",
    "ImageLimitError",
    "MalformedResponseError",
    "ModelNotFoundError",
    "OpenAIChatPolicy",
    "Policy",
    "PolicyConnectionError",
    "PolicyError",
    "PolicyHTTPError",
    "RetrySettings",
    "SamplingParams",
    "ScriptExhaustedError",
    "ScriptedPolicy",
]
