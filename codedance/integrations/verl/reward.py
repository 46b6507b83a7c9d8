"""Rewards for verl: the per-sample part in verl's reward loop, the group part where verl sees
the whole group.

verl 0.9.1 scores each rollout alone in its reward loop (``reward.custom_reward_function``,
``path: pkg://codedance.integrations.verl.reward``, ``name: compute_score``). R_seq cannot be
computed there: it needs μ, the accuracy of the prompt's whole GRPO group. So the reward is split:

- `compute_score` (reward loop, one sample): grades the extracted answer (rules, or the LLM judge
  over an OpenAI-compatible server: ``reward_kwargs.judge_url`` / ``judge_model`` /
  ``judge_policy``), and returns ``score`` = w_acc·R_acc + w_format·R_format of the profile plus
  log-only fields (``acc``, ``format_error``, ``n_calls``, ``n_success``). verl logs this score as
  ``critic/score``; it excludes the tool term.
- `group_rewards` (advantage step, whole batch, grouped by verl's ``uid``): the full profile with
  `codedance.rewards.compute_batch_rewards` (R_acc, R_format, R_seq with the group's μ, turn
  returns), using the verdicts the reward loop stored (``reward_extra_info["correct"]``). It is
  never approximated per sample.

The reward loop's ``solution_str`` (verl's decode of the whole response, feedback included) is
not graded: the answer comes from the agent loop's record. Judge errors raise (a judge that is
down never becomes a 0).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from dataclasses import replace

from codedance.grading import JUDGE_SERVER, JudgeClient, grade_trajectory
from codedance.integrations.verl.record import RolloutRecord, record_from_extra
from codedance.integrations.verl.tasks import TASK_KEY, task_from_fields
from codedance.rewards import (
    BatchRewards,
    accuracy,
    call_stats,
    compute_batch_rewards,
    format_penalty,
    get_profile,
)

_JUDGES: dict[tuple[str, str], JudgeClient] = {}
_LOCK = threading.Lock()


def _judge(url: str | None, model: str | None) -> JudgeClient | None:
    if not url:
        return None
    key = (url, model or JUDGE_SERVER.model)
    with _LOCK:
        if key not in _JUDGES:
            _JUDGES[key] = JudgeClient(replace(JUDGE_SERVER, url=url, model=key[1]))
        return _JUDGES[key]


def compute_score(
    data_source: str = "",
    solution_str: str = "",
    ground_truth: object = None,
    extra_info: dict | None = None,
    *,
    profile: str = "paper",
    judge_url: str | None = None,
    judge_model: str | None = None,
    judge_policy: str = "never",
    **_: object,
) -> dict[str, float]:
    """verl's custom reward function for one rollout (see the module docstring).

    ``extra_info`` must hold the row's task (``codedance_task``) and the agent loop's record
    (``codedance``); ``ground_truth`` is checked against the task's answer. Returns ``score``,
    ``correct`` (0/1, what `group_rewards` reads), ``acc``, ``format``, ``format_error``,
    ``n_calls``, ``n_success``.
    """
    extra_info = extra_info or {}
    if TASK_KEY not in extra_info:
        raise KeyError(f"extra_info has no {TASK_KEY!r}: the row was not prepared by codedance")
    task, domain = task_from_fields(extra_info[TASK_KEY], ())
    if ground_truth is not None and str(ground_truth) != task.answer:
        raise ValueError(
            f"ground truth {ground_truth!r} differs from the task's answer {task.answer!r}"
        )
    record = record_from_extra(extra_info)
    trajectory = record.trajectory()
    grade = grade_trajectory(
        trajectory=trajectory,
        task=task,
        judge=_judge(judge_url, judge_model),
        judge_policy=judge_policy,
    )
    prof = get_profile(profile)
    kw = {
        "trajectories": [trajectory],
        "correct": [grade.correct],
        "domain": domain,
        "profile": prof,
    }
    r_acc = accuracy(**kw)[0]  # type: ignore[arg-type]
    r_fmt = format_penalty(**kw)[0]  # type: ignore[arg-type]
    stats = call_stats(trajectory)
    return {
        "score": prof.weight("accuracy") * r_acc + prof.weight("format") * r_fmt,
        "correct": float(grade.correct),
        "acc": r_acc,
        "format": r_fmt,
        "format_error": float(r_fmt < 0),
        "n_calls": float(stats.n_total),
        "n_success": float(stats.n_success),
    }


def group_rewards(
    records: Sequence[RolloutRecord],
    correct: Sequence[float | bool],
    group_ids: Sequence[Hashable],
    *,
    profile: str = "paper",
    **overrides: object,
) -> BatchRewards:
    """The profile's rewards for a batch of rollouts grouped by ``group_ids`` (verl's ``uid``).

    >>> from codedance.integrations.verl.record import TurnRecord
    >>> fin = TurnRecord("<think>.</think><answer>7</answer>", (0, 5))
    >>> call = TurnRecord("<think>.</think><code>c</code>", (0, 5), status="ok")
    >>> recs = [RolloutRecord("q", (call, fin), "answered"), RolloutRecord("q", (fin,), "answered")]
    >>> rewards = group_rewards(recs, [1, 0], ["u", "u"]).rewards  # 1 + 1.0·d(0.5)
    >>> [round(float(x), 6) for x in rewards]
    [1.3, 0.0]
    """
    prof = get_profile(profile, **overrides)
    return compute_batch_rewards(
        trajectories=[r.trajectory() for r in records],
        correct=[bool(c) for c in correct],
        group_ids=list(group_ids),
        domains=[r.domain for r in records],
        profile=prof,
    )
