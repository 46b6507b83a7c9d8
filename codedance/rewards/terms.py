"""Reward terms: keyword-only, pure, one value per trajectory of one GRPO group.

Every term has the signature ``term(*, trajectories, correct, domain, profile)`` and returns a
tuple of floats aligned with ``trajectories`` (one prompt's G rollouts; the tool terms need the
group's accuracy). ``correct`` are the graded verdicts (`codedance.grading`), so no term does I/O.
The term's name is its ``__name__``; its weight is ``profile.weight(<key>)`` with key
``accuracy``, ``format`` or ``tool``. Errors raise: a length mismatch or an empty group is never
silently a 0.

Two rules of the training rewards that evaluation does not share: an answer outside ``<answer>``
tags earns no R_acc (it is a format error too: the rollout protocol requires the tags, and the
release's reward reads only them), and under ``limit_note_as_response`` (the ``release``
profile) the turn-limit note is read as the release's scorer reads it: one more tool response
whose ``<think></think><answer></answer>`` count among the tags. On general data its empty
answer is the first one, so R_acc is 0, and a tagged answer after it is a second answer (a
format error) while none is not; on math data the last answer after the last ``</think>`` is
graded, so an answer after the note counts and none leaves the note's empty one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from codedance.parsing import FormatReason, tagged_answer
from codedance.rewards.core import difficulty_scale, sequence_tool_reward
from codedance.rewards.profiles import RewardProfile
from codedance.rewards.trajectory import (
    assistant_texts,
    call_stats,
    has_tagged_answer,
    hit_turn_limit,
    images_returned,
    trajectory_format_errors,
)
from codedance.types import Trajectory


def _check(trajectories: Sequence[Trajectory], correct: Sequence[bool]) -> None:
    if len(trajectories) == 0:
        raise ValueError("a reward group needs at least one trajectory")
    if len(trajectories) != len(correct):
        raise ValueError(f"{len(trajectories)} trajectories but {len(correct)} verdicts")


def _note(trajectory: Trajectory, profile: RewardProfile) -> bool:
    """Whether the turn-limit note is read as a tool response for this trajectory."""
    return profile.limit_note_as_response and hit_turn_limit(trajectory)


def _graded(trajectory: Trajectory, domain: str, profile: RewardProfile) -> bool:
    """Whether the answer the scorer reads is the model's own tagged answer."""
    if not has_tagged_answer(trajectory, domain=domain):
        return False
    if not _note(trajectory, profile):
        return True
    if domain == "general":
        return False  # the note's empty answer comes first
    own = tagged_answer(assistant_texts(trajectory), domain=domain)
    return tagged_answer(assistant_texts(trajectory, limit_note=True), domain=domain) == own


def accuracy(
    *,
    trajectories: Sequence[Trajectory],
    correct: Sequence[bool],
    domain: str,
    profile: RewardProfile,
) -> tuple[float, ...]:
    """R_acc = acc_scale · 1[correct]; 0 without a tagged answer, 0 when the answer is ≥ 1000
    characters (general data, ``long_answer_zeroes_accuracy``: the release's guard against judge
    hacking), 0 when the note's empty answer is the one read (``limit_note_as_response``).

    >>> from codedance.rewards.profiles import get_profile
    >>> from codedance.types import StopReason, Trajectory, Turn
    >>> t = Trajectory("q", (Turn("<think>.</think><answer>4</answer>"),), StopReason.ANSWERED)
    >>> accuracy(trajectories=[t, t], correct=[True, False], domain="math",
    ...          profile=get_profile("paper"))
    (1.2, 0.0)
    """
    _check(trajectories, correct)
    scale = profile.acc_scale(domain)
    values = []
    long = FormatReason.LONG_ANSWER.value
    for trajectory, ok in zip(trajectories, correct, strict=True):
        ok = ok and _graded(trajectory, domain, profile)
        if ok and profile.long_answer_zeroes_accuracy and domain == "general":
            ok = long not in trajectory_format_errors(
                trajectory, domain=domain, limit_note=_note(trajectory, profile)
            )
        values.append(scale if ok else 0.0)
    return tuple(values)


