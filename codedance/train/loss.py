"""The policy-gradient pieces of the small GRPO trainer (torch): collation, log-probs, the loss.

- `collate(encoded, processor, pad_id)`: right-padded ``input_ids`` / ``attention_mask`` /
  ``loss_mask`` (B, L) and the batch's ``pixel_values`` / ``image_grid_thw`` in sequence order.
- `token_logprobs(model, inputs, temperature)`: log π(token_t | tokens_<t) for t = 1..L−1,
  (B, L−1), and the policy entropy at the same positions (logits divided by the sampling
  temperature, as verl does).
- `loss_weights(loss_mask, aggregation, ...)`: per-token weights whose weighted sum is the
  loss of the *whole* mini-batch, so gradient accumulation over micro-batches equals one big
  batch. ``token-mean`` (the release, verl's default): 1/ΣN tokens of the mini-batch;
  ``seq-mean`` (the paper's 1/|τ|): 1/(|τ_i| · B) for the B trajectories of the mini-batch.
- `clipped_surrogate(logp, old_logp, adv, weights, clip)`: PPO's
  −min(ρA, clip(ρ, 1−ε, 1+ε)A) per token, ρ = exp(logp − old_logp), ε = 0.2; with an optional
  k3 KL penalty against a reference (``kl_coef`` 0 by default: the paper uses none).

Not handled: dual clip (the release's clip ratio c = 3 for negative advantages), entropy bonus
(the paper's coefficient is 0; entropy is logged only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from codedance.train.encode import EncodedTrajectory

AGGREGATIONS = ("token-mean", "seq-mean")


def collate(encoded: Sequence[EncodedTrajectory], processor: Any, pad_id: int) -> dict[str, Any]:
    import torch

    width = max(len(e) for e in encoded)
    ids = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(encoded), width), dtype=torch.long)
    mask = torch.zeros((len(encoded), width), dtype=torch.float32)
    images = []
    for row, e in enumerate(encoded):
        n = len(e)
        ids[row, :n] = torch.tensor(e.input_ids)
        attention[row, :n] = 1
        mask[row, :n] = torch.tensor(e.loss_mask, dtype=torch.float32)
        images += list(e.images)
    out: dict[str, Any] = {"input_ids": ids, "attention_mask": attention, "loss_mask": mask}
    if images:
        out.update(processor.pixel_inputs(images))
    return out


def model_inputs(batch: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in batch.items()
        if k in ("input_ids", "attention_mask", "pixel_values", "image_grid_thw")
    }


def token_logprobs(model: Any, batch: dict[str, Any], temperature: float = 1.0) -> tuple[Any, Any]:
    """(logp, entropy), both (B, L−1): position t−1 scores token t."""
    import torch

    logits = model(**model_inputs(batch), use_cache=False).logits[:, :-1].float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logsm = torch.log_softmax(logits, dim=-1)
    target = batch["input_ids"][:, 1:]
    logp = logsm.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    entropy = -(logsm.exp() * logsm).sum(-1)
    return logp, entropy


def loss_weights(loss_mask: Any, aggregation: str, *, total_tokens: float, total_seqs: int) -> Any:
    """(B, L−1) weights for the shifted mask ``loss_mask[:, 1:]`` (see the module docstring)."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    m = loss_mask[:, 1:]
    if aggregation == "token-mean":
        return m / max(total_tokens, 1.0)
    per_seq = m.sum(-1, keepdim=True).clamp(min=1.0)
    return m / per_seq / max(total_seqs, 1)


def clipped_surrogate(
    logp: Any,
    old_logp: Any,
    advantages: Any,
    weights: Any,
    *,
    clip: float = 0.2,
    ref_logp: Any | None = None,
    kl_coef: float = 0.0,
) -> tuple[Any, dict[str, float]]:
    """Weighted PPO-clip loss (a scalar) and statistics. All tensors (B, L−1)."""
    import torch

    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    stats: dict[str, float] = {}
    if ref_logp is not None and kl_coef > 0:
        log_r = ref_logp - logp
        kl = torch.exp(log_r) - log_r - 1.0  # k3, always ≥ 0
        per_token = per_token + kl_coef * kl
        stats["kl"] = float((kl.detach() * weights).sum())
    loss = (per_token * weights).sum()
    on = weights > 0
    with torch.no_grad():
        hit = ((ratio > 1.0 + clip) & (advantages > 0)) | ((ratio < 1.0 - clip) & (advantages < 0))
        stats["clip_frac"] = float(hit[on].float().mean()) if on.any() else 0.0
        stats["ratio_mean"] = float(ratio[on].mean()) if on.any() else 1.0
    return loss, stats
