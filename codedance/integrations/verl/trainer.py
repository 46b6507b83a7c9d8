"""The trainer override that carries the rollout records into the advantage step.

verl 0.9.1's v1 trainer fetches only tensors for ``_compute_advantage``. `CodeDancePPOTrainerSync`
(registered as ``trainer.v1.trainer_mode=codedance_sync``) subclasses verl's synchronous trainer
and changes one thing: before verl's own advantage step it reads each row's ``uid`` and
``extra_fields`` (the agent loop's `RolloutRecord` and the reward loop's verdict) from the
TransferQueue with the same keys, opens `codedance.integrations.verl.advantage.batch_context`,
and lets verl's step run; the registered estimator picks the records up. Its metrics (accuracy,
calls per trajectory, execution success, d, μ, turn-advantage statistics, stop reasons) are added
to the step's metrics under ``codedance/``.

Untested here: this class needs a running TransferQueue and Ray cluster (a GPU run); the CPU
tests cover `records_from_fields` and the estimator through verl's ``compute_advantage``.
Not handled: the async trainer modes (``colocate_async``, ``separate_async``).
"""

from __future__ import annotations

from collections.abc import Sequence

from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer

from codedance.integrations.verl.advantage import batch_context
from codedance.integrations.verl.record import RolloutRecord, record_from_extra


def records_from_fields(extra_fields: Sequence[dict]) -> tuple[list[RolloutRecord], list[float]]:
    """(records, verdicts) from the rows' ``extra_fields``; the verdict is the reward loop's
    ``reward_extra_info["correct"]`` (missing means the reward function was not ours: an error)."""
    records, correct = [], []
    for i, extra in enumerate(extra_fields):
        records.append(record_from_extra(extra))
        info = extra.get("reward_extra_info") or {}
        if "correct" not in info:
            raise KeyError(
                f"row {i}: no reward_extra_info['correct']; set reward.custom_reward_function"
                " to pkg://codedance.integrations.verl.reward / compute_score"
            )
        correct.append(float(info["correct"]))
    return records, correct


@register_trainer("codedance_sync")
class CodeDancePPOTrainerSync(PPOTrainerSync):
    """verl's synchronous PPO trainer with the codedance records in the advantage step."""

    def _compute_advantage(self, batch, metrics: dict):
        import transfer_queue as tq

        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "extra_fields"]
        )
        records, correct = records_from_fields(list(data["extra_fields"]))
        with batch_context(records, correct, [str(u) for u in data["uid"]]) as ctx:
            out = super()._compute_advantage(batch, metrics=metrics)
        metrics.update(ctx.metrics)
        return out
