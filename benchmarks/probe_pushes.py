"""A reward profile's first-turn push on the call-or-answer decision, before any training.

For every profile, on the same rollouts: Δ = E[A | the first turn calls] − E[A | it answers] of
the first assistant turn's advantage (A_seq + w·A_turn; that turn's tokens carry the decision),
split into its A_seq and A_turn parts, and push = p(1 − p)·Δ, the expected policy-gradient step
on the call logit per rollout (negative: calls fall), per label (easy / hard).
`codedance.advantages.first_turn_pushes` does the arithmetic; docs/rewards.md, "Which turns
R_turn is normalized over", shows its output.

Rollouts come from a trained policy (``--policy OUT_DIR``: a `codedance train` folder whose
``sft/final`` samples GRPO batches of its own config, `codedance.train.probe`; the result is
cached in ``OUT_DIR/pushes.json``, which ``--ablation --seeds N`` writes per SFT seed), from a
run directory (``--run DIR --tasks FILE``: the trajectories of `codedance
solve`, demo or eval on those tasks, grouped by task as GRPO groups them, graded by the rules of
`codedance.grading.grade_trajectory`, labelled by the task's metadata ``--label``, default
``difficulty``) or, without ``--run``, are drawn from per-label rates (defaults: the testbed's SFT
policy as measured on 512 rollouts — call rate, first-program failure, a program never running,
accuracy with and without a program). A synthetic call only prints (no image comes back, so
``deepeyes`` pays no bonus).

    .venv/bin/python benchmarks/probe_pushes.py                         # the testbed's SFT rates
    .venv/bin/python benchmarks/probe_pushes.py --hard-fail-first 0.04  # hard programs that run
    .venv/bin/python benchmarks/probe_pushes.py --run runs/solve --tasks data/tasks.jsonl
    .venv/bin/python benchmarks/probe_pushes.py --policy runs/testbed/sft-s0   # the SFT policy
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codedance.advantages import first_turn_pushes
from codedance.errors import SettingsError
from codedance.rewards import compute_batch_rewards, get_profile
from codedance.types import ExecResult, ExecStatus, StopReason, Trajectory, Turn

PROFILES = (
    "paper",
    "paper-all-turns",
    "release",
    "paper-no-turn",
    "outcome-only",
    "deepeyes",
    "paper-delta0",
)
CODE = "<think>count</think><code>\n```python\nprint(n)\n```\n</code>"
ANSWER = Turn("<think>so</think><answer>7</answer>")


@dataclass(frozen=True)
class Rates:
    """One label's rollout statistics: P(call first), P(first program fails), P(no program runs
    | the first failed: the retry fails too), accuracy when a program ran, when calls all
    failed, and when answering directly."""

    p_call: float
    fail_first: float
    fail_retry: float
    acc_ran: float
    acc_failed: float
    acc_direct: float


# the testbed's SFT policy (512 rollouts): easy p_call .48, first program failed .30, a program
# ran .96, correct .98 with a call, 1.00 without; hard .38, .58, .51, correct .37 given a program
# ran, .20 with a call, .14 direct
TESTBED = {
    "easy": Rates(0.48, 0.30, 0.04 / 0.30, 0.98, 0.98, 1.00),
    "hard": Rates(0.38, 0.58, 0.49 / 0.58, 0.37, 0.02, 0.14),
}


def rollout(rng: np.random.Generator, rates: Rates) -> tuple[Trajectory, bool]:
    if rng.random() >= rates.p_call:
        return Trajectory("t", (ANSWER,), StopReason.ANSWERED, "7"), bool(
            rng.random() < rates.acc_direct
        )
    first_failed = rng.random() < rates.fail_first
    statuses = [ExecStatus.ERROR if first_failed else ExecStatus.OK]
    if first_failed:
        statuses.append(ExecStatus.ERROR if rng.random() < rates.fail_retry else ExecStatus.OK)
    ran = ExecStatus.OK in statuses
    turns = tuple(Turn(CODE, result=ExecResult(s)) for s in statuses) + (ANSWER,)
    return Trajectory("t", turns, StopReason.ANSWERED, "7"), bool(
        rng.random() < (rates.acc_ran if ran else rates.acc_failed)
    )


def synthetic(rates: dict[str, Rates], *, batches: int, prompts: int, group: int, seed: int):
    """Batches of ``prompts`` groups (labels alternating) × ``group`` rollouts."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(batches):
        trajectories, correct, ids, labels = [], [], [], []
        for p in range(prompts):
            label = list(rates)[p % len(rates)]
            for _ in range(group):
                t, ok = rollout(rng, rates[label])
                trajectories.append(t)
                correct.append(ok)
                ids.append(f"b{b}p{p}")
                labels.append(label)
        out.append((trajectories, correct, ids, ["general"] * len(ids), labels))
    return out


