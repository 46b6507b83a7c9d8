"""How large the turn-level advantage gets under the ``paper``, ``paper-all-turns`` and ``release``
profiles, on a realistic synthetic batch (docs/rewards.md, "Magnitudes").

A batch of 256 prompts × G = 8 rollouts (2048 trajectories, as the paper's RL step): each rollout
makes 0–4 calls (a third of the rollouts make none), each call fails with probability 0.08, then
answers; a rollout is correct with probability 0.6. Prints, per profile, the mean |A_seq|, the
turn advantage (weighted as the profile adds it) on a failed call turn, on a successful call turn,
on the answer turn, and on the one turn of a tool-free rollout.

    .venv/bin/python benchmarks/turn_advantage_magnitudes.py [--seed 0]
"""

from __future__ import annotations

import argparse

import numpy as np

from codedance.advantages import profile_advantages
from codedance.rewards import compute_batch_rewards
from codedance.types import ExecResult, ExecStatus, StopReason, Trajectory, Turn

CODE = "<think>t</think><code>\n```python\nx = 1\n```\n</code>"
ANSWER = Turn("<think>t</think><answer>1</answer>")


def batch(rng: np.random.Generator, prompts: int = 256, group: int = 8):
    trajectories, correct, groups = [], [], []
    for p in range(prompts):
        for _ in range(group):
            n_calls = 0 if rng.random() < 1 / 3 else int(rng.integers(1, 5))
            turns = tuple(
                Turn(
                    CODE,
                    result=ExecResult(ExecStatus.ERROR if rng.random() < 0.08 else ExecStatus.OK),
                )
                for _ in range(n_calls)
            )
            trajectories.append(Trajectory(f"p{p}", turns + (ANSWER,), StopReason.ANSWERED, "1"))
            correct.append(bool(rng.random() < 0.6))
            groups.append(f"p{p}")
    return trajectories, correct, groups


def magnitudes(profile: str, trajectories, correct, groups) -> dict[str, float]:
    b = compute_batch_rewards(
        trajectories=trajectories, correct=correct, group_ids=groups, profile=profile
    )
    prof = b.profile
    seq, turns = profile_advantages(b)
    cells: dict[str, list[float]] = {
        "failed call": [],
        "ok call": [],
        "answer turn": [],
        "tool-free": [],
    }
    for t, adv in zip(trajectories, turns, strict=True):
        w = prof.turn_weight * np.asarray(adv)
        if t.n_calls == 0:
            cells["tool-free"].append(float(w[0]))
            continue
        for turn, a in zip(t.turns, w, strict=True):
            kind = {"failed": "failed call", "ok": "ok call", "none": "answer turn"}[
                turn.call_outcome.value
            ]
            cells[kind].append(float(a))
    out = {"mean |A_seq|": float(np.mean(np.abs(seq)))}
    out.update({f"w·A_turn, {k}": float(np.mean(v)) for k, v in cells.items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    data = batch(np.random.default_rng(args.seed))
    names = ("paper", "paper-all-turns", "release")
    rows = {p: magnitudes(p, *data) for p in names}
    print("| quantity | " + " | ".join(f"`{p}`" for p in names) + " |\n|---|" + "---|" * len(names))
    for k in rows["paper"]:
        print(f"| {k} | " + " | ".join(f"{rows[p][k]:+.3f}" for p in names) + " |")


if __name__ == "__main__":
    main()