def format_penalty(
    *,
    trajectories: Sequence[Trajectory],
    correct: Sequence[bool],
    domain: str,
    profile: RewardProfile,
) -> tuple[float, ...]:
    """R_format = −penalty on a format error (`trajectory_format_errors`; the turn-limit note's
    tags counted under ``limit_note_as_response``), else 0.

    >>> from codedance.rewards.profiles import get_profile
    >>> from codedance.types import StopReason, Trajectory, Turn
    >>> bad = Trajectory("q", (Turn("<think>no answer</think>"),), StopReason.MAX_TURNS)
    >>> format_penalty(trajectories=[bad], correct=[False], domain="general",
    ...                profile=get_profile("paper"))
    (-0.2,)
    """
    _check(trajectories, correct)
    penalty = profile.format_penalty(domain)
    return tuple(
        -penalty
        if trajectory_format_errors(
            t,
            domain=domain,
            use_turn_verdicts=profile.use_turn_verdicts,
            limit_note=_note(t, profile),
        )
        else 0.0
        for t in trajectories
    )


def group_mu(
    *,
    trajectories: Sequence[Trajectory],
    correct: Sequence[bool],
    domain: str,
    profile: RewardProfile,
) -> float:
    """μ of the group: mean of 1[R_acc > 0] (paper) or mean of R_acc + R_format (release)."""
    acc = accuracy(trajectories=trajectories, correct=correct, domain=domain, profile=profile)
    if profile.mu_source == "accuracy":
        return float(np.mean([a > 0 for a in acc]))
    fmt = format_penalty(trajectories=trajectories, correct=correct, domain=domain, profile=profile)
    return float(np.mean(np.add(acc, fmt)))


def sequence_tool(
    *,
    trajectories: Sequence[Trajectory],
    correct: Sequence[bool],
    domain: str,
    profile: RewardProfile,
) -> tuple[float, ...]:
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
        stats = call_stats(trajectory, limit_note=_note(trajectory, profile))
        values.append(
            sequence_tool_reward(
                a > 0,
                stats.n_success,
                stats.n_total,
                mu,
                gamma=profile.gamma,
                delta=profile.delta,
                prefactors=profile.prefactors(domain),
                form=profile.form,
            )
        )
    return tuple(values)


def deepeyes_tool(
    *,
    trajectories: Sequence[Trajectory],
    correct: Sequence[bool],
    domain: str,
    profile: RewardProfile,
) -> tuple[float, ...]:
    """DeepEyes' bonus: ``deepeyes_bonus(domain)`` when the answer is correct and an image came
    back to the model (DeepEyes counts the images in the response; a call that only printed
    pays nothing). Its math scorer has no bonus (``deepeyes_bonus_math`` 0).

    >>> from codedance.rewards.profiles import get_profile
    >>> from codedance.types import ExecResult, ExecStatus, Image, StopReason, Trajectory, Turn
    >>> shown = (Image(png=b"", origin="turn:0:0"),)
    >>> printed = Turn("<code>x</code>", result=ExecResult(ExecStatus.OK))
    >>> cropped = Turn("<code>x</code>", result=ExecResult(ExecStatus.OK), feedback_images=shown)
    >>> fin = Turn("<answer>4</answer>")
    >>> text, image = (Trajectory("q", (c, fin), StopReason.ANSWERED) for c in (printed, cropped))
    >>> deepeyes_tool(trajectories=[text, image, image], correct=[True, True, False],
    ...               domain="general", profile=get_profile("deepeyes"))
    (0.0, 1.2, 0.0)
    """
    acc = accuracy(trajectories=trajectories, correct=correct, domain=domain, profile=profile)
    bonus = profile.deepeyes_bonus(domain)
    return tuple(
        bonus if a > 0 and images_returned(t) > 0 else 0.0
        for t, a in zip(trajectories, acc, strict=True)
    )


def no_tool(
    *,
    trajectories: Sequence[Trajectory],
    correct: Sequence[bool],
    domain: str,
    profile: RewardProfile,
) -> tuple[float, ...]:
    """No tool term (outcome-only GRPO): 0 for every trajectory."""
    _check(trajectories, correct)
    return tuple(0.0 for _ in trajectories)


TOOL_TERMS = {
    "bat": sequence_tool,
    "release": sequence_tool,
    "deepeyes": deepeyes_tool,
    "none": no_tool,
}


def mean_difficulty(mu: float, profile: RewardProfile) -> float:
    """d(μ) under the profile's settings (for logging)."""
    return float(difficulty_scale(mu, profile.gamma, profile.delta, form=profile.form))
