"""Rewards of whole GRPO groups and batches: `RewardBreakdown`s plus what advantages need.

``total = w_acc·R_acc + w_format·R_format + w_tool·R_tool`` (the profile's weights); R_turn is
not a scalar of the trajectory: its per-turn returns go to ``RewardBreakdown.turn_returns`` and
enter the advantage (`codedance.advantages`). Log-only metrics: ``mu`` (the group's μ), ``d``,
``n_success``, ``n_total``, ``format_error``, ``correct``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from codedance.parsing import DOMAINS
from codedance.rewards.core import turn_returns
from codedance.rewards.profiles import RewardProfile, get_profile
from codedance.rewards.terms import (
    TOOL_TERMS,
    accuracy,
    format_penalty,
    group_mu,
    mean_difficulty,
)
from codedance.rewards.trajectory import call_stats, hit_turn_limit
from codedance.types import RewardBreakdown, Trajectory


def compute_group_rewards(
    *,
    trajectories: Sequence[Trajectory],
    correct: Sequence[bool],
    profile: str | RewardProfile = "paper",
    domain: str = "general",
) -> tuple[RewardBreakdown, ...]:
    """Rewards of one prompt's G rollouts (all with the same ``task_id``).

    >>> from codedance.types import ExecResult, ExecStatus, StopReason, Trajectory, Turn
    >>> call = Turn("<think>.</think><code>c</code>", result=ExecResult(ExecStatus.OK))
    >>> fin = Turn("<think>.</think><answer>7</answer>")
    >>> g = [Trajectory("q", turns, StopReason.ANSWERED) for turns in ((call, fin), (fin,))]
    >>> a, b = compute_group_rewards(trajectories=g, correct=[True, False])
    >>> round(a.total, 6), a.turn_returns, b.total   # 1 + 0 + 1.0·d(0.5)·1 = 1.3
    (1.3, (0.0, 0.0), 0.0)
    """
    prof = get_profile(profile)
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    ids = {t.task_id for t in trajectories}
    if len(ids) > 1:
        raise ValueError(f"a GRPO group holds rollouts of one task, got task ids {sorted(ids)}")
    kw = {"trajectories": trajectories, "correct": correct, "domain": domain, "profile": prof}
    acc = accuracy(**kw)  # type: ignore[arg-type]
    fmt = format_penalty(**kw)  # type: ignore[arg-type]
    tool = TOOL_TERMS[prof.tool_term](**kw)  # type: ignore[arg-type]
    mu = group_mu(**kw)  # type: ignore[arg-type]
    d = mean_difficulty(mu, prof)
    w_acc, w_fmt, w_tool = prof.weight("accuracy"), prof.weight("format"), prof.weight("tool")
    out = []
    for trajectory, ok, a, f, s in zip(trajectories, correct, acc, fmt, tool, strict=True):
        stats = call_stats(trajectory)
        returns = turn_returns(
            stats.failed(empty_is_failure=prof.empty_call_is_failure),
            beta=prof.beta,
            penalty=prof.turn_penalty,
        )
        metrics = (
            ("mu", mu),
            ("d", d),
            ("n_success", float(stats.n_success)),
            ("n_total", float(stats.n_total)),
            ("format_error", float(f < 0)),
            ("correct", float(bool(ok))),
        )
        out.append(
            RewardBreakdown(
                accuracy=a,
                format=f,
                sequence_tool=s,
                total=w_acc * a + w_fmt * f + w_tool * s,
                turn_returns=tuple(float(x) for x in returns),
                metrics=metrics,
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class BatchRewards:
    """A batch of B trajectories in G-sized groups, ready for `codedance.advantages`.

    ``rewards``: (B,) totals; ``group_ids``: (B,) group labels; ``turn_returns[i]``:
    (n_turns_i,) per-turn returns; ``turn_is_call[i]``: (n_turns_i,) bool, turn m was a call as
    the profile reads calls (under ``limit_note_as_response`` the turn after the turn-limit note
    is one: the release gives it the note's step value).
    """

    breakdowns: tuple[RewardBreakdown, ...]
    rewards: np.ndarray
    group_ids: np.ndarray
    turn_returns: tuple[np.ndarray, ...]
    turn_is_call: tuple[np.ndarray, ...]
    profile: RewardProfile


def compute_batch_rewards(
    *,
    trajectories: Sequence[Trajectory],
    correct: Sequence[bool],
    group_ids: Sequence[Hashable],
    domains: Sequence[str] | str = "general",
    profile: str | RewardProfile = "paper",
) -> BatchRewards:
    """Rewards of a batch: trajectories are grouped by ``group_ids`` (one id per prompt; the
    order of the batch is kept). ``domains`` is one domain for all or one per trajectory."""
    prof = get_profile(profile)
    n = len(trajectories)
    if len(correct) != n or len(group_ids) != n:
        raise ValueError(f"{n} trajectories, {len(correct)} verdicts, {len(group_ids)} group ids")
    doms = [domains] * n if isinstance(domains, str) else list(domains)
    if len(doms) != n:
        raise ValueError(f"{n} trajectories but {len(doms)} domains")
    members: dict[Hashable, list[int]] = {}
    for i, gid in enumerate(group_ids):
        members.setdefault(gid, []).append(i)
    breakdowns: list[RewardBreakdown | None] = [None] * n
    for gid, idx in members.items():
        if len({doms[i] for i in idx}) != 1:
            raise ValueError(f"group {gid!r} mixes domains")
        group = compute_group_rewards(
            trajectories=[trajectories[i] for i in idx],
            correct=[correct[i] for i in idx],
            profile=prof,
            domain=doms[idx[0]],
        )
        for i, b in zip(idx, group, strict=True):
            breakdowns[i] = b
    done = tuple(b for b in breakdowns if b is not None)
    return BatchRewards(
        breakdowns=done,
        rewards=np.array([b.total for b in done], dtype=np.float64),
        group_ids=np.asarray(list(group_ids), dtype=object),
        turn_returns=tuple(np.asarray(b.turn_returns, dtype=np.float64) for b in done),
        turn_is_call=tuple(
            np.asarray(
                call_stats(t, limit_note=prof.limit_note_as_response and hit_turn_limit(t)).is_call,
                dtype=bool,
            )
            for t in trajectories
        ),
        profile=prof,
    )
