"""The tiny-cpu policy: a small Qwen2.5-VL-architecture model from a config, with a task-fitted
tokenizer built offline.

- `build_tokenizer(corpus, vocab_size)`: a byte-level BPE trained on `corpus` (the texts of the
  teacher trajectories and prompts) with Qwen's special tokens and a Qwen2-VL-shaped chat
  template (``<|im_start|>role\\n…<|im_end|>\\n``, images as
  ``<|vision_start|><|image_pad|><|vision_end|>``). Byte-level, so any text still encodes; a few
  hundred tokens instead of 151k is what makes CPU training fast (the embedding and the softmax
  dominate a 4M-parameter model otherwise).
- `build_model(tokenizer, size)`: ``Qwen2_5_VLForConditionalGeneration`` randomly initialised
  (text decoder with M-RoPE, a one-block vision tower), no download.
- `save_policy` / `load_policy`: a folder with the model, tokenizer and `ImageTextProcessor`
  settings.

Departure from the paper: the paper starts from the pretrained Qwen2.5-VL-7B; this preset trains
a model from scratch so both stages run on 2 CPU cores (its "knowledge" is only what SFT shows).
Not handled: loading the real Qwen tokenizer here (use ``TransformersPolicy.from_pretrained``
on a real checkpoint for that).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for c in message['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


SPLITS = ("words", "lines", "lines-digits")


@dataclass(frozen=True)
class TinySize:
    """Decoder and vision-tower sizes. ``hidden`` / ``heads`` must give an even head dim whose
    half splits into the M-RoPE sections (t, h, w)."""

    hidden: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 512
    vision_hidden: int = 64
    vision_depth: int = 1
    max_positions: int = 4096


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 512, split: str = "words") -> Any:
    """A byte-level BPE tokenizer trained on `corpus` (see the module docstring). `split`:
    ``words`` (GPT-2's pre-tokenizer), ``lines`` (merges within a line: a repeated code line can
    become one token), ``lines-digits`` (the same, but every digit is a token of its own, so a
    number reads the same in a program's output and in the answer that copies it)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    if split not in SPLITS:
        raise ValueError(f"tokenizer split must be one of {SPLITS}, got {split!r}")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split == "words")
    if split in (
        "lines",
        "lines-digits",
    ):  # merges stay within a line (and never swallow the newline)
        steps = [pre_tokenizers.Split("\n", "isolated")]
        if split == "lines-digits":  # every digit its own token, as in Qwen's tokenizer
            steps.append(pre_tokenizers.Digits(individual_digits=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([*steps, byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIALS[1:]),
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def build_model(tokenizer: Any, size: TinySize = TinySize(), seed: int = 0) -> Any:
    """A randomly initialised Qwen2.5-VL of `size` over `tokenizer`'s vocabulary."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    head_dim = size.hidden // size.heads
    half = head_dim // 2
    sections = [half - 2 * (half // 3), half // 3, half // 3]
    ids = {s: tokenizer.convert_tokens_to_ids(s) for s in SPECIALS}
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": size.hidden,
            "intermediate_size": size.intermediate,
            "num_hidden_layers": size.layers,
            "num_attention_heads": size.heads,
            "num_key_value_heads": size.kv_heads,
            "max_position_embeddings": size.max_positions,
            "tie_word_embeddings": True,
            "bos_token_id": None,
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
            "rope_scaling": {"type": "mrope", "mrope_section": sections},
        },
        vision_config={
            "depth": size.vision_depth,
            "hidden_size": size.vision_hidden,
            "intermediate_size": 2 * size.vision_hidden,
            "num_heads": 2,
            "out_hidden_size": size.hidden,
            "fullatt_block_indexes": [0],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    return model


def save_policy(path: str | Path, model: Any, processor: Any) -> None:
    """Write the model and its `ImageTextProcessor` to `path`."""
    Path(path).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    processor.save_pretrained(path)


def load_policy(path: str | Path) -> tuple[Any, Any]:
    """(model, processor) saved by `save_policy`; weights that do not load whole are a
    `CheckpointError` (`codedance.train.weights`)."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    from codedance.train.processor import ImageTextProcessor
    from codedance.train.weights import load_checked

    model = load_checked(
        Qwen2_5_VLForConditionalGeneration,
        path,
        "it is not a model this project saved; delete it and rerun the stage that wrote it",
    )
    return model, ImageTextProcessor.from_pretrained(path)


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
