"""Advantages against hand computations, verl's own GRPO (when verl is installed), and the
benchmark budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from codedance.advantages import (
    batch_token_advantages,
    first_turn_pushes,
    grpo_advantages,
    spans_from_mask,
    token_advantages,
    turn_advantages,
)
from codedance.rewards import compute_batch_rewards
from codedance.types import ExecResult, ExecStatus, StopReason, Trajectory, Turn

pytestmark = pytest.mark.tier("unit")


def test_grpo_by_hand() -> None:
    # group a: [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(1/3)
    adv = grpo_advantages([1.0, 0.0, 0.0, 1.0, 3.0, 1.0], ["a", "a", "a", "a", "b", "b"])
    s_a, s_b = math.sqrt(1 / 3), math.sqrt(2.0)
    expected = [0.5 / (s_a + 1e-6), -0.5 / (s_a + 1e-6)] * 2 + [1 / (s_b + 1e-6), -1 / (s_b + 1e-6)]
    assert adv.tolist() == pytest.approx(
        [expected[0], expected[1], expected[1], expected[0], expected[4], expected[5]]
    )


def test_grpo_constant_singleton_and_scales() -> None:
    assert grpo_advantages([0.1, 0.1, 0.1], [7, 7, 7]).tolist() == [0.0, 0.0, 0.0]  # exactly 0
    assert grpo_advantages([2.0], ["x"]).tolist() == pytest.approx([2.0 / (1 + 1e-6)])
    r, g = [1.0, 0.0, 4.0, 2.0], [0, 0, 1, 1]
    assert grpo_advantages(r, g, scale="none").tolist() == [0.5, -0.5, 1.0, -1.0]
    batch_std = float(np.std(r, ddof=1))
    assert grpo_advantages(r, g, scale="batch").tolist() == pytest.approx(
        [
            0.5 / (batch_std + 1e-6),
            -0.5 / (batch_std + 1e-6),
            1 / (batch_std + 1e-6),
            -1 / (batch_std + 1e-6),
        ]
    )
    with pytest.raises(ValueError):
        grpo_advantages([1.0, 2.0], [0])
    with pytest.raises(ValueError):
        grpo_advantages([1.0, float("nan")], [0, 0])
    with pytest.raises(ValueError):
        grpo_advantages([1.0], [0], scale="token")


def test_grpo_is_group_centred_on_random_batches() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        groups = rng.integers(0, 6, size=48)
        rewards = rng.normal(size=48)
        adv = grpo_advantages(rewards, groups)
        for g in np.unique(groups):
            members = adv[groups == g]
            assert abs(members.sum()) < 1e-9
            if members.size > 1:
                assert np.std(members, ddof=1) == pytest.approx(1.0, abs=1e-4) or np.all(
                    members == 0
                )


def test_turn_advantages_by_hand() -> None:
    returns = [np.array([-0.6, -0.5, 0.0]), np.array([0.0, 0.0])]
    values = [-0.6, -0.5, 0.0, 0.0, 0.0]
    mu = sum(values) / 5
    sigma = math.sqrt(sum((v - mu) ** 2 for v in values) / 5)
    got = turn_advantages(returns)
    assert got[0].tolist() == pytest.approx([(v - mu) / sigma for v in values[:3]])
    assert got[1].tolist() == pytest.approx([(0 - mu) / sigma] * 2)
    # release scope: statistics over call turns only; others get 0
    include = [np.array([True, True, False]), np.array([True, False])]
    calls = [-0.6, -0.5, 0.0]
    mu_c = sum(calls) / 3
    sig_c = math.sqrt(sum((v - mu_c) ** 2 for v in calls) / 3)
    got = turn_advantages(returns, include=include)
    assert got[0].tolist() == pytest.approx([(-0.6 - mu_c) / sig_c, (-0.5 - mu_c) / sig_c, 0.0])
    assert got[1].tolist() == pytest.approx([(0.0 - mu_c) / sig_c, 0.0])


def test_turn_advantages_constant_batch() -> None:
    flat = [np.array([-0.5, 0.0]), np.array([-0.5, 0.0])]
    include = [np.array([True, False])] * 2
    assert [a.tolist() for a in turn_advantages(flat, include=include)] == [[0.0, 0.0]] * 2
    assert [a.tolist() for a in turn_advantages(flat, include=include, fallback="raw")] == [
        [-0.5, 0.0]
    ] * 2
    assert turn_advantages([np.zeros(0)])[0].shape == (0,)
    with pytest.raises(ValueError):
        turn_advantages(flat, include=[np.array([True])] * 2)


def test_token_expansion_gives_feedback_nothing() -> None:
    # turn 0 = tokens 0..2, feedback 3..4, turn 1 = tokens 5..6, padding 7
    mask = np.array([[1, 1, 1, 0, 0, 1, 1, 0]])
    spans = [spans_from_mask(mask[0])]
    assert spans == [[(0, 3), (5, 7)]]
    out = token_advantages([0.5], [np.array([-2.0, 1.0])], spans, mask, turn_weight=0.2)
    assert out.dtype == np.float32
    assert out[0].tolist() == pytest.approx([0.1, 0.1, 0.1, 0, 0, 0.7, 0.7, 0])
    assert token_advantages([0.5], None, spans, mask)[0].tolist() == [
        0.5,
        0.5,
        0.5,
        0,
        0,
        0.5,
        0.5,
        0,
    ]


def test_token_expansion_errors() -> None:
    mask = np.array([[1, 1, 0, 1]])
    with pytest.raises(ValueError, match="outside"):
        token_advantages([1.0], [np.array([0.0])], [[(0, 2)]], mask)
    with pytest.raises(ValueError, match="turn spans"):
        token_advantages([1.0], [np.array([0.0])], [[(0, 2), (3, 4)]], mask)
    with pytest.raises(ValueError, match="order or range"):
        token_advantages([1.0], [np.array([0.0, 0.0])], [[(0, 2), (1, 5)]], mask)
    with pytest.raises(ValueError):
        token_advantages([1.0, 2.0], None, [[(0, 2)]], mask)


def test_end_to_end_paper_profile_by_hand() -> None:
    ok, err = ExecResult(ExecStatus.OK), ExecResult(ExecStatus.ERROR)
    code, answer = "<think>c</think><code>x</code>", Turn("<think>.</think><answer>7</answer>")
    a = Trajectory("q", (Turn(code, result=err), answer), StopReason.ANSWERED)  # wrong, failed call
    b = Trajectory("q", (Turn(code, result=ok), answer), StopReason.ANSWERED)  # right, good call
    batch = compute_batch_rewards(
        trajectories=[a, b], correct=[False, True], group_ids=["q", "q"], profile="paper-all-turns"
    )
    d = 1 / (1 + math.exp(-0.0)) - 0.2
    r_a, r_b = 0.0, 1.0 + d
    seq = (r_a - r_b) / 2 / (math.sqrt((r_a - r_b) ** 2 / 2) + 1e-6)  # G = 2, unbiased std
    turns = [-0.5, 0.0, 0.0, 0.0]  # R_turn of a: −0.5, 0; of b: 0, 0
    mu = sum(turns) / 4
    sigma = math.sqrt(sum((t - mu) ** 2 for t in turns) / 4)
    mask = np.array([[1, 1, 0, 1], [1, 1, 0, 1]])
    spans = [[(0, 2), (3, 4)]] * 2
    out = batch_token_advantages(batch, turn_spans=spans, loss_mask=mask)
    a_turn0, a_other = (-0.5 - mu) / sigma, (0 - mu) / sigma
    assert out[0].tolist() == pytest.approx(
        [seq + a_turn0, seq + a_turn0, 0, seq + a_other], rel=1e-6
    )
    assert out[1].tolist() == pytest.approx(
        [-seq + a_other, -seq + a_other, 0, -seq + a_other], rel=1e-6
    )
    paper = compute_batch_rewards(trajectories=[a, b], correct=[False, True], group_ids=["q", "q"])
    out_p = batch_token_advantages(paper, turn_spans=spans, loss_mask=mask)
    # call turns only: values [−0.5, 0] normalized to [−1, 1]; answer turns get 0; weight 1
    assert out_p[0].tolist() == pytest.approx([seq - 1, seq - 1, 0, seq], rel=1e-6)
    assert out_p[1].tolist() == pytest.approx([-seq + 1, -seq + 1, 0, -seq], rel=1e-6)
    release = compute_batch_rewards(
        trajectories=[a, b], correct=[False, True], group_ids=["q", "q"], profile="release"
    )
    out_r = batch_token_advantages(release, turn_spans=spans, loss_mask=mask)
    seq_r = float(grpo_advantages(release.rewards, ["q", "q"])[0])
    # call turns only: values [−0.5, 0]: normalized to [−1, 1]; answer turns get 0; weight 0.2
    assert out_r[0].tolist() == pytest.approx([seq_r - 0.2, seq_r - 0.2, 0, seq_r], rel=1e-6)
    assert out_r[1].tolist() == pytest.approx([-seq_r + 0.2, -seq_r + 0.2, 0, -seq_r], rel=1e-6)


@pytest.mark.tier("verl")
def test_matches_verl_grpo_on_random_batches() -> None:
    torch = pytest.importorskip("torch")
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    rng = np.random.default_rng(1)
    for _ in range(10):
        groups = rng.integers(0, 8, size=64)
        rewards = rng.choice([0.0, 1.0, 1.3, -0.2, 0.5], size=64) + rng.normal(scale=0.01, size=64)
        lengths = rng.integers(1, 16, size=64)
        mask = (np.arange(16)[None, :] < lengths[:, None]).astype(np.float32)
        token_rewards = np.zeros((64, 16), dtype=np.float32)
        token_rewards[np.arange(64), lengths - 1] = rewards
        ours = grpo_advantages(rewards.astype(np.float32).astype(np.float64), groups)
        for norm in (True, False):
            theirs, _ = core_algos.compute_grpo_outcome_advantage(
                token_level_rewards=torch.tensor(token_rewards),
                response_mask=torch.tensor(mask),
                index=np.array([str(g) for g in groups], dtype=object),
                norm_adv_by_std_in_grpo=norm,
            )
            mine = (
                ours
                if norm
                else grpo_advantages(
                    rewards.astype(np.float32).astype(np.float64), groups, scale="none"
                )
            )
            np.testing.assert_allclose(theirs.numpy()[:, 0], mine, rtol=1e-4, atol=1e-5)


def test_worked_example_of_docs_rewards_md() -> None:
    ok, err = ExecResult(ExecStatus.OK), ExecResult(ExecStatus.ERROR)
    code, answer = (
        "<think>crop</think><code>...</code>",
        Turn("<think>so</think><answer>7</answer>"),
    )

    def t(*results: ExecResult, answered: bool = True) -> Trajectory:
        turns = tuple(Turn(code, result=r) for r in results) + ((answer,) if answered else ())
        return Trajectory("q", turns, StopReason.ANSWERED if answered else StopReason.MAX_TURNS)

    group = [t(ok, ok), t(), t(err, answered=False), t(err, ok)]
    batch = compute_batch_rewards(
        trajectories=group, correct=[True, True, False, False], group_ids=["q"] * 4
    )
    assert batch.rewards.tolist() == pytest.approx([1.3, 1.0, -0.2, 0.075])
    assert grpo_advantages(batch.rewards, batch.group_ids).round(4).tolist() == [
        1.0511,
        0.6341,
        -1.0337,
        -0.6515,
    ]
    spans = [
        spans_from_mask([1] * 2 + [0] + [1] * 2 + [0] + [1] * 2),
        [(0, 2)],
        [(0, 2)],
        spans_from_mask([1] * 2 + [0] + [1] * 2 + [0] + [1] * 2),
    ]
    mask = np.zeros((4, 8), dtype=np.int8)
    for i, row in enumerate(spans):
        for s, e in row:
            mask[i, s:e] = 1
    out = batch_token_advantages(batch, turn_spans=spans, loss_mask=mask)
    assert (
        round(float(out[3, 0]), 4) == -1.8763 and round(float(out[3, 6]), 4) == -0.6515
    )  # call turns
    assert out[3, 2] == 0.0
    literal = compute_batch_rewards(
        trajectories=group,
        correct=[True, True, False, False],
        group_ids=["q"] * 4,
        profile="paper-all-turns",
    )
    out = batch_token_advantages(literal, turn_spans=spans, loss_mask=mask)
    assert (
        round(float(out[3, 0]), 4) == -2.3836 and round(float(out[3, 6]), 4) == -0.0742
    )  # every turn


def test_turn_scope_decides_whether_calling_is_taxed() -> None:
    err = ExecResult(ExecStatus.ERROR)
    answer = Turn("<think>.</think><answer>7</answer>")
    failed = Trajectory(
        "h", (Turn("<think>c</think><code>x</code>", result=err), answer), StopReason.ANSWERED
    )
    direct = Trajectory("h", (answer,), StopReason.ANSWERED)
    easy = Trajectory("e", (answer,), StopReason.ANSWERED)
    rows, labels = [failed, failed, direct, direct, easy, easy], ["hard"] * 4 + ["easy"] * 2
    ids = ["h"] * 4 + ["e"] * 2

    def pushes(profile: str):
        batch = compute_batch_rewards(
            trajectories=rows, correct=[False] * 4 + [True] * 2, group_ids=ids, profile=profile
        )
        return first_turn_pushes([batch], [labels])

    # every reward in the hard group is 0: A_seq is 0 and only A_turn moves the decision
    # all turns: the batch's 8 returns (two failed calls, six turns that cannot fail)
    values = np.array([-0.5, 0.0, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0])
    mu, sigma = values.mean(), values.std()
    all_turns = pushes("paper-all-turns")["hard"]
    assert (all_turns.n, all_turns.p_call, all_turns.delta_seq) == (4, 0.5, 0.0)
    assert all_turns.delta_turn == pytest.approx(
        (-0.5 - mu) / sigma - (0.0 - mu) / sigma
    )  # −2.65: a tax
    assert all_turns.push == pytest.approx(0.25 * all_turns.delta_turn)
    # call turns: the two failed calls are the statistics; constant, so A_turn is 0: no tax
    call_turns = pushes("paper")["hard"]
    assert (call_turns.delta_seq, call_turns.delta_turn, call_turns.push) == (0.0, 0.0, 0.0)
    easy_push = pushes("paper")["easy"]
    assert easy_push.p_call == 0.0 and math.isnan(easy_push.delta) and math.isnan(easy_push.push)
    with pytest.raises(ValueError, match="labels"):
        first_turn_pushes(
            [compute_batch_rewards(trajectories=rows, correct=[False] * 6, group_ids=ids)],
            [labels[:2]],
        )
