"""`TransformersPolicy` on a tiny randomly initialised Qwen2.5-VL built from a config (no download).

Skipped where torch or transformers is not installed (they come with the ``train`` extra). Text
only: transformers' Qwen2-VL image processor needs torchvision (see the module docstring).
"""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from codedance.policy import SamplingParams
from codedance.policy.transformers_qwen import TransformersPolicy, chat_template_messages
from codedance.types import Image, Message

TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def tiny_tokenizer():  # type: ignore[no-untyped-def]
    """A byte-level tokenizer with Qwen's special tokens, built in memory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", additional_special_tokens=SPECIALS[1:]
    )
    hf.chat_template = TEMPLATE
    return hf


@pytest.fixture(scope="module")
def tiny() -> tuple[object, object]:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tokenizer = tiny_tokenizer()
    ids = {s: tokenizer.convert_tokens_to_ids(s) for s in SPECIALS}
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
            rope_scaling={"type": "mrope", "mrope_section": [2, 2, 4]},
        ),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, fullatt_block_indexes=[0]),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
    )
    torch.manual_seed(0)
    return Qwen2_5_VLForConditionalGeneration(config).eval(), tokenizer


CHAT = (Message("system", ("sys",)), Message("user", ("How many?",)))


def test_greedy_turn_keeps_sampled_ids_and_logprobs(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = tiny
    policy = TransformersPolicy(model, tokenizer, SamplingParams(max_tokens=6))
    first = policy.complete(CHAT)
    assert 1 <= len(first.token_ids) <= 6 and len(first.logprobs) == len(first.token_ids)
    assert all(lp <= 0.0 for lp in first.logprobs)
    assert first.text == tokenizer.decode(list(first.token_ids), skip_special_tokens=True)
    ended = first.token_ids[-1] == tokenizer.eos_token_id
    assert first.finish_reason == ("stop" if ended else "length")
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": [{"type": "text", "text": "sys"}]}, {"role": "user", "content": [{"type": "text", "text": "How many?"}]}],
        tokenize=False, add_generation_prompt=True,
    )
    assert tokenizer.decode(list(first.prompt_token_ids)) == rendered
    assert policy.complete(CHAT) == first  # greedy is deterministic


async def test_sampling_with_seed_is_reproducible_and_async(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = tiny
    policy = TransformersPolicy(model, tokenizer, SamplingParams(temperature=1.0, max_tokens=8, seed=7))
    a = await policy.acomplete(CHAT)
    b = await policy.acomplete(CHAT)
    assert a.token_ids == b.token_ids and len(a.token_ids) >= 1


def test_images_become_placeholders_in_order() -> None:
    image = Image(png=b"", origin="input:0")
    chat, images = chat_template_messages((Message("user", (image, "q")),))
    assert chat == [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "q"}]}] and images == [image]


def test_importing_the_rollout_does_not_import_torch() -> None:
    import subprocess

    code = "import codedance.rollout, codedance.batch, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
