"""Benchmark: rewards + advantages for a batch of 2048 trajectories × 6 turns (judge excluded).

Run: ``.venv/bin/python benchmarks/rewards_bench.py [--profile paper] [--tokens 256]``. Prints the
best wall time of a few repeats for `compute_batch_rewards` + `batch_token_advantages` on a
synthetic batch (256 prompts × 8 rollouts, 5 code turns + 1 answer turn, random call outcomes,
``tokens`` tokens per turn with 32 feedback tokens after each code turn). Target: ≤ 100 ms.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from codedance.advantages import batch_token_advantages
from codedance.rewards.group import compute_batch_rewards
from codedance.types import ExecResult, ExecStatus, StopReason, Trajectory, Turn


def synthetic_batch(
    *,
    prompts: int = 256,
    group: int = 8,
    turns: int = 6,
    tokens: int = 64,
    feedback: int = 32,
    seed: int = 0,
):
    """(trajectories, correct, group_ids, turn_spans, loss_mask) of a reproducible fake batch."""
    rng = np.random.default_rng(seed)
    results = (
        ExecResult(ExecStatus.OK),
        ExecResult(ExecStatus.ERROR),
        ExecResult(ExecStatus.TIMEOUT),
        ExecResult(ExecStatus.OK, executed_nothing=True),
    )
    code = Turn("<think>look closer</think><code>\n```python\ncrop()\n```\n</code>")
    answer = Turn("<think>done</think><answer>7</answer>")
    trajectories, group_ids = [], []
    for p in range(prompts):
        for _ in range(group):
            n_code = int(rng.integers(0, turns))
            picks = rng.choice(len(results), size=n_code, p=[0.7, 0.15, 0.1, 0.05])
            body = tuple(Turn(code.text, result=results[k]) for k in picks)
            trajectories.append(Trajectory(f"task{p}", body + (answer,), StopReason.ANSWERED))
            group_ids.append(f"task{p}")
    correct = list(rng.random(len(trajectories)) < 0.5)
    length = turns * (tokens + feedback)
    mask = np.zeros((len(trajectories), length), dtype=np.int8)
    spans = []
    for i, t in enumerate(trajectories):
        row, pos = [], 0
        for _ in t.turns:
            row.append((pos, pos + tokens))
            mask[i, pos : pos + tokens] = 1
            pos += tokens + feedback
        spans.append(row)
    return trajectories, correct, group_ids, spans, mask


def run(*, profile: str = "paper", tokens: int = 64, repeats: int = 5) -> float:
    """Best wall time in seconds of rewards + token advantages over ``repeats`` runs."""
    trajectories, correct, group_ids, spans, mask = synthetic_batch(tokens=tokens)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        batch = compute_batch_rewards(
            trajectories=trajectories, correct=correct, group_ids=group_ids, profile=profile
        )
        batch_token_advantages(batch, turn_spans=spans, loss_mask=mask)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="paper")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    seconds = run(profile=args.profile, tokens=args.tokens, repeats=args.repeats)
    print(
        f"rewards + advantages, 2048 trajectories x 6 turns, profile {args.profile}: "
        f"{seconds * 1000:.1f} ms (target <= 100 ms)"
    )


if __name__ == "__main__":
    main()
