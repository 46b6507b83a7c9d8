"""Advantages for GRPO with the turn-level term of CodeDance: pure numpy, shapes stated.

- `grpo_advantages(rewards, group_ids)`: A_i = (r_i − mean_g)/(std_g + ε) over each group g, as
  verl's ``compute_grpo_outcome_advantage``: unbiased std (ddof 1), ε = 1e-6, a one-member group
  has mean 0 and std 1 (its advantage is its reward). A group whose rewards are all equal gets
  exactly 0. ``scale="batch"`` divides by the batch's std instead, ``"none"`` does not divide
  (Dr. GRPO).
- `turn_advantages(returns)`: A_turn^m = (R_turn^m − μ_batch)/σ_batch over the batch's turns
  (population std); ``include`` restricts the statistics to some turns (the release: call turns
  only) and gives the others 0; a constant batch gives 0 (``fallback="zero"``) or keeps the raw
  returns (``"raw"``, the release).
- `token_advantages(...)`: per token, A_seq of the trajectory + w·A_turn of the token's assistant
  turn; tokens with loss mask 0 (prompt, feedback text and images) get 0.
- `batch_token_advantages(batch, ...)`: all of the above under a reward profile
  (`profile_advantages` gives its A_seq and A_turn before they are laid on tokens).
- `first_turn_pushes(batch, labels)`: per label (easy / hard), how the profile's advantage on
  the first assistant turn pushes the call-or-answer decision (docs/rewards.md, "Which turns
  R_turn is normalized over").

Paper: A = A_seq(R_acc, R_format, R_seq) + A_turn(R_turn), weight 1 (paper §3.1). Release:
A = GRPO(score + d·tool) + 0.2·Â_turn. What is not here: the policy loss (clipping, token-mean vs
per-trajectory averaging) belongs to the trainer integration.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from codedance.rewards.group import BatchRewards

SCALES = ("group", "batch", "none")


def _group_index(group_ids: Sequence[Hashable] | np.ndarray) -> np.ndarray:
    labels: dict[Hashable, int] = {}
    return np.fromiter(
        (labels.setdefault(g, len(labels)) for g in group_ids), dtype=np.int64, count=len(group_ids)
    )


def grpo_advantages(rewards, group_ids, *, scale: str = "group", eps: float = 1e-6) -> np.ndarray:
    """Group-normalized outcome advantages. rewards: (B,) float; group_ids: (B,) labels → (B,).

    >>> grpo_advantages([1.0, 0.0, 0.5, 0.5], ["a", "a", "b", "b"]).round(6).tolist()
    [0.707106, -0.707106, 0.0, 0.0]
    >>> grpo_advantages([2.0], ["solo"]).round(6).tolist()       # verl: mean 0, std 1
    [1.999998]
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or len(group_ids) != r.shape[0]:
        raise ValueError(
            f"rewards (B,) and group_ids (B,) must match, got {r.shape} and {len(group_ids)}"
        )
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards must be finite")
    idx = _group_index(group_ids)
    n_groups = int(idx.max()) + 1 if idx.size else 0
    count = np.bincount(idx, minlength=n_groups).astype(np.float64)
    mean = np.bincount(idx, weights=r, minlength=n_groups) / np.maximum(count, 1)
    sq = np.bincount(idx, weights=(r - mean[idx]) ** 2, minlength=n_groups)
    std = np.sqrt(sq / np.maximum(count - 1, 1))
    single = count == 1
    mean[single], std[single] = 0.0, 1.0
    low = np.full(n_groups, np.inf)
    high = np.full(n_groups, -np.inf)
    np.minimum.at(low, idx, r)
    np.maximum.at(high, idx, r)
    constant = (low == high) & ~single
    centered = np.where(constant[idx], 0.0, r - mean[idx])
    if scale == "group":
        return centered / (std[idx] + eps)
    if scale == "batch":
        return centered / ((np.std(r, ddof=1) if r.size > 1 else 1.0) + eps)
    return centered


