"""Reward terms: keyword-only, pure, one value per trajectory of one GRPO group.

Every term has the signature ``term(*, trajectories, correct, domain, profile)`` and returns a
tuple of floats aligned with ``trajectories`` (one prompt's G rollouts; the tool terms need the
group's accuracy). ``correct`` are the graded verdicts (`codedance.grading`), so no term does I/O.
The term's name is its ``__name__``; its weight is ``profile.weight(<key>)`` with key
``accuracy``, ``format`` or ``tool``. Errors raise: a length mismatch or an empty group is never
silently a 0.

Two rules of the training rewards that evaluation does not share: an answer outside ``<answer>``
tags earns no R_acc (it is a format error too: the rollout protocol requires the tags, and the
release's reward reads only them), and under ``limit_note_voids_answer`` (the ``release``
profile, general data) a trajectory whose feedback carried the turn-limit note gets R_acc 0 and
the format penalty, as the release's scorer does when it reads the note's empty
``<answer></answer>`` first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from codedance.parsing import FormatReason
from codedance.rewards.core import difficulty_scale, sequence_tool_reward
from codedance.rewards.profiles import RewardProfile
from codedance.rewards.trajectory import (
    call_stats,
    has_tagged_answer,
    hit_turn_limit,
    trajectory_format_errors,
)
from codedance.types import Trajectory


def _check(trajectories: Sequence[Trajectory], correct: Sequence[bool]) -> None:
    if len(trajectories) == 0:
        raise ValueError("a reward group needs at least one trajectory")
    if len(trajectories) != len(correct):
        raise ValueError(f"{len(trajectories)} trajectories but {len(correct)} verdicts")


def _voided(trajectory: Trajectory, domain: str, profile: RewardProfile) -> bool:
    return profile.limit_note_voids_answer and domain == "general" and hit_turn_limit(trajectory)


def accuracy(*, trajectories: Sequence[Trajectory], correct: Sequence[bool], domain: str,
             profile: RewardProfile) -> tuple[float, ...]:
    """R_acc = acc_scale · 1[correct]; 0 without a tagged answer, 0 when the answer is ≥ 1000
    characters (general data, ``long_answer_zeroes_accuracy``: the release's guard against judge
    hacking), 0 after the turn-limit note under ``limit_note_voids_answer``.

    >>> from codedance.rewards.profiles import get_profile
    >>> from codedance.types import StopReason, Trajectory, Turn
    >>> t = Trajectory("q", (Turn("<think>.</think><answer>4</answer>"),), StopReason.ANSWERED)
    >>> accuracy(trajectories=[t, t], correct=[True, False], domain="math", profile=get_profile("paper"))
    (1.2, 0.0)
    """
    _check(trajectories, correct)
    scale = profile.acc_scale(domain)
    values = []
    long = FormatReason.LONG_ANSWER.value
    for trajectory, ok in zip(trajectories, correct, strict=True):
        ok = ok and has_tagged_answer(trajectory, domain=domain) and not _voided(trajectory, domain, profile)
        if ok and profile.long_answer_zeroes_accuracy and domain == "general":
            ok = long not in trajectory_format_errors(trajectory, domain=domain)
        values.append(scale if ok else 0.0)
    return tuple(values)


def format_penalty(*, trajectories: Sequence[Trajectory], correct: Sequence[bool], domain: str,
                   profile: RewardProfile) -> tuple[float, ...]:
    """R_format = −penalty on a format error (`trajectory_format_errors`, or the turn-limit note
    under ``limit_note_voids_answer``), else 0.

    >>> from codedance.rewards.profiles import get_profile
    >>> from codedance.types import StopReason, Trajectory, Turn
    >>> bad = Trajectory("q", (Turn("<think>no answer</think>"),), StopReason.MAX_TURNS)
    >>> format_penalty(trajectories=[bad], correct=[False], domain="general", profile=get_profile("paper"))
    (-0.2,)
    """
    _check(trajectories, correct)
    penalty = profile.format_penalty(domain)
    return tuple(
        -penalty if _voided(t, domain, profile) or trajectory_format_errors(
            t, domain=domain, use_turn_verdicts=profile.use_turn_verdicts) else 0.0
        for t in trajectories)


def group_mu(*, trajectories: Sequence[Trajectory], correct: Sequence[bool], domain: str,
             profile: RewardProfile) -> float:
    """μ of the group: mean of 1[R_acc > 0] (paper) or mean of R_acc + R_format (release)."""
    acc = accuracy(trajectories=trajectories, correct=correct, domain=domain, profile=profile)
    if profile.mu_source == "accuracy":
        return float(np.mean([a > 0 for a in acc]))
    fmt = format_penalty(trajectories=trajectories, correct=correct, domain=domain, profile=profile)
    return float(np.mean(np.add(acc, fmt)))


def sequence_tool(*, trajectories: Sequence[Trajectory], correct: Sequence[bool], domain: str,
                  profile: RewardProfile) -> tuple[float, ...]:
    """R_seq (paper Eq. 1 with 0.5; the release's variant with its profile's settings):
    prefactor(1[R_acc > 0]) · d(μ) · N_succ/N_total, 0 for a trajectory without tool calls.

    >>> from codedance.rewards.profiles import get_profile
    >>> from codedance.types import ExecResult, ExecStatus, StopReason, Trajectory, Turn
    >>> call = Turn("<think>.</think><code>x</code>", result=ExecResult(ExecStatus.OK))
    >>> fin = Turn("<think>.</think><answer>4</answer>")
    >>> tool = Trajectory("q", (call, fin), StopReason.ANSWERED)
    >>> plain = Trajectory("q", (fin,), StopReason.ANSWERED)
    >>> r = sequence_tool(trajectories=[tool, plain], correct=[True, False], domain="general",
    ...                   profile=get_profile("paper"))
    >>> [round(x, 6) for x in r]     # μ = 0.5: d = 0.3; 1.0 · 0.3 · 1/1, and no calls → 0
    [0.3, 0.0]
    """
    acc = accuracy(trajectories=trajectories, correct=correct, domain=domain, profile=profile)
    mu = group_mu(trajectories=trajectories, correct=correct, domain=domain, profile=profile)
    mu = float(mu)
    values = []
    for trajectory, a in zip(trajectories, acc, strict=True):
        stats = call_stats(trajectory)
        values.append(sequence_tool_reward(
            a > 0, stats.n_success, stats.n_total, mu, gamma=profile.gamma, delta=profile.delta,
            prefactors=profile.prefactors(domain), form=profile.form))
    return tuple(values)


def deepeyes_tool(*, trajectories: Sequence[Trajectory], correct: Sequence[bool], domain: str,
                  profile: RewardProfile) -> tuple[float, ...]:
    """DeepEyes' bonus: ``deepeyes_bonus`` when the answer is correct and a tool call succeeded
    (DeepEyes pays it when the tool returned an image to a correct rollout; a failed call pays
    nothing).

    >>> from codedance.rewards.profiles import get_profile
    >>> from codedance.types import ExecResult, ExecStatus, StopReason, Trajectory, Turn
    >>> bad, good = (Turn("<code>x</code>", result=ExecResult(s)) for s in (ExecStatus.ERROR, ExecStatus.OK))
    >>> fin = Turn("<answer>4</answer>")
    >>> failed, ok = (Trajectory("q", (c, fin), StopReason.ANSWERED) for c in (bad, good))
    >>> deepeyes_tool(trajectories=[failed, ok, ok], correct=[True, True, False], domain="general",
    ...               profile=get_profile("deepeyes"))
    (0.0, 1.2, 0.0)
    """
    acc = accuracy(trajectories=trajectories, correct=correct, domain=domain, profile=profile)
    return tuple(profile.deepeyes_bonus if a > 0 and call_stats(t).n_success > 0 else 0.0
                 for t, a in zip(trajectories, acc, strict=True))


def no_tool(*, trajectories: Sequence[Trajectory], correct: Sequence[bool], domain: str,
            profile: RewardProfile) -> tuple[float, ...]:
    """No tool term (outcome-only GRPO): 0 for every trajectory."""
    _check(trajectories, correct)
    return tuple(0.0 for _ in trajectories)


TOOL_TERMS = {"bat": sequence_tool, "release": sequence_tool, "deepeyes": deepeyes_tool,
              "none": no_tool}


def mean_difficulty(mu: float, profile: RewardProfile) -> float:
    """d(μ) under the profile's settings (for logging)."""
    return float(difficulty_scale(mu, profile.gamma, profile.delta, form=profile.form))
