"""The reward function over grouped batches and the turn-level advantage through verl's own
``compute_advantage`` on a ``DataProto``, against values computed by hand (docs/rewards.md §4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("verl")
torch = pytest.importorskip("torch")

from verl import DataProto
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.core_algos import AdvantageEstimator
from verl.trainer.ppo.ray_trainer import compute_advantage

import codedance.integrations.verl  # noqa: F401  (registers the estimators)
from codedance.integrations.verl.advantage import batch_context
from codedance.integrations.verl.record import EXTRA_KEY, RolloutRecord, TurnRecord
from codedance.integrations.verl.reward import compute_score, group_rewards
from codedance.integrations.verl.tasks import TASK_KEY, task_fields
from codedance.integrations.verl.trainer import records_from_fields
from codedance.types import AnswerKind, Task

pytestmark = pytest.mark.tier("verl")

CODE = "<think>.</think><code>\n```python\nx\n```\n</code>"
ANS = "<think>.</think><answer>7</answer>"
TURN, GAP = 3, 2  # tokens per assistant turn, feedback tokens after it


def rec(statuses, answered=True, task="q"):
    """A record with one code turn per status, then an answer turn when `answered`."""
    kinds = [(CODE, s) for s in statuses] + ([(ANS, None)] if answered else [])
    turns = tuple(
        TurnRecord(text, (k * (TURN + GAP), k * (TURN + GAP) + TURN), status=status)
        for k, (text, status) in enumerate(kinds)
    )
    return RolloutRecord(
        task, turns, "answered" if answered else "max_turns", "7" if answered else None
    )


def dataproto(records, scores, uids, length=20):
    mask = np.zeros((len(records), length), dtype=np.int64)
    rewards = np.zeros((len(records), length), dtype=np.float32)
    for i, r in enumerate(records):
        for s, e in r.spans:
            mask[i, s:e] = 1
        rewards[i, r.spans[-1][1] - 1] = scores[i]
    return DataProto.from_dict(
        tensors={"token_level_rewards": torch.tensor(rewards), "response_mask": torch.tensor(mask)},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


# docs/rewards.md §4: one group of 4, paper profile, general data
EXAMPLE = [rec(["ok", "ok"]), rec([]), rec(["error"], answered=False), rec(["error", "ok"])]
CORRECT = [1.0, 1.0, 0.0, 0.0]
SCORES = [1.0, 1.0, -0.2, 0.0]  # R_acc + R_format, what verl's reward loop holds


@pytest.mark.parametrize(
    "estimator, a_ok, a_fail, a_answer",
    [
        ("codedance_paper", 0.8165, -1.2247, 0.0),  # call turns only; answer and direct turns get 0
        ("codedance_paper_all_turns", 0.5774, -1.7321, 0.5774),
    ],
)
def test_worked_example_through_verls_compute_advantage(estimator, a_ok, a_fail, a_answer):
    data = dataproto(EXAMPLE, SCORES, ["g"] * 4)
    with batch_context(EXAMPLE, CORRECT, ["g"] * 4) as ctx:
        out = compute_advantage(data, adv_estimator=estimator, config=AlgoConfig())
    adv = out.batch["advantages"].numpy()
    a_seq = [1.0511, 0.6341, -1.0337, -0.6515]
    expected = {0: [a_ok, a_ok, a_answer], 1: [a_answer], 2: [a_fail], 3: [a_fail, a_ok, a_answer]}
    for i, turn_adv in expected.items():
        for m, (s, e) in enumerate(EXAMPLE[i].spans):
            assert np.allclose(adv[i, s:e], a_seq[i] + turn_adv[m], atol=2e-4), (i, m)
    assert np.all(adv[out.batch["response_mask"].numpy() == 0] == 0)  # feedback and padding
    assert ctx.metrics["codedance/d_mean"] == pytest.approx(0.3, abs=1e-9)
    assert ctx.metrics["codedance/calls_per_traj"] == pytest.approx(5 / 4)
    assert ctx.metrics["codedance/exec_success"] == pytest.approx(3 / 5)


def test_grpo_part_equals_verls_grpo():
    records = EXAMPLE + [
        rec(["ok"], task="p"),
        rec([], task="p"),
        rec(["timeout"], answered=False, task="p"),
    ]
    correct = CORRECT + [1.0, 0.0, 0.0]
    scores = SCORES + [1.0, 0.0, -0.2]
    uids = ["g"] * 4 + ["h"] * 3
    with batch_context(records, correct, uids):
        ours = compute_advantage(
            dataproto(records, scores, uids),
            adv_estimator="codedance_outcome_only",
            config=AlgoConfig(),
        )
    theirs = compute_advantage(
        dataproto(records, scores, uids), adv_estimator=AdvantageEstimator.GRPO, config=AlgoConfig()
    )
    assert torch.allclose(ours.batch["advantages"], theirs.batch["advantages"], atol=1e-5)
    assert ours.batch["advantages"].abs().sum() > 0


def test_misaligned_rows_and_missing_context_raise():
    with (
        batch_context(EXAMPLE, CORRECT, ["g"] * 4),
        pytest.raises(ValueError, match="not the codedance score"),
    ):
        compute_advantage(
            dataproto(EXAMPLE, SCORES[::-1], ["g"] * 4),
            adv_estimator="codedance_paper",
            config=AlgoConfig(),
        )
    with pytest.raises(RuntimeError, match="codedance_sync"):
        compute_advantage(
            dataproto(EXAMPLE, SCORES, ["g"] * 4),
            adv_estimator="codedance_release",
            config=AlgoConfig(),
        )


def test_group_rewards_all_right_and_none_right():
    d = lambda mu: 1 / (1 + math.exp(-4 * (0.5 - mu))) - 0.2
    right = [rec(["ok", "error"], task="easy"), rec(["ok"], task="easy"), rec([], task="easy")]
    wrong = [rec(["ok", "error"], task="hard"), rec(["error"], task="hard"), rec([], task="hard")]
    batch = group_rewards(right + wrong, [1, 1, 1, 0, 0, 0], ["e"] * 3 + ["h"] * 3)
    assert d(1.0) < 0 < d(0.0)
    expected = [
        1 + 1.0 * d(1.0) * 0.5,
        1 + 1.0 * d(1.0),
        1.0,  # every rollout right: calls cost
        0.5 * d(0.0) * 0.5,
        0.0,
        0.0,
    ]  # none right: calls pay
    assert np.allclose(batch.rewards, expected, atol=1e-9)
    assert [dict(b.metrics)["d"] for b in batch.breakdowns] == pytest.approx(
        [d(1.0)] * 3 + [d(0.0)] * 3
    )
    assert batch.breakdowns[4].turn_returns == (-0.5, 0.0)


def test_compute_score_and_records_from_fields():
    task = Task(id="q", question="How many?", images=(), answer="7", kind=AnswerKind.COUNT)
    good = {TASK_KEY: task_fields(task), EXTRA_KEY: rec(["ok", "error"]).to_json()}
    out = compute_score("world", "ignored", "7", good)
    assert out == {
        "score": 1.0,
        "correct": 1.0,
        "acc": 1.0,
        "format": 0.0,
        "format_error": 0.0,
        "n_calls": 2.0,
        "n_success": 1.0,
    }
    bad = {TASK_KEY: task_fields(task), EXTRA_KEY: rec(["error"], answered=False).to_json()}
    assert compute_score("world", "", "7", bad)["score"] == pytest.approx(-0.2)
    with pytest.raises(ValueError, match="ground truth"):
        compute_score("world", "", "8", good)
    records, correct = records_from_fields([{**good, "reward_extra_info": {"correct": 1.0}}])
    assert records[0] == rec(["ok", "error"]) and correct == [1.0]
    with pytest.raises(KeyError, match="custom_reward_function"):
        records_from_fields([good])


def test_returned_images_survive_the_record_and_pay_the_deepeyes_bonus():
    cropped = TurnRecord(CODE, (0, TURN), status="ok", feedback_images=2)
    printed = TurnRecord(CODE, (0, TURN), status="ok")
    answer = TurnRecord(ANS, (TURN + GAP, 2 * TURN + GAP))
    records = [
        RolloutRecord("q", (cropped, answer), "answered", "7"),
        RolloutRecord("q", (printed, answer), "answered", "7"),
    ]
    back = [RolloutRecord.from_json(r.to_json()) for r in records]
    assert [len(t.feedback_images) for t in back[0].trajectory().turns] == [2, 0]
    totals = group_rewards(back, [1, 1], ["u", "u"], profile="deepeyes").rewards
    assert totals.tolist() == pytest.approx([0.8 + 1.2, 0.8])  # only a returned image pays
