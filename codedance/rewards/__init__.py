"""Rewards for balanced, adaptive tool calling (R_BAT) and its baselines; pure numpy, no torch.

Public helpers (a contract): `difficulty_scale(mu_acc, gamma=4.0, delta=0.2)`,
`sequence_tool_reward(correct, n_success, n_total, mu_acc, ...)`,
`turn_returns(failed, beta=0.2, penalty=-0.5)`. Group and batch computation:
`compute_group_rewards`, `compute_batch_rewards`; profiles: `get_profile` / `PROFILES`
(``paper`` default, ``paper-all-turns``, ``release``, ``outcome-only``, ``deepeyes`` and the
named ablations `ABLATIONS`). What a tool call is lives in `codedance.types.CallOutcome`; the format
rule in `codedance.parsing.format_errors`. See docs/rewards.md.
"""

from codedance.parsing import format_errors
from codedance.rewards.core import (
    difficulty_scale,
    sequence_tool_reward,
    sign_flip_mu,
    turn_returns,
)
from codedance.rewards.group import BatchRewards, compute_batch_rewards, compute_group_rewards
from codedance.rewards.profiles import ABLATIONS, PROFILES, RewardProfile, get_profile
from codedance.rewards.terms import accuracy, deepeyes_tool, format_penalty, no_tool, sequence_tool
from codedance.rewards.trajectory import CallStats, call_stats, trajectory_format_errors

__all__ = [
    "ABLATIONS",
    "PROFILES",
    "BatchRewards",
    "CallStats",
    "RewardProfile",
    "accuracy",
    "call_stats",
    "compute_batch_rewards",
    "compute_group_rewards",
    "deepeyes_tool",
    "difficulty_scale",
    "format_errors",
    "format_penalty",
    "get_profile",
    "no_tool",
    "sequence_tool",
    "sequence_tool_reward",
    "sign_flip_mu",
    "trajectory_format_errors",
    "turn_returns",
]