def turn_advantages(
    returns: Sequence[np.ndarray],
    *,
    include: Sequence[np.ndarray] | None = None,
    fallback: str = "zero",
    eps: float = 1e-8,
) -> tuple[np.ndarray, ...]:
    """Batch-normalized turn advantages. returns[i]: (n_i,) R_turn per assistant turn of
    trajectory i; include[i]: (n_i,) bool, which turns enter the statistics (default all).
    → tuple of (n_i,) arrays; excluded turns get 0.

    >>> [a.round(6).tolist() for a in turn_advantages([np.array([-0.5, 0.0]), np.array([0.0])])]
    [[-1.414214, 0.707107], [0.707107]]
    >>> one = [np.array([True, False])]  # one value: std 0, raw kept
    >>> [a.tolist() for a in turn_advantages([np.array([-0.5, 0.0])], include=one, fallback="raw")]
    [[-0.5, 0.0]]
    """
    if fallback not in ("zero", "raw"):
        raise ValueError(f"fallback must be 'zero' or 'raw', got {fallback!r}")
    rets = [np.asarray(x, dtype=np.float64).reshape(-1) for x in returns]
    masks = (
        [np.ones(x.shape[0], dtype=bool) for x in rets]
        if include is None
        else [np.asarray(m, dtype=bool).reshape(-1) for m in include]
    )
    if len(masks) != len(rets) or any(m.shape != x.shape for m, x in zip(masks, rets, strict=True)):
        raise ValueError("include must have one (n_i,) mask per returns[i]")
    values = (
        np.concatenate([x[m] for x, m in zip(rets, masks, strict=True)]) if rets else np.zeros(0)
    )
    if values.size == 0:
        return tuple(np.zeros_like(x) for x in rets)
    mu, sigma = float(values.mean()), float(values.std())
    out = []
    for x, m in zip(rets, masks, strict=True):
        if sigma > eps:
            a = (x - mu) / sigma
        else:
            a = x.copy() if fallback == "raw" else np.zeros_like(x)
        out.append(np.where(m, a, 0.0))
    return tuple(out)


def spans_from_mask(mask_row) -> list[tuple[int, int]]:
    """Contiguous runs of 1 in a (L,) loss mask as [start, end) spans, one per assistant turn
    (how the release assigns turns to tokens).

    >>> spans_from_mask([0, 1, 1, 0, 0, 1, 0, 1])
    [(1, 3), (5, 6), (7, 8)]
    """
    m = np.concatenate([[0], np.asarray(mask_row, dtype=np.int8).reshape(-1) != 0, [0]]).astype(
        np.int8
    )
    edges = np.flatnonzero(np.diff(m))
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2], strict=True)]


def token_advantages(
    seq_adv,
    turn_adv: Sequence[np.ndarray] | None,
    turn_spans: Sequence[Sequence[tuple[int, int]]],
    loss_mask,
    *,
    turn_weight: float = 1.0,
) -> np.ndarray:
    """Per-token advantages. seq_adv: (B,); turn_adv[i]: (n_i,) or None (no turn term);
    turn_spans[i]: n_i [start, end) token spans of trajectory i's assistant turns; loss_mask:
    (B, L) 0/1 → (B, L) float32: seq_adv[i] + turn_weight·turn_adv[i][m] on turn m's tokens,
    0 where the mask is 0. A mask-1 token outside every span, overlapping or out-of-range spans,
    or a span count unequal to n_i raise.

    >>> spans, mask = [[(0, 2), (3, 4)]], [[1, 1, 0, 1]]
    >>> token_advantages([1.0], [np.array([-1.0, 0.5])], spans, mask).tolist()
    [[0.0, 0.0, 0.0, 1.5]]
    """
    seq = np.asarray(seq_adv, dtype=np.float64)
    mask = np.asarray(loss_mask)
    if mask.ndim != 2 or seq.shape != (mask.shape[0],) or len(turn_spans) != mask.shape[0]:
        raise ValueError(
            f"need seq_adv (B,), turn_spans [B], loss_mask (B, L); got {seq.shape}, "
            f"{len(turn_spans)}, {mask.shape}"
        )
    batch, length = mask.shape
    turn_part = np.zeros((batch, length), dtype=np.float64)
    covered = np.zeros((batch, length), dtype=bool)
    for i, spans in enumerate(turn_spans):
        values = None if turn_adv is None else np.asarray(turn_adv[i], dtype=np.float64)
        if values is not None and values.shape != (len(spans),):
            raise ValueError(
                f"trajectory {i}: {len(spans)} turn spans but {values.shape} turn advantages"
            )
        end_prev = 0
        for m, (start, end) in enumerate(spans):
            if not 0 <= start <= end <= length or start < end_prev:
                raise ValueError(
                    f"trajectory {i}: span {m} {(start, end)} is out of order or range"
                )
            covered[i, start:end] = True
            if values is not None:
                turn_part[i, start:end] = values[m]
            end_prev = end
    trained = mask != 0
    if np.any(trained & ~covered):
        row = int(np.flatnonzero(np.any(trained & ~covered, axis=1))[0])
        raise ValueError(f"trajectory {row}: loss-mask tokens outside every assistant-turn span")
    out = (seq[:, None] + turn_weight * turn_part) * trained
    return out.astype(np.float32)


def profile_advantages(batch: BatchRewards) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
    """A_seq (B,) by ``adv_scale`` and A_turn (n_i,) per trajectory over ``turn_scope`` with
    ``turn_std_fallback`` (None when ``turn_weight`` is 0), unweighted."""
    profile = batch.profile
    seq = grpo_advantages(batch.rewards, batch.group_ids, scale=profile.adv_scale)
    if profile.turn_weight == 0.0:
        return seq, None
    include = batch.turn_is_call if profile.turn_scope == "call_turns" else None
    return seq, turn_advantages(
        batch.turn_returns, include=include, fallback=profile.turn_std_fallback
    )


