"""A training run in its own process, for the kill-and-resume tests (`test_resume.py`):

    python resume_child.py sft|grpo OUT STEPS [BLOCK_AT [PAUSE]]

Trains the very small model of `helpers.tiny` for STEPS steps into OUT (SFT: `run_sft`; GRPO:
`GRPOTrainer` with `FakeRunner`), resuming from OUT's checkpoints as every entry point does.
Prints one JSON line per step (``{"step": N, "loss": L}``, full precision) and, with BLOCK_AT,
``blocked`` after step BLOCK_AT, then sleeps PAUSE seconds (default 600: until killed). One torch thread, so two runs compute
the same numbers."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.tier("torch")

# run as a script only (its folder is first on sys.path, so `helpers` is tests/train/helpers.py);
# imports stay inside the functions, so collecting this file for doctests imports nothing


PAUSE = 600.0


def report(step: int, loss: float, block_at: int) -> None:
    print(json.dumps({"step": step, "loss": loss}), flush=True)
    if step == block_at:
        print("blocked", flush=True)
        time.sleep(PAUSE)


def sft(out: Path, steps: int, block_at: int) -> None:
    from helpers import corpus, tiny
    from transformers import TrainerCallback

    from codedance.train.config import SFTStage
    from codedance.train.sft import run_sft

    class Report(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):  # type: ignore[no-untyped-def]
            if logs and "loss" in logs:
                report(state.global_step, float(logs["loss"]), block_at)

    trajectories = corpus()
    model, processor = tiny(trajectories)
    # 9 sequences in batches of 3: 3 steps an epoch, so a checkpoint at step 4 resumes mid-epoch
    # (the Trainer skips the epoch's batches already seen); warmup then cosine: the schedule matters
    stage = SFTStage(
        epochs=10,
        max_steps=steps,
        batch_size=3,
        per_device_batch=3,
        lr=1e-2,
        warmup_ratio=0.25,
        logging_steps=1,
        gradient_checkpointing=False,
    )  # a checkpoint every 4 steps
    run_sft(
        model, processor, trajectories, stage, out, max_length=512, callbacks=[Report()], log=print
    )


def grpo(out: Path, steps: int, block_at: int) -> None:
    import torch
    from helpers import FakeRunner, corpus, task, tiny

    from codedance.rollout import EpisodeSettings
    from codedance.train.config import GRPOStage, RolloutSettings
    from codedance.train.grpo import GRPOTrainer

    model, processor = tiny(corpus())
    # an untrained model's rollouts all score alike (zero advantages); the KL term to a perturbed
    # copy moves the weights every step all the same, through the same update
    ref, _ = tiny(corpus())
    with torch.no_grad():
        noise = torch.Generator().manual_seed(1)
        for param in ref.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=noise))
    stage = GRPOStage(
        steps=steps,
        prompts_per_step=2,
        group_size=2,
        lr=1e-3,
        micro_batch=2,
        save_every=2,
        kl_coef=0.5,
    )
    trainer = GRPOTrainer(
        model,
        processor,
        stage,
        RolloutSettings(max_tokens=24, max_length=512, max_pixels=56 * 56),
        EpisodeSettings(max_turns=3, prompt_profile="paper"),
        [task(i) for i in range(4)],
        out,
        ref_model=ref,
        make_runner=lambda images: FakeRunner(images),
        threads=1,
    )
    if trainer.resume():
        print(f"resumed at step {trainer.step}", flush=True)
    trainer.train(
        on_step=lambda row: report(int(row["step"]), float(row["loss"]), block_at),
        log=lambda line: print(line, flush=True),
    )


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    kind, out, steps = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    PAUSE = float(sys.argv[5]) if len(sys.argv) > 5 else PAUSE
    {"sft": sft, "grpo": grpo}[kind](out, steps, int(sys.argv[4]) if len(sys.argv) > 4 else -1)
