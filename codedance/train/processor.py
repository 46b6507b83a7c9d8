"""`ImageTextProcessor` now lives in `codedance.policy.qwen_processor` (the policy uses it too,
and must not depend on the trainer); this module re-exports it for the trainer's imports."""

from codedance.policy.qwen_processor import (
    CONFIG,
    IMAGE_PAD,
    VISION_TOKENS,
    ImageTextProcessor,
    vision_token_ids,
)

__all__ = ["CONFIG", "IMAGE_PAD", "VISION_TOKENS", "ImageTextProcessor", "vision_token_ids"]