def batch_token_advantages(
    batch: BatchRewards, *, turn_spans: Sequence[Sequence[tuple[int, int]]], loss_mask
) -> np.ndarray:
    """(B, L) float32 token advantages of a `BatchRewards` under its profile: A_seq by
    ``adv_scale``, A_turn over ``turn_scope`` with ``turn_std_fallback``, weight ``turn_weight``."""
    seq, turns = profile_advantages(batch)
    return token_advantages(
        seq, turns, turn_spans, loss_mask, turn_weight=batch.profile.turn_weight
    )


@dataclass(frozen=True)
class Push:
    """The first-turn decision under one label: ``p_call`` the share of rollouts whose first
    turn is a call; ``delta_seq`` / ``delta_turn`` = E[· | first turn calls] − E[· | it answers]
    of A_seq and of w·A_turn on the first turn; ``delta`` their sum; ``push`` = p(1 − p)·Δ, the
    expected policy-gradient step on the call logit per rollout (negative: fewer calls). With no
    call or no direct first turn under the label the deltas and the push are NaN."""

    n: int
    p_call: float
    delta_seq: float
    delta_turn: float

    @property
    def delta(self) -> float:
        return self.delta_seq + self.delta_turn

    @property
    def push(self) -> float:
        return self.p_call * (1.0 - self.p_call) * self.delta


def first_turn_pushes(
    batches: Sequence[BatchRewards], labels: Sequence[Sequence[str]]
) -> dict[str, Push]:
    """`Push` per label of the first assistant turn's advantage, each batch's advantages under
    its own profile (A_turn's statistics are per batch, as in training), pooled over the
    batches. labels[b]: one label per trajectory of batches[b] (e.g. its item's difficulty).

    >>> from codedance.rewards import compute_batch_rewards
    >>> from codedance.types import ExecResult, ExecStatus, StopReason, Trajectory, Turn
    >>> fin = Turn("<think>.</think><answer>7</answer>")
    >>> code = lambda s: Turn("<think>.</think><code>c</code>", result=ExecResult(s))
    >>> call = lambda s: Trajectory("q", (code(s), fin), StopReason.ANSWERED)
    >>> direct = Trajectory("q", (fin,), StopReason.ANSWERED)
    >>> group = [call(ExecStatus.OK), call(ExecStatus.ERROR), direct, direct]
    >>> rewards = lambda name: compute_batch_rewards(
    ...     trajectories=group, correct=[True] * 4, group_ids=["g"] * 4, profile=name)
    >>> pushes = {name: first_turn_pushes([rewards(name)], [["hard"] * 4])["hard"]
    ...           for name in ("paper", "paper-all-turns")}
    >>> [(p.p_call, round(p.delta_turn, 4)) for p in pushes.values()]  # call turns: ±1, mean 0
    [(0.5, 0.0), (0.5, -1.3416)]
    """
    if len(batches) != len(labels):
        raise ValueError(f"{len(batches)} batches but {len(labels)} label lists")
    seq_parts, turn_parts, call_parts, all_labels = [], [], [], []
    for batch, batch_labels in zip(batches, labels, strict=True):
        if len(batch_labels) != len(batch.breakdowns):
            raise ValueError(f"{len(batch.breakdowns)} trajectories but {len(batch_labels)} labels")
        seq, turns = profile_advantages(batch)
        weight = batch.profile.turn_weight
        seq_parts.append(seq)
        turn_parts.append(
            [weight * float(t[0]) if t.size else 0.0 for t in turns]
            if turns is not None
            else [0.0] * len(batch_labels)
        )
        call_parts.append([bool(c.size) and bool(c[0]) for c in batch.turn_is_call])
        all_labels.extend(batch_labels)
    seq_all = np.concatenate(seq_parts) if seq_parts else np.zeros(0)
    turn_all = np.array([x for part in turn_parts for x in part], dtype=np.float64)
    calls = np.array([x for part in call_parts for x in part], dtype=bool)
    out = {}
    for label in dict.fromkeys(all_labels):
        rows = np.array([x == label for x in all_labels])
        called, direct = rows & calls, rows & ~calls

        def gap(
            values: np.ndarray, called: np.ndarray = called, direct: np.ndarray = direct
        ) -> float:
            if not called.any() or not direct.any():
                return float("nan")
            return float(values[called].mean() - values[direct].mean())

        out[label] = Push(
            n=int(rows.sum()),
            p_call=float(calls[rows].mean()),
            delta_seq=gap(seq_all),
            delta_turn=gap(turn_all),
        )
    return out
