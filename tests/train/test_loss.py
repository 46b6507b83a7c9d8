"""Clipped surrogate and aggregation weights, by hand; accumulation equals one big batch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from codedance.train.loss import clipped_surrogate, loss_weights

pytestmark = pytest.mark.tier("torch")


def test_clipping_by_hand() -> None:
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))  # ratios vs old logp 0
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    w = torch.full((1, 3), 1 / 3)
    loss, st = clipped_surrogate(logp, old, adv, w, clip=0.2)
    # token 1: min(1.5, 1.2)·1 = 1.2; token 2: min(-0.5, -0.8) = -0.8; token 3: min(2.2, 2.2)
    assert float(loss) == pytest.approx(-(1.2 - 0.8 + 2.2) / 3)
    assert st["clip_frac"] == pytest.approx(2 / 3)


def test_token_mean_and_seq_mean_weights() -> None:
    mask = torch.tensor(
        [[0, 1, 1, 1, 1], [0, 1, 0, 0, 0]], dtype=torch.float32
    )  # 4 and 1 trained tokens
    tok = loss_weights(mask, "token-mean", total_tokens=5, total_seqs=2)
    seq = loss_weights(mask, "seq-mean", total_tokens=5, total_seqs=2)
    assert tok.sum() == pytest.approx(1.0) and tok[0, 0] == pytest.approx(0.2)
    assert seq[0].sum() == pytest.approx(0.5) and seq[1].sum() == pytest.approx(0.5)
    with pytest.raises(ValueError):
        loss_weights(mask, "sum", total_tokens=5, total_seqs=2)


def test_micro_batches_accumulate_to_the_full_batch_gradient() -> None:
    torch.manual_seed(0)
    theta = torch.randn(4, 6, requires_grad=True)
    adv = torch.randn(4, 6)
    mask = (torch.rand(4, 7) > 0.3).float()
    for agg in ("token-mean", "seq-mean"):
        total = float(mask[:, 1:].sum())
        theta.grad = None
        full = clipped_surrogate(
            theta,
            theta.detach() * 0.9,
            adv,
            loss_weights(mask, agg, total_tokens=total, total_seqs=4),
        )[0]
        full.backward()
        g_full = theta.grad.clone()
        theta.grad = None
        for rows in ([0, 1], [2, 3]):
            w = loss_weights(mask[rows], agg, total_tokens=total, total_seqs=4)
            clipped_surrogate(theta[rows], theta.detach()[rows] * 0.9, adv[rows], w)[0].backward()
        assert torch.allclose(theta.grad, g_full, atol=1e-6)