def from_run(run: str, tasks_path: str, label_key: str, batch_prompts: int):
    """The run's trajectories, grouped by task, graded by the rules, in batches of prompts."""
    from codedance.grading import grade_trajectory
    from codedance.runs import RunDir
    from codedance.task_records import load_tasks

    tasks = {task.id: (task, domain) for task, domain, _split in load_tasks(tasks_path)}
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for _key, trajectory in RunDir(run).trajectories():
        if trajectory.task_id not in tasks:
            raise SystemExit(
                f"{run}: task {trajectory.task_id!r} is not in {tasks_path}; pass the tasks it ran"
            )
        groups[trajectory.task_id].append(trajectory)
    if not groups:
        raise SystemExit(
            f"{run} holds no trajectories; run `codedance solve` or eval into it first"
        )
    ids = sorted(groups)
    out = []
    for start in range(0, len(ids), batch_prompts):
        rows = [(tid, t) for tid in ids[start : start + batch_prompts] for t in groups[tid]]
        correct = [grade_trajectory(trajectory=t, task=tasks[tid][0]).correct for tid, t in rows]
        labels = [dict(tasks[tid][0].metadata).get(label_key, "all") for tid, _ in rows]
        out.append(
            (
                [t for _, t in rows],
                correct,
                [tid for tid, _ in rows],
                [tasks[tid][1] for tid, _ in rows],
                labels,
            )
        )
    return out


def table(batches, profiles: tuple[str, ...]) -> str:
    labels = list(dict.fromkeys(x for *_, lab in batches for x in lab))
    head = (
        "| profile | " + " | ".join(f"{lab}: p_call, Δ (seq, turn), push" for lab in labels) + " |"
    )
    lines = [head, "|---|" + "---|" * len(labels)]
    for name in profiles:
        computed = [
            compute_batch_rewards(trajectories=t, correct=c, group_ids=g, domains=d, profile=name)
            for t, c, g, d, _ in batches
        ]
        pushes = first_turn_pushes(computed, [lab for *_, lab in batches])
        cells = []
        for lab in labels:
            p = pushes[lab]
            cells.append(
                f"{p.p_call:.2f}, {p.delta:+.2f} ({p.delta_seq:+.2f}, {p.delta_turn:+.2f}), **{p.push:+.2f}**"
                if not math.isnan(p.delta)
                else f"{p.p_call:.2f}, n/a (no call or no direct first turn)"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--profile",
        action="append",
        help=f"profile to probe (repeatable; default: {', '.join(PROFILES)})",
    )
    parser.add_argument(
        "--policy", help="a `codedance train` out_dir: its SFT policy's own rollouts"
    )
    parser.add_argument("--run", help="a run directory of trajectories (else synthetic rollouts)")
    parser.add_argument("--tasks", help="the tasks file the run used (with --run)")
    parser.add_argument(
        "--label", default="difficulty", help="task metadata key to split by (with --run)"
    )
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per batch")
    parser.add_argument("--group", type=int, default=8, help="rollouts per prompt (synthetic)")
    parser.add_argument("--seed", type=int, default=0)
    for label, rates in TESTBED.items():
        for field in Rates.__dataclass_fields__:
            parser.add_argument(
                f"--{label}-{field.replace('_', '-')}", type=float, default=getattr(rates, field)
            )
    args = parser.parse_args()
    profiles = tuple(args.profile or PROFILES)
    for name in profiles:
        try:
            get_profile(name)  # an unknown name fails here, before any work
        except SettingsError as exc:
            raise SystemExit(str(exc)) from None
    if args.policy:
        from codedance.train.config import load_config
        from codedance.train.probe import probe_pushes, pushes_table

        config_file = Path(args.policy) / "config.yaml"
        if not config_file.exists():
            raise SystemExit(f"{args.policy}: no config.yaml; pass a `codedance train` out_dir")
        result = probe_pushes(
            load_config(str(config_file)), profiles, batches=args.batches, seed=args.seed
        )
        print(pushes_table(result))
        return
    if args.run:
        if not args.tasks:
            raise SystemExit("--run needs --tasks: the tasks file the run was made on")
        batches = from_run(args.run, args.tasks, args.label, args.prompts)
    else:
        rates = {
            label: Rates(**{f: getattr(args, f"{label}_{f}") for f in Rates.__dataclass_fields__})
            for label in TESTBED
        }
        batches = synthetic(
            rates, batches=args.batches, prompts=args.prompts, group=args.group, seed=args.seed
        )
    print(table(batches, profiles))


if __name__ == "__main__":
    main()
