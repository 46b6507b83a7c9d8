"""The turn-level advantage as verl advantage estimators: A_seq + A_turn per token.

verl has no turn-level credit. Each profile of `codedance.rewards` is registered with
``core_algos.register_adv_est`` under `ESTIMATORS` (``algorithm.adv_estimator=codedance_paper``,
``codedance_release``, the baselines ``codedance_outcome_only`` (GRPO on R_acc + R_format) and
``codedance_deepeyes``, and the ablations ``codedance_paper_no_turn`` (w/o R_turn),
``codedance_paper_delta0`` and ``codedance_paper_gamma5``). The logged call counts and execution
success are `codedance.runs.stats.AgentStats` of the records' trajectories (``exec_success`` is
left out of a step without calls). Per token of assistant turn m of rollout i:

    A = A_seq(r_i over its group) + w · A_turn(R_turn^m over the batch)   (0 where mask is 0)

computed by `codedance.advantages.batch_token_advantages` on `codedance.integrations.verl.reward
.group_rewards` — the very functions our tests pin by hand. The turn spans come from the agent
loop's `RolloutRecord` (not guessed from mask runs); the group is verl's ``uid``.

verl 0.9.1 passes an estimator only tensors (``token_level_rewards``, ``response_mask``,
``index``, ``config``), so the records travel beside it: `batch_context` holds them for the
duration of one advantage step. The trainer override (`codedance.integrations.verl.trainer`)
fetches them from verl's TransferQueue and opens the context; tests open it by hand around verl's
own ``compute_advantage``. Checks, each an error rather than a silent fallback: one record per
row, the same uids in the same order, and verl's ``token_level_rewards`` summing per row to the
per-sample score of `reward.compute_score` (this catches misaligned rows, and also
``use_kl_in_reward``, which the paper does not use and this estimator does not support).

Profile fields can be overridden with ``+algorithm.codedance.<field>=<value>`` (for example
``delta=0.0`` for the paper's δ ablation). ``returns`` equal the advantages, as verl's GRPO does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from codedance.advantages import batch_token_advantages, grpo_advantages, turn_advantages
from codedance.integrations.verl.record import RolloutRecord
from codedance.integrations.verl.reward import group_rewards
from codedance.runs.stats import AgentStats
from codedance.types import ExecStatus

ESTIMATORS = {
    "codedance_paper": "paper",
    "codedance_release": "release",
    "codedance_outcome_only": "outcome-only",
    "codedance_deepeyes": "deepeyes",
    "codedance_paper_all_turns": "paper-all-turns",
    "codedance_paper_no_turn": "paper-no-turn",
    "codedance_paper_delta0": "paper-delta0",
    "codedance_paper_gamma5": "paper-gamma5",
}


@dataclass
class BatchContext:
    """What one advantage step needs beyond verl's tensors; ``metrics`` is filled by the
    estimator (log-only values for the trainer)."""

    records: Sequence[RolloutRecord]
    correct: Sequence[float]
    uids: Sequence[str]
    metrics: dict[str, float] = field(default_factory=dict)


_CONTEXT: list[BatchContext] = []


@contextlib.contextmanager
def batch_context(
    records: Sequence[RolloutRecord], correct: Sequence[float], uids: Sequence[str]
) -> Iterator[BatchContext]:
    """Make one batch's records visible to the estimators until the block ends."""
    if not len(records) == len(correct) == len(uids):
        raise ValueError(f"{len(records)} records, {len(correct)} verdicts, {len(uids)} uids")
    ctx = BatchContext(records=records, correct=correct, uids=[str(u) for u in uids])
    _CONTEXT.append(ctx)
    try:
        yield ctx
    finally:
        _CONTEXT.remove(ctx)


def _overrides(config) -> dict[str, object]:
    if config is None:
        return {}
    extra = config.get("codedance", None) if hasattr(config, "get") else None
    return dict(extra) if extra else {}


