"""One definition of a tool call, read alike by the rewards, the eval statistics, the trainer's
metrics and the verl metrics.

The episode below reaches the turn limit: the turn whose feedback carries the "Turn limit
reached" note ran its code (an error), so it is a call, and a failed one. Every reader must say
2 calls, 1 success, and the rewards must charge its −0.5 turn penalty.
"""

from __future__ import annotations

import pytest

from codedance.eval.agent_stats import agent_stats
from codedance.policy import ScriptedPolicy
from codedance.rewards import call_stats, compute_group_rewards
from codedance.rollout import EpisodeConfig, run_episode
from codedance.runs.stats import AgentStats
from codedance.train.metrics import rollout_metrics
from codedance.types import CallOutcome, ExecResult, ExecStatus, StopReason, Task, Trajectory, Turn

pytestmark = pytest.mark.tier("unit")

CODE = "<think>look</think><code>\n```python\nprint(1)\n```\n</code>"


class Runner:
    """Returns `ok` for the first snippet and an error for the second (no sandbox needed: the
    subject here is counting, not execution)."""

    def __init__(self) -> None:
        self.results = [ExecResult(ExecStatus.OK, stdout="1"), ExecResult(ExecStatus.ERROR)]

    def run(self, code: str) -> ExecResult:
        return self.results.pop(0)

    async def arun(self, code: str) -> ExecResult:
        return self.run(code)


@pytest.fixture(scope="module")
def trajectory() -> Trajectory:
    policy = ScriptedPolicy([CODE, CODE, "<think>so</think><answer>1</answer>"])
    t = run_episode(policy, Task("t", "q", (), "1"), Runner(), EpisodeConfig(max_turns=3))
    assert t.stop_reason is StopReason.ANSWERED
    assert [turn.feedback_has_turn_limit for turn in t.turns] == [False, True, False]
    return t


def test_types_define_the_call(trajectory: Trajectory) -> None:
    assert [turn.call_outcome for turn in trajectory.turns] == [
        CallOutcome.OK,
        CallOutcome.FAILED,
        CallOutcome.NONE,
    ]
    assert (trajectory.n_calls, trajectory.n_successful_calls, len(trajectory.tool_calls)) == (
        2,
        1,
        2,
    )


def test_rewards_count_the_call_after_the_note(trajectory: Trajectory) -> None:
    stats = call_stats(trajectory)
    assert (stats.n_total, stats.n_success) == (2, 1)
    (reward,) = compute_group_rewards(trajectories=[trajectory], correct=[True])
    assert reward.turn_returns == pytest.approx((0.2 * -0.5, -0.5, 0.0))
    assert dict(reward.metrics)["n_total"] == 2.0


def test_statistics_agree(trajectory: Trajectory) -> None:
    shared = AgentStats.of([trajectory])
    assert (shared.calls, shared.successful_calls, shared.exec_success) == (2, 1, 0.5)
    ev = agent_stats([trajectory])
    assert (ev.calls, ev.exec_success_per_call, ev.exec_success_per_sample) == (2, 0.5, 0.5)
    train = rollout_metrics([trajectory], [Task("t", "q", (), "1")], [True])
    assert (train["calls"], train["exec_success"]) == (2.0, 0.5)
    direct = Trajectory("d", (Turn("x"),), StopReason.ANSWERED)
    mixed = rollout_metrics([trajectory, direct], [Task("t", "q", (), "1")] * 2, [False, True])
    assert (mixed["accuracy"], mixed["accuracy_with_tool"]) == (0.5, 0.0)  # only the calling one
    assert AgentStats.of([Trajectory("u", (Turn("x"),), StopReason.ANSWERED)]).exec_success is None


@pytest.mark.tier("verl")
def test_verl_metrics_agree(trajectory: Trajectory) -> None:
    pytest.importorskip("verl")
    from codedance.integrations.verl.advantage import _metrics
    from codedance.integrations.verl.record import RolloutRecord, TurnRecord
    from codedance.integrations.verl.reward import group_rewards

    turns = tuple(
        TurnRecord(
            t.text,
            (3 * m, 3 * m + 2),
            status=t.result.status.value if t.result else None,
            injected_turn_limit=t.feedback_has_turn_limit,
        )
        for m, t in enumerate(trajectory.turns)
    )
    record = RolloutRecord("t", turns, trajectory.stop_reason.value, trajectory.answer)
    assert [t.call_outcome for t in record.trajectory().turns] == [
        t.call_outcome for t in trajectory.turns
    ]
    batch = group_rewards([record], [1.0], ["g"])
    assert batch.turn_returns[0].tolist() == pytest.approx([-0.1, -0.5, 0.0])
    metrics = _metrics(batch, [record])
    assert metrics["codedance/calls_per_traj"] == 2.0 and metrics["codedance/exec_success"] == 0.5
