"""SFT of a Qwen2.5-VL-family model on CodeDance trajectories with TRL's ``SFTTrainer``.

Each trajectory becomes one sequence with `codedance.train.encode.encode_trajectory`: the
conversation rendered with the model's chat template, the task's and the feedback's images
expanded to their vision tokens through the processor, and labels only on the model's turns
(the assistant text plus its end-of-turn token; prompt, feedback text and images are -100).
The dataset handed to TRL holds row indices only; `TrajectoryCollator` pads a micro-batch and
adds ``pixel_values`` / ``image_grid_thw`` (so TRL's own text preparation is skipped:
``dataset_kwargs={"skip_prepare_dataset": True}``).

Defaults (`codedance.train.config.SFTStage`) are the paper's Table 4: effective batch 128 (by
gradient accumulation), lr 5e-5, warmup ratio 0.05; cosine decay (ms-swift's default; the paper
does not say). `run_sft` resumes from the newest complete ``checkpoint-*`` under ``out_dir``
(`resumable_checkpoint`: weights, optimizer, scheduler, RNG and trainer state; one cut short by a
kill while saving is passed over) and writes its log lines (loss, token accuracy per logged step)
to ``out_dir/sft_log.jsonl`` for the report. The weights are restored through ``from_pretrained``
and refused unless they load completely (`codedance.train.weights`): transformers' own resume
loads the saved file by raw key names, which for Qwen2.5-VL match none of the model's, and only
warns. SIGTERM or Ctrl-C ends SFT after the step in progress, saved as a checkpoint
(`codedance.train.stopping`), then raises ``KeyboardInterrupt``. On the console,
transformers' ``PrinterCallback`` (a raw dict per logged step) is removed through the Trainer's
own ``remove_callback``; with ``log`` given, one short line per logged step takes its place.

Not handled: packing; trajectories longer than ``max_length`` are cut (tail untrained, counted
in the returned summary); the paper's data pipeline itself (we train on the teacher's
trajectories of the synthetic world). Export for ms-swift: `codedance.sft_records.write_records`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codedance.train.config import SFTStage
from codedance.train.encode import EncodedTrajectory, encode_trajectory
from codedance.train.stopping import stop_at_step_end, stop_requests
from codedance.types import Trajectory

# what transformers' Trainer writes into a checkpoint-N, trainer_state.json last (weights aside:
# model.safetensors, or an index of shards)
CHECKPOINT_FILES = (
    "config.json",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pth",
    "trainer_state.json",
)


def quiet_libraries() -> None:
    """Warnings and errors only from transformers and datasets (TRL logs through transformers'
    logger tree), and no progress bars: their own verbosity settings, so a training log holds the
    stage lines in run order."""
    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_warning()
    hf_logging.disable_progress_bar()
    datasets.utils.logging.set_verbosity_warning()
    datasets.disable_progress_bars()


def encode_all(
    trajectories: Sequence[Trajectory], processor: Any, max_length: int
) -> list[EncodedTrajectory]:
    """Teacher trajectories as training sequences (text re-tokenized: teachers have no ids)."""
    tok = getattr(processor, "tokenizer", processor)
    image_tokens = getattr(processor, "image_tokens", None)
    return [
        encode_trajectory(
            t,
            tok,
            template=processor,
            image_tokens=image_tokens,
            use_sampled_ids=False,
            max_length=max_length,
        )
        for t in trajectories
    ]


class TrajectoryCollator:
    """Rows ``{"index": i}`` → padded ``input_ids``, ``attention_mask``, ``labels`` (-100 off the
    model's turns) and the images' pixel inputs."""

    def __init__(self, encoded: Sequence[EncodedTrajectory], processor: Any) -> None:
        self.encoded = list(encoded)
        self.processor = processor
        self.pad_id = getattr(processor, "tokenizer", processor).pad_token_id

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        from codedance.train.loss import collate

        batch = collate([self.encoded[int(r["index"])] for r in rows], self.processor, self.pad_id)
        mask = batch.pop("loss_mask")
        labels = batch["input_ids"].clone()
        labels[mask == 0] = -100
        batch["labels"] = labels
        return batch


@dataclass(frozen=True)
class SFTResult:
    out_dir: str
    steps: int
    sequences: int
    truncated: int
    losses: tuple[tuple[int, float], ...]  # (step, training loss) as logged


def sft_arguments(
    stage: SFTStage, out_dir: str | Path, n_sequences: int, device: str = "auto"
) -> Any:
    """TRL ``SFTConfig`` for `stage` on `device` (`codedance.train.device`; ``auto``: the GPU
    when torch sees one), in bf16 mixed precision on a GPU that has it."""
    import inspect

    import torch
    from trl import SFTConfig

    from codedance.train.device import resolve_device

    gpu = resolve_device(device).startswith("cuda")

    per_device = max(1, min(stage.per_device_batch, stage.batch_size))
    # transformers 5 folds warmup_ratio into warmup_steps (a float below 1 is a ratio) and warns
    # on every run that uses warmup_ratio; 4.x has only the ratio for a fraction
    params = inspect.signature(SFTConfig).parameters
    steps_take_ratio = (
        "float" in str(params["warmup_steps"].annotation) if "warmup_steps" in params else False
    )
    extra = (
        {"warmup_steps": float(stage.warmup_ratio)}
        if steps_take_ratio or "warmup_ratio" not in params
        else {"warmup_ratio": stage.warmup_ratio}
    )
    # transformers 5 renames gradient_checkpointing (TRL turns it on by default)
    checkpointing = (
        "activation_checkpointing"
        if "activation_checkpointing" in params
        else "gradient_checkpointing"
    )
    extra[checkpointing] = stage.gradient_checkpointing
    accumulation = max(1, stage.batch_size // per_device)
    return SFTConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        learning_rate=stage.lr,
        **extra,
        lr_scheduler_type="cosine",
        weight_decay=stage.weight_decay,
        num_train_epochs=stage.epochs,
        max_steps=stage.max_steps,
        logging_steps=stage.logging_steps,
        save_strategy="steps",
        save_steps=max(1, stage.logging_steps * 4),
        save_total_limit=2,
        report_to=[],
        seed=stage.seed,
        remove_unused_columns=False,
        dataset_kwargs={"skip_prepare_dataset": True},
        max_length=None,
        use_cpu=not gpu,
        dataloader_num_workers=0,
        disable_tqdm=True,
        bf16=gpu and torch.cuda.is_bf16_supported(),
    )


def _log_line(entry: dict[str, Any]) -> dict[str, float]:
    """One TRL log entry as numbers (TRL may log them as strings): step, loss, token accuracy."""
    keys = ("step", "epoch", "loss", "mean_token_accuracy", "learning_rate", "grad_norm")
    return {k: float(entry[k]) for k in keys if k in entry}


def step_lines(log: Callable[[str], None]) -> Any:
    """A TrainerCallback that logs ``sft step N/M: loss L, token accuracy A (elapsed, ETA)`` per
    logged step (`codedance.progress.Eta`, from the step this run began at)."""
    from transformers import TrainerCallback

    from codedance.progress import Eta

    class StepLines(TrainerCallback):
        eta: Eta | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.eta = Eta(state.max_steps, state.global_step)

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any
        ) -> None:
            line = _log_line(logs or {})
            if "loss" in line:
                accuracy = (
                    f", token accuracy {line['mean_token_accuracy']:.3f}"
                    if "mean_token_accuracy" in line
                    else ""
                )
                timing = f" ({self.eta.text(state.global_step)})" if self.eta is not None else ""
                log(
                    f"sft step {state.global_step}/{state.max_steps}: loss {line['loss']:.4f}{accuracy}{timing}"
                )

    return StepLines()


def _complete(path: Path) -> bool:
    """Whether the Trainer finished writing checkpoint `path` (every file there, the state parses)."""
    if not all((path / name).is_file() for name in CHECKPOINT_FILES):
        return False
    if not any(
        (path / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json")
    ):
        return False
    try:
        json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def resumable_checkpoint(
    out_dir: str | Path, log: Callable[[str], None] | None = None
) -> Path | None:
    """The newest ``checkpoint-N`` under `out_dir` that the Trainer finished writing, or None. The
    Trainer writes a checkpoint in place, so a run killed while saving leaves one without its
    trainer state: it is passed over (and said so) for the one before it, which the Trainer
    deletes only after the next is complete."""
    found = [p for p in Path(out_dir).glob("checkpoint-*") if p.name.split("-")[1].isdigit()]
    for path in sorted(found, key=lambda p: int(p.name.split("-")[1]), reverse=True):
        if _complete(path):
            return path
        if log is not None:
            log(f"sft: {path} is incomplete (stopped while saving); passed over")
    return None


def _trainer_class() -> Any:
    """TRL's ``SFTTrainer`` whose resume restores the weights through `restore_weights`."""
    from trl import SFTTrainer

    from codedance.train.weights import restore_weights

    class CheckedSFTTrainer(SFTTrainer):
        def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
            restore_weights(
                self.model,
                resume_from_checkpoint,
                "delete that folder to resume from the checkpoint before it (or from the start)",
            )

    return CheckedSFTTrainer


def run_sft(
    model: Any,
    processor: Any,
    trajectories: Sequence[Trajectory],
    stage: SFTStage,
    out_dir: str | Path,
    *,
    max_length: int = 4096,
    callbacks: Sequence[Any] = (),
    device: str = "auto",
    log: Callable[[str], None] | None = None,
) -> SFTResult:
    """Train `model` in place on `trajectories`; save the final model and processor to
    ``out_dir/final``. See the module docstring."""
    from datasets import Dataset
    from transformers import PrinterCallback

    encoded = [e for e in encode_all(trajectories, processor, max_length) if sum(e.loss_mask) > 0]
    if not encoded:
        raise ValueError("no trajectory has model tokens to train on")
    dataset = Dataset.from_dict({"index": list(range(len(encoded)))})
    args = sft_arguments(stage, out_dir, len(encoded), device)
    trainer = _trainer_class()(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=TrajectoryCollator(encoded, processor),
        processing_class=getattr(processor, "tokenizer", processor),
        callbacks=[*callbacks, *([step_lines(log)] if log else [])],
    )
    trainer.remove_callback(PrinterCallback)  # its raw dicts; ``log`` gives the readable line
    checkpoint = resumable_checkpoint(out_dir, log)
    if checkpoint is not None and log is not None:
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        last = [h["loss"] for h in state.get("log_history", []) if "loss" in h]
        log(
            f"sft: resuming at step {state.get('global_step')} from {checkpoint}"
            + (f" (last logged loss {float(last[-1]):.4f})" if last else "")
        )
    with stop_requests() as stop:
        trainer.add_callback(stop_at_step_end(stop))
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    step = int(trainer.state.global_step)
    if stop.signal is not None and step < trainer.state.max_steps:
        if log is not None:
            log(
                f"sft: stopped on {stop.signal} after step {step}, saved in {Path(out_dir) / f'checkpoint-{step}'}"
            )
        raise KeyboardInterrupt
    final = Path(out_dir) / "final"
    trainer.save_model(str(final))
    processor.save_pretrained(final)
    logged = [_log_line(h) for h in trainer.state.log_history if "loss" in h]
    Path(out_dir, "sft_log.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in logged), encoding="utf-8"
    )
    losses = tuple((int(r["step"]), r["loss"]) for r in logged if math.isfinite(r["loss"]))
    if (
        stop.signal is not None
    ):  # the signal came as the last step ended: the stage is done, stop after it
        raise KeyboardInterrupt
    return SFTResult(str(out_dir), step, len(encoded), sum(e.truncated for e in encoded), losses)
