"""Prompt text and observation rendering: named profiles, feedback, Qwen2.5-VL image sizing.

`profiles` holds every piece of text shown to the model; `feedback` turns a sandbox result into
the next observation and builds chat messages; `vision` resizes images as qwen-vl-utils does.
"""

from codedance.prompts.feedback import (
    IMAGE_PLACEHOLDER,
    Feedback,
    FeedbackLimits,
    bound_text,
    conversation,
    model_images,
    prompt_messages,
    render_feedback,
    split_placeholders,
    with_turn_limit,
)
from codedance.prompts.profiles import (
    BUILTIN_PROFILES,
    PAPER,
    RELEASE,
    RELEASE_EVAL,
    PromptProfile,
    get_profile,
    load_profiles,
    user_text,
)
from codedance.prompts.vision import VisionLimits, fit_image, image_from_bytes, smart_resize

__all__ = [
    "BUILTIN_PROFILES",
    "IMAGE_PLACEHOLDER",
    "PAPER",
    "RELEASE",
    "RELEASE_EVAL",
    "Feedback",
    "FeedbackLimits",
    "PromptProfile",
    "VisionLimits",
    "bound_text",
    "conversation",
    "fit_image",
    "get_profile",
    "image_from_bytes",
    "load_profiles",
    "model_images",
    "prompt_messages",
    "render_feedback",
    "smart_resize",
    "split_placeholders",
    "user_text",
    "with_turn_limit",
]
