"""The ``release`` and ``deepeyes`` profiles against the outside scorers' own verdicts.

``fixtures/reward_verdicts.jsonl`` was recorded by executing the release's scorer
(``llm_judge_qwen_tool_step.py``, CodeDance-VL/CodeDance@62f8c6f) and DeepEyes' (``vl_agent.py``,
Visual-Agent/DeepEyes@6c5e796) on episodes rendered as their rollouts decode them
(``scripts/record_reward_verdicts.py``; the judge's replies scripted). Each episode is rebuilt
here as a `Trajectory` and scored by the profile with the grader's verdict on the model's own
answer. Agreement means:

- release: R_acc + R_format equal its ``score``; R_seq with d ≡ 1 (γ 0, δ −0.5) equals its
  ``tool_reward_component`` (prefactor · N_succ/N_total); the turns that enter the turn
  statistics and their returns equal its ``tool_step`` entries, which it lays on the assistant
  turns in order (the last entry is never normalized);
- deepeyes: the total equals its returned score.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codedance.rewards import compute_batch_rewards, get_profile
from codedance.types import ExecResult, ExecStatus, Image, StopReason, Trajectory, Turn

pytestmark = pytest.mark.tier("unit")

CASES = [
    json.loads(line)
    for line in (Path(__file__).parent / "fixtures" / "reward_verdicts.jsonl")
    .read_text(encoding="utf-8")
    .splitlines()
]


def trajectory(case: dict) -> Trajectory:
    turns = []
    for m, t in enumerate(case["turns"]):
        result = (
            ExecResult(ExecStatus(t["status"]), stdout=t.get("stdout", "")) if t["status"] else None
        )
        shown = tuple(Image(png=b"", origin=f"turn:{m}:{k}") for k in range(t.get("images", 0)))
        turns.append(
            Turn(
                t["text"],
                result=result,
                feedback_images=shown,
                feedback_has_turn_limit=bool(t.get("limit_note")),
            )
        )
    answered = "</answer>" in case["turns"][-1]["text"]
    return Trajectory("q", tuple(turns), StopReason.ANSWERED if answered else StopReason.MAX_TURNS)


def score(case: dict, profile) -> tuple:
    batch = compute_batch_rewards(
        trajectories=[trajectory(case)],
        correct=[case["correct"]],
        group_ids=["g"],
        domains=case["domain"],
        profile=profile,
    )
    return batch.breakdowns[0], batch.turn_returns[0], batch.turn_is_call[0]


def test_the_fixture_covers_both_scorers_domains_and_the_turn_limit_note():
    kinds = {(c["scorer"], c["domain"]) for c in CASES}
    assert kinds == {(s, d) for s in ("release", "deepeyes") for d in ("general", "math")}
    assert sum(any(t.get("limit_note") for t in c["turns"]) for c in CASES) >= 10
    assert sum(any(t.get("images") for t in c["turns"]) for c in CASES) >= 8


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["scorer"] == "release"], ids=lambda c: c["id"]
)
def test_release_profile_agrees_with_the_release_scorer(case):
    verdict = case["verdict"]
    reward, _, _ = score(case, "release")
    assert reward.accuracy + reward.format == pytest.approx(verdict["score"]), case["note"]
    unit_d = get_profile("release", gamma=0.0, delta=-0.5)  # d(μ) = 0.5 + 0.5 = 1 for every μ
    reward, returns, included = score(case, unit_d)
    assert reward.sequence_tool == pytest.approx(verdict["tool_reward_component"]), case["note"]
    steps = verdict["tool_step"][:-1]  # its last entry is never normalized
    assert included.tolist() == [m < len(steps) for m in range(len(returns))], case["note"]
    assert returns[included].tolist() == pytest.approx(steps[: int(included.sum())]), case["note"]


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["scorer"] == "deepeyes"], ids=lambda c: c["id"]
)
def test_deepeyes_profile_agrees_with_deepeyes_reward(case):
    reward, _, _ = score(case, "deepeyes")
    assert reward.total == pytest.approx(case["verdict"]["score"]), case["note"]
