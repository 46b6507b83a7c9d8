"""A tiny Qwen2.5-VL tokenizer and processor built locally (no hub download), for CPU tests.

Byte-level BPE with no merges (every byte is one token, so any text round-trips exactly), the
Qwen2.5-VL special tokens, a ChatML template with Qwen2.5-VL's image markers, and transformers'
PIL Qwen2-VL image processor and the base video processor (no torchvision needed). Not Qwen's real
vocabulary: token ids differ from the real model's, but the structure (``<|im_start|>``,
``<|im_end|>``, ``<|vision_start|>`` ``<|image_pad|>``×n ``<|vision_end|>``, one pad per 2×2 merged
14-px patch) is the same.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.tier("verl")

SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'image' or 'image' in c %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build():
    """(tokenizer, processor) for a tiny Qwen2.5-VL."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    vocab = {c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIALS[1:]),
    )
    tokenizer.chat_template = TEMPLATE
    image_processor = Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=56 * 56 * 4)
    from transformers.video_processing_utils import BaseVideoProcessor

    # no videos here; the base video processor avoids torchvision
    class TinyProcessor(Qwen2_5_VLProcessor):
        def check_argument_for_proper_class(self, argument_name, argument):
            if (
                argument_name == "video_processor"
            ):  # transformers swaps in a dummy class without torchvision
                return type(argument)
            return super().check_argument_for_proper_class(argument_name, argument)

    processor = TinyProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=BaseVideoProcessor(),
        chat_template=TEMPLATE,
    )
    return tokenizer, processor