def token_advantages_for(
    profile: str,
    token_level_rewards,
    response_mask,
    index,
    ctx: BatchContext,
    overrides: dict[str, object] | None = None,
):
    """(B, L) float32 numpy advantages for the rows of `ctx` under `profile`, after the checks
    of the module docstring; fills ``ctx.metrics``."""
    rewards_in = np.asarray(token_level_rewards, dtype=np.float64)
    mask = np.asarray(response_mask)
    n = mask.shape[0]
    if len(ctx.records) != n:
        raise ValueError(
            f"the batch has {n} rows but the codedance context holds {len(ctx.records)}"
        )
    if index is not None and [str(u) for u in index] != list(ctx.uids):
        raise ValueError("verl's uids differ from the codedance context's: rows are misaligned")
    batch = group_rewards(ctx.records, ctx.correct, ctx.uids, profile=profile, **(overrides or {}))
    prof = batch.profile
    per_sample = np.array(
        [
            prof.weight("accuracy") * b.accuracy + prof.weight("format") * b.format
            for b in batch.breakdowns
        ]
    )
    got = rewards_in.sum(axis=-1)
    if not np.allclose(got, per_sample, atol=1e-4):
        row = int(np.flatnonzero(~np.isclose(got, per_sample, atol=1e-4))[0])
        raise ValueError(
            f"row {row}: verl's reward {got[row]:.6f} is not the codedance score "
            f"{per_sample[row]:.6f} (misaligned rows, another reward function, or "
            "use_kl_in_reward, which the codedance estimators do not support)"
        )
    spans = [r.spans for r in ctx.records]
    adv = batch_token_advantages(batch, turn_spans=spans, loss_mask=mask)
    ctx.metrics.update(_metrics(batch, ctx.records))
    return adv


def _metrics(batch, records: Sequence[RolloutRecord]) -> dict[str, float]:
    def mean(name: str) -> float:
        return float(np.mean([dict(b.metrics)[name] for b in batch.breakdowns]))

    stats = AgentStats.of([r.trajectory() for r in records])
    prof = batch.profile
    seq = grpo_advantages(batch.rewards, batch.group_ids, scale=prof.adv_scale)
    include = batch.turn_is_call if prof.turn_scope == "call_turns" else None
    turns = (
        np.concatenate(
            turn_advantages(batch.turn_returns, include=include, fallback=prof.turn_std_fallback)
        )
        if records
        else np.zeros(0)
    )
    stops = [r.stop_reason for r in records]
    out = {
        "codedance/accuracy": mean("correct"),
        "codedance/d_mean": mean("d"),
        "codedance/mu_mean": mean("mu"),
        "codedance/calls_per_traj": stats.calls_per_sample or 0.0,
        "codedance/reward_total_mean": float(np.mean(batch.rewards)),
        "codedance/r_tool_mean": float(np.mean([b.sequence_tool for b in batch.breakdowns])),
        "codedance/format_error": mean("format_error"),
        "codedance/a_seq_abs_mean": float(np.mean(np.abs(seq))),
        "codedance/a_turn_mean": float(turns.mean()) if turns.size else 0.0,
        "codedance/a_turn_std": float(turns.std()) if turns.size else 0.0,
    }
    if stats.exec_success is not None:
        out["codedance/exec_success"] = stats.exec_success
    for reason in ("answered", "max_turns", "max_tokens", "format_error", "sandbox_error"):
        out[f"codedance/stop_{reason}"] = stops.count(reason) / max(len(stops), 1)
    statuses = [t.status for r in records for t in r.turns if t.status is not None]
    for status in ExecStatus:  # sandbox calls of the batch by outcome (counts, not fractions)
        out[f"codedance/calls_{status.value}"] = float(statuses.count(status.value))
    return out


def _make_estimator(name: str, profile: str):
    def estimator(token_level_rewards, response_mask, index=None, config=None, **_):
        import torch

        if not _CONTEXT:
            raise RuntimeError(
                f"advantage estimator {name!r} needs the codedance trainer "
                "(trainer.v1.trainer_mode=codedance_sync) to pass the rollout records"
            )
        adv = token_advantages_for(
            profile,
            token_level_rewards.detach().cpu().numpy(),
            response_mask.detach().cpu().numpy(),
            index,
            _CONTEXT[-1],
            _overrides(config),
        )
        out = torch.as_tensor(adv, dtype=torch.float32, device=token_level_rewards.device)
        return out, out.clone()

    estimator.__name__ = estimator.__qualname__ = f"compute_{name}_advantage"
    estimator.__doc__ = f"A_seq + A_turn per token under the {profile!r} reward profile."
    return estimator


def register_estimators() -> None:
    """Register every estimator of `ESTIMATORS` with verl (idempotent)."""
    from verl.trainer.ppo import core_algos

    for name, profile in ESTIMATORS.items():
        if name not in core_algos.ADV_ESTIMATOR_REGISTRY:
            core_algos.register_adv_est(name)(_make_estimator(name, profile))
