"""Rewards against numbers computed by hand from the paper's formulas (docs/rewards.md)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from codedance.parsing import FormatReason
from codedance.rewards import (
    ABLATIONS,
    PROFILES,
    call_stats,
    compute_batch_rewards,
    compute_group_rewards,
    difficulty_scale,
    format_errors,
    get_profile,
    sequence_tool_reward,
    sign_flip_mu,
    turn_returns,
)
from codedance.types import ExecResult, ExecStatus, Image, StopReason, Trajectory, Turn

pytestmark = pytest.mark.tier("unit")

OK = ExecResult(ExecStatus.OK, stdout="7")
PIXEL = Image(png=b"", origin="turn:0:0")
EMPTY = ExecResult(ExecStatus.OK, executed_nothing=True)
CODE = "<think>crop</think><code>\n```python\nx = 1\n```\n</code>"
ANSWER = Turn("<think>so</think><answer>7</answer>")


def sig(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def traj(*results: ExecResult | None, answer: Turn | None = ANSWER, task: str = "q") -> Trajectory:
    turns = tuple(Turn(CODE, result=r) for r in results) + ((answer,) if answer else ())
    stop = StopReason.ANSWERED if answer else StopReason.MAX_TURNS
    return Trajectory(task, turns, stop)


def test_difficulty_scale_by_hand() -> None:
    for mu in (0.0, 0.125, 0.5, 0.875, 1.0):
        assert difficulty_scale(mu) == pytest.approx(sig(4 * (0.5 - mu)) - 0.2, abs=1e-12)
        assert difficulty_scale(mu, 5.0, 0.0) == pytest.approx(sig(5 * (0.5 - mu)), abs=1e-12)
        tanh_form = (1 + math.tanh(4 * (0.5 - mu))) / 2 - 0.2
        assert difficulty_scale(mu, form="tanh") == pytest.approx(tanh_form, abs=1e-12)
    arr = difficulty_scale(np.array([0.0, 1.0]))
    assert arr.shape == (2,) and arr[0] == pytest.approx(sig(2) - 0.2)
    with pytest.raises(ValueError):
        difficulty_scale(float("nan"))
    with pytest.raises(ValueError):
        difficulty_scale(0.5, form="cosine")


def test_sign_flip() -> None:
    mu_star = 0.5 + math.log(0.8 / 0.2) / 4  # paper Appendix 8.2.2
    assert sign_flip_mu() == pytest.approx(mu_star)
    assert difficulty_scale(mu_star) == pytest.approx(0.0, abs=1e-12)
    assert difficulty_scale(mu_star - 1e-3) > 0 > difficulty_scale(mu_star + 1e-3)
    assert (
        difficulty_scale(7 / 8) < 0 < difficulty_scale(6 / 8)
    )  # G = 8: only 7 or 8 right suppress
    with pytest.raises(ValueError):
        sign_flip_mu(delta=0.0)


def test_difficulty_scale_bounds_and_monotonic_on_a_grid() -> None:
    for gamma in (0.5, 4.0, 5.0, 8.0):
        for delta in (0.0, 0.2, 0.5):
            mu = np.linspace(-2, 3, 501)
            d = difficulty_scale(mu, gamma, delta)
            assert np.all(d > -delta - 1e-15) and np.all(d < 1 - delta + 1e-15)
            assert np.all(np.diff(d) < 0)


def test_sequence_tool_reward_by_hand() -> None:
    d0 = sig(2) - 0.2  # μ = 0
    assert sequence_tool_reward(True, 3, 4, 0.0) == pytest.approx(1.0 * d0 * 0.75)
    assert sequence_tool_reward(False, 3, 4, 0.0) == pytest.approx(0.5 * d0 * 0.75)
    d1 = sig(-2) - 0.2  # μ = 1: negative, suppresses tool use on easy prompts
    assert sequence_tool_reward(True, 1, 1, 1.0) == pytest.approx(d1) and d1 < 0
    assert sequence_tool_reward(
        True, 1, 2, 0.25, prefactors=(0.5, 1.5), form="tanh"
    ) == pytest.approx(1.5 * ((1 + math.tanh(4 * 0.25)) / 2 - 0.2) * 0.5)
    assert (
        sequence_tool_reward(True, 0, 0, 0.0) == 0.0
        and sequence_tool_reward(False, 0, 0, 1.0) == 0.0
    )
    for bad in ((3, 2), (-1, 2), (0, -1)):
        with pytest.raises(ValueError):
            sequence_tool_reward(True, bad[0], bad[1], 0.5)


def test_turn_returns_by_hand() -> None:
    beta, p = 0.2, -0.5
    got = turn_returns([True, False, True, False])
    r3 = 0.0
    r2 = p + beta * r3
    r1 = 0.0 + beta * r2
    r0 = p + beta * r1
    assert got.tolist() == pytest.approx([r0, r1, r2, r3])
    assert turn_returns([True, True], beta=0.5, penalty=-1.0).tolist() == [-1.5, -1.0]
    assert turn_returns([]).shape == (0,)


def test_call_counting_rules() -> None:
    t = traj(
        OK,
        ExecResult(ExecStatus.ERROR),
        EMPTY,
        ExecResult(ExecStatus.OOM),
        ExecResult(ExecStatus.REFUSED),
        ExecResult(ExecStatus.CRASHED),
    )
    # the turn whose feedback carries the turn-limit note ran its code: it is a call
    limit = Turn(CODE, result=OK, feedback_has_turn_limit=True)
    t = replace(t, turns=t.turns[:-1] + (limit, ANSWER))
    s = call_stats(t)
    assert (s.n_success, s.n_total) == (2, 7)
    assert s.failed() == (False, True, True, True, True, True, False, False)
    assert s.failed(empty_is_failure=False)[2] is False
    # an "Error" in stdout of a successful call is not a failure (no substring tests)
    assert call_stats(traj(ExecResult(ExecStatus.OK, stdout="ValueError: fine"))).n_success == 1


def test_format_rules() -> None:
    assert (
        format_errors(["<think>a</think><code>c</code>", "<think>b</think><answer>1</answer>"])
        == ()
    )
    assert format_errors(["<think>a</think>"]) == (FormatReason.NO_ANSWER.value,)
    assert format_errors(["</answer><answer>"]) == (FormatReason.NO_ANSWER.value,)
    assert format_errors(["<answer>1</answer>"], domain="math") == ()
    assert format_errors(["<think>a</think><answer>1</answer> tool_call"], domain="math") == (
        FormatReason.TOOL_CALL_AFTER_THINK.value,
    )
    with pytest.raises(ValueError):
        format_errors([""], domain="poetry")


def group4() -> list[Trajectory]:
    return [traj(OK, OK), traj(), traj(ExecResult(ExecStatus.ERROR), answer=None), traj(OK)]


def test_paper_profile_group_by_hand() -> None:
    out = compute_group_rewards(trajectories=group4(), correct=[True, True, False, False])
    d = sig(4 * (0.5 - 0.5)) - 0.2  # μ_acc = 2/4
    assert [b.accuracy for b in out] == [1.0, 1.0, 0.0, 0.0]
    assert [b.format for b in out] == [0.0, 0.0, -0.2, 0.0]  # no answer tag: format error
    assert [b.sequence_tool for b in out] == pytest.approx([1.0 * d, 0.0, 0.0, 0.5 * d])
    assert [b.total for b in out] == pytest.approx([1 + d, 1.0, -0.2, 0.5 * d])
    assert out[2].turn_returns == (-0.5,)  # one failed call, no answer turn
    assert out[0].turn_returns == (0.0, 0.0, 0.0)
    assert dict(out[0].metrics)["mu"] == 0.5 and dict(out[3].metrics)["n_total"] == 1.0


def test_release_profile_group_by_hand() -> None:
    out = compute_group_rewards(
        trajectories=group4(), correct=[True, True, False, False], profile="release"
    )
    mu = (1 + 1 - 0.2 + 0) / 4  # the group mean of the score, format penalty included
    d = (1 + math.tanh(4 * (0.5 - mu))) / 2 - 0.2
    assert [b.sequence_tool for b in out] == pytest.approx([1.5 * d, 0.0, 0.0, 0.5 * d])
    assert [b.total for b in out] == pytest.approx([1 + 1.5 * d, 1.0, -0.2, 0.5 * d])
    math_out = compute_group_rewards(
        trajectories=group4(), correct=[True, True, False, False], profile="release", domain="math"
    )
    mu_m = (1.2 + 1.2 - 0.4 + 0) / 4
    d_m = (1 + math.tanh(4 * (0.5 - mu_m))) / 2 - 0.2
    assert [b.total for b in math_out] == pytest.approx([1.2 + 2.0 * d_m, 1.2, -0.4, 1.0 * d_m])


def test_baseline_profiles() -> None:
    verdicts = [True, True, False, False]
    outcome = compute_group_rewards(trajectories=group4(), correct=verdicts, profile="outcome-only")
    assert [b.total for b in outcome] == pytest.approx([1.0, 1.0, -0.2, 0.0])
    # DeepEyes: 0.8·acc + 0.2·(−1 on a format error) + 1.2 when correct and an image came back
    deepeyes = compute_group_rewards(trajectories=group4(), correct=verdicts, profile="deepeyes")
    assert [b.total for b in deepeyes] == pytest.approx([0.8, 0.8, -0.2, 0.0])  # calls only printed
    shown = replace(
        traj(OK), turns=(replace(Turn(CODE, result=OK), feedback_images=(PIXEL,)), ANSWER)
    )
    (cropped,) = compute_group_rewards(trajectories=[shown], correct=[True], profile="deepeyes")
    assert cropped.total == pytest.approx(0.8 + 1.2)
    failed_call = traj(ExecResult(ExecStatus.ERROR))
    only_failed = compute_group_rewards(
        trajectories=[failed_call], correct=[True], profile="deepeyes"
    )
    assert only_failed[0].total == pytest.approx(0.8)  # a failed call earns no bonus
    # DeepEyes' math scorer: 1.2·acc + 0.4·(−1 on a format error), no tool bonus
    deepeyes_math = compute_group_rewards(
        trajectories=group4() + [shown],
        correct=verdicts + [True],
        profile="deepeyes",
        domain="math",
    )
    assert [b.total for b in deepeyes_math] == pytest.approx([1.2, 1.2, -0.4, 0.0, 1.2])
    paper_math = compute_group_rewards(trajectories=group4(), correct=verdicts, domain="math")
    assert [b.total for b in paper_math] == pytest.approx([1.2 + 0.3, 1.2, -0.4, 0.15])


def test_untagged_answer_earns_no_accuracy_in_training() -> None:
    boxed = Turn(r"<think>so</think>The count is \boxed{7}.")
    untagged = traj(answer=boxed)
    for profile in ("paper", "release"):
        (r,) = compute_group_rewards(trajectories=[untagged], correct=[True], profile=profile)
        assert (r.accuracy, r.format) == (0.0, -0.2)
    (math_r,) = compute_group_rewards(trajectories=[untagged], correct=[True], domain="math")
    assert (math_r.accuracy, math_r.format) == (0.0, -0.4)


def test_release_reads_the_turn_limit_note_as_a_tool_response() -> None:
    noted_call = replace(Turn(CODE, result=OK), feedback_has_turn_limit=True)
    noted = replace(traj(OK), turns=(noted_call, ANSWER))
    (release,) = compute_group_rewards(trajectories=[noted], correct=[True], profile="release")
    assert (release.accuracy, release.format) == (0.0, -0.2)  # the note's empty answer comes first
    unanswered = replace(noted, turns=(noted_call, Turn(CODE)), stop_reason=StopReason.MAX_TURNS)
    (silent,) = compute_group_rewards(trajectories=[unanswered], correct=[False], profile="release")
    assert (silent.accuracy, silent.format) == (0.0, 0.0)  # one answer pair: the note's
    (math_release,) = compute_group_rewards(
        trajectories=[noted], correct=[True], profile="release", domain="math"
    )
    assert math_release.accuracy == 1.2  # its math scorer reads the last answer: unaffected
    (math_silent,) = compute_group_rewards(
        trajectories=[unanswered], correct=[True], profile="release", domain="math"
    )
    assert (math_silent.accuracy, math_silent.format) == (
        0.0,
        -0.4,
    )  # no answer after its last </think>
    (paper,) = compute_group_rewards(trajectories=[noted], correct=[True])
    assert (paper.accuracy, paper.format) == (1.0, 0.0)
    (paper_silent,) = compute_group_rewards(trajectories=[unanswered], correct=[False])
    assert paper_silent.format == -0.2


def test_release_counts_the_note_as_one_more_successful_call() -> None:
    failed_then_noted = replace(
        traj(OK),
        turns=(
            Turn(CODE, result=ExecResult(ExecStatus.ERROR)),
            replace(Turn(CODE, result=OK), feedback_has_turn_limit=True),
            ANSWER,
        ),
    )
    plain = traj(OK)
    batch = compute_batch_rewards(
        trajectories=[failed_then_noted, plain],
        correct=[False, True],
        group_ids=["g", "g"],
        profile="release",
    )
    mu = (-0.2 + 1.0) / 2
    d = (1 + math.tanh(4 * (0.5 - mu))) / 2 - 0.2
    assert batch.breakdowns[0].sequence_tool == pytest.approx(
        0.5 * d * 2 / 3
    )  # (1 + note) / (2 + note)
    assert batch.turn_is_call[0].tolist() == [
        True,
        True,
        True,
    ]  # the answer turn holds the note's step
    assert batch.turn_is_call[1].tolist() == [True, False]
    assert dict(batch.breakdowns[0].metrics)["n_total"] == 2.0  # logged calls: the one definition
    paper = compute_batch_rewards(
        trajectories=[failed_then_noted], correct=[False], group_ids=["g"]
    )
    assert paper.turn_is_call[0].tolist() == [True, True, False]


def test_named_ablations() -> None:
    assert get_profile("paper-no-turn").turn_weight == 0.0
    assert get_profile("paper-gamma5").gamma == 5.0 and get_profile("paper-delta0").delta == 0.0
    assert set(ABLATIONS) <= set(PROFILES)


def test_delta_zero_and_weights() -> None:
    all_right = [traj(OK)] * 4
    suppressed = compute_group_rewards(trajectories=all_right, correct=[True] * 4)
    assert (
        suppressed[0].sequence_tool == pytest.approx(sig(-2) - 0.2)
        and suppressed[0].sequence_tool < 0
    )
    free = compute_group_rewards(
        trajectories=all_right, correct=[True] * 4, profile=get_profile("paper", delta=0.0)
    )
    assert free[0].sequence_tool == pytest.approx(sig(-2)) and free[0].sequence_tool > 0
    logged_only = get_profile("paper", weights=(("accuracy", 1.0), ("format", 1.0), ("tool", 0.0)))
    out = compute_group_rewards(trajectories=all_right, correct=[True] * 4, profile=logged_only)
    assert out[0].total == 1.0 and out[0].sequence_tool == pytest.approx(sig(-2) - 0.2)


def test_reward_hack_of_figure_11_earns_nothing() -> None:
    hack, honest = traj(EMPTY, EMPTY, EMPTY), traj(OK)
    out = compute_group_rewards(trajectories=[hack, honest], correct=[True, True])
    assert out[0].sequence_tool == 0.0 and out[1].sequence_tool != 0.0
    assert out[0].turn_returns[0] == pytest.approx(-0.5 - 0.2 * 0.5 - 0.04 * 0.5)


def test_long_answer_zeroes_accuracy() -> None:
    long = traj(answer=Turn("<think>.</think><answer>" + "x" * 1000 + "</answer>"))
    out = compute_group_rewards(trajectories=[long], correct=[True])
    assert (out[0].accuracy, out[0].format, out[0].total) == (0.0, -0.2, -0.2)


def test_errors_raise() -> None:
    with pytest.raises(ValueError, match="one task"):
        compute_group_rewards(trajectories=[traj(task="a"), traj(task="b")], correct=[True, True])
    with pytest.raises(ValueError, match="verdicts"):
        compute_group_rewards(trajectories=[traj()], correct=[True, False])
    with pytest.raises(ValueError, match="at least one"):
        compute_group_rewards(trajectories=[], correct=[])
    with pytest.raises(ValueError, match="unknown reward profile"):
        get_profile("ppo")
    with pytest.raises(ValueError, match="turn_scope"):
        get_profile("paper", turn_scope="some")
    with pytest.raises(ValueError, match="domain"):
        compute_group_rewards(trajectories=[traj()], correct=[True], domain="poetry")


def test_batch_keeps_order_and_groups() -> None:
    trajs = [traj(OK, task="a"), traj(task="b"), traj(task="a"), traj(OK, task="b")]
    batch = compute_batch_rewards(
        trajectories=trajs, correct=[True, False, False, True], group_ids=["a", "b", "a", "b"]
    )
    d = sig(0.0) - 0.2  # both groups have μ = 0.5
    assert batch.rewards.tolist() == pytest.approx([1 + d, 0.0, 0.0, 1 + d])
    assert [m.tolist() for m in batch.turn_is_call] == [
        [True, False],
        [False],
        [False],
        [True, False],
    ]
    with pytest.raises(ValueError, match="mixes domains"):
        compute_batch_rewards(
            trajectories=trajs,
            correct=[True] * 4,
            group_ids=["a", "b", "a", "b"],
            domains=["math", "general", "general", "general"],
        )


def test_import_does_not_pull_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, codedance.rewards, codedance.advantages, codedance.grading; "
        "print('torch' in sys.modules)"
    )
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a dev extra

    def test_properties_need_hypothesis() -> None:
        pytest.skip("hypothesis is not installed")
else:
    finite = st.floats(-50, 50, allow_nan=False)
    no_db = settings(database=None, max_examples=100)  # leave no .hypothesis/ in the work tree

    @no_db
    @given(mu=st.floats(0, 1), gamma=st.floats(0.01, 20), delta=st.floats(0, 1))
    def test_d_bounds(mu: float, gamma: float, delta: float) -> None:
        d = difficulty_scale(mu, gamma, delta)
        assert -delta <= d <= 1 - delta

    @no_db
    @given(a=finite, b=finite, gamma=st.floats(0.1, 10))
    def test_d_decreasing(a: float, b: float, gamma: float) -> None:
        lo, hi = sorted((a, b))
        assert difficulty_scale(lo, gamma) >= difficulty_scale(hi, gamma)

    @no_db
    @given(gamma=st.floats(0.5, 10), delta=st.floats(0.01, 0.99), eps=st.floats(1e-3, 0.5))
    def test_d_sign_flip(gamma: float, delta: float, eps: float) -> None:
        star = sign_flip_mu(gamma, delta)
        assert (
            difficulty_scale(star - eps, gamma, delta)
            > 0
            > difficulty_scale(star + eps, gamma, delta)
        )

    @no_db
    @given(correct=st.booleans(), mu=st.floats(0, 1))
    def test_no_calls_no_sequence_reward(correct: bool, mu: float) -> None:
        assert sequence_tool_reward(correct, 0, 0, mu) == 0.0

    @no_db
    @given(failed=st.lists(st.booleans(), max_size=8), beta=st.floats(0, 1))
    def test_turn_returns_recursion(failed: list[bool], beta: float) -> None:
        got = turn_returns(failed, beta=beta)
        expected = [
            sum(-0.5 * f * beta**k for k, f in enumerate(failed[m:])) for m in range(len(failed))
        ]
        assert got.tolist() == pytest.approx(expected, abs=1e-12)
