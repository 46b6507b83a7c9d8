"""Typed settings of the training stages, read from YAML presets with ``key=value`` overrides.

`TaskSpec` names a slice of the synthetic world (``codedance.world.task_set(n, seed, skills,
difficulties)``); train and held-out slices use disjoint seed ranges. `SFTStage`, `GRPOStage` and
`EvalStage` are the stages; `PipelineConfig` (the ``tiny-cpu`` preset) chains them.
`load_config(path, overrides)` builds a `PipelineConfig` from a preset file: nested keys with
dots (``grpo.steps=4``, ``sft.lr=1e-4``); an unknown key is an error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from codedance.rewards.profiles import ABLATIONS


@dataclass(frozen=True)
class TaskSpec:
    n: int = 90
    seed: int = 0
    skills: tuple[str, ...] = ()  # empty: every skill the teacher can solve
    difficulties: tuple[str, ...] = ("easy", "medium", "hard")


@dataclass(frozen=True)
class RolloutSettings:
    max_turns: int = 6  # paper: 6 in training
    max_tokens: int = 256  # per assistant turn
    max_length: int = 3072  # whole trajectory, tokens (longer ones are cut, tail not trained)
    exec_timeout_s: float = 15.0
    prompt_profile: str = "release"
    min_pixels: int = 28 * 28
    max_pixels: int = 112 * 112  # what the model sees; the sandbox keeps the episode's images


@dataclass(frozen=True)
class SFTStage:
    """TRL SFT on teacher trajectories. Paper (Table 4): batch 128, lr 5e-5, warmup 0.05."""

    tasks: TaskSpec = TaskSpec(n=270, seed=10_000)
    rollouts_per_task: int = 1
    teacher_temperature: float = 1.0
    teacher_mistake_rate: float = 0.5
    teacher_code_style: str = "full"  # or "compact" (`codedance.teacher.TeacherConfig.code_style`)
    epochs: float = 3.0
    batch_size: int = 128  # effective: per_device × accumulation
    per_device_batch: int = 8
    lr: float = 5e-5
    warmup_ratio: float = 0.05
    weight_decay: float = 0.0
    max_steps: int = -1
    logging_steps: int = 5
    gradient_checkpointing: bool = True  # TRL's default; off for tiny CPU models (~3x slower with it)
    seed: int = 0


@dataclass(frozen=True)
class GRPOStage:
    """The small GRPO trainer. Paper: lr 1e-6, clip 0.2, no KL, G = 8, temperature 1."""

    tasks: TaskSpec = TaskSpec(n=270, seed=20_000)
    steps: int = 20
    prompts_per_step: int = 8
    group_size: int = 8
    lr: float = 1e-6
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    clip: float = 0.2
    aggregation: str = "token-mean"  # or "seq-mean" (the paper's 1/|τ|)
    kl_coef: float = 0.0
    mini_batches: int = 1  # optimizer steps per rollout batch (paper: 1)
    micro_batch: int = 8  # sequences per forward/backward (gradient accumulation)
    temperature: float = 1.0
    top_p: float = 1.0
    profile: str = "paper"
    profile_overrides: tuple[tuple[str, float], ...] = ()  # e.g. (("delta", 0.0),)
    save_every: int = 5
    keep_checkpoints: int = 2
    eval_every: int = 0  # 0: only at the end
    save_rollouts: bool = True
    seed: int = 0


@dataclass(frozen=True)
class EvalStage:
    tasks: TaskSpec = TaskSpec(n=90, seed=90_000)
    temperature: float = 0.0


@dataclass(frozen=True)
class TinyModel:
    """Model settings. vocab_size … intermediate: the ``tiny`` builder only (``smollm2`` reads its
    sizes from the checkpoint). vision_hidden: the fresh vision tower of ``smollm2``.
    train_layers: -1 trains every parameter; k ≥ 0 only the top k decoder blocks, the final norm
    and the vision tower (`codedance.train.smol.freeze_lower`), in SFT and GRPO alike."""

    vocab_size: int = 1024
    tokenizer_split: str = "lines"  # "words" (GPT-2 style), "lines" (merges within a line), "lines-digits" (and digits alone)
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 512
    vision_hidden: int = 64
    train_layers: int = -1


@dataclass(frozen=True)
class PipelineConfig:
    out_dir: str = "runs/tiny-cpu"
    init: str = "tiny"  # a builder in `pipeline.MODEL_BUILDERS` ("tiny", "smollm2") or a checkpoint folder
    model: TinyModel = TinyModel()
    rollout: RolloutSettings = RolloutSettings()
    sft: SFTStage = SFTStage()
    grpo: GRPOStage = GRPOStage()
    eval: EvalStage = EvalStage()
    threads: int = 2
    ablation_profiles: tuple[str, ...] = ABLATIONS  # named profiles of codedance.rewards


def _build(base: Any, data: Any) -> Any:
    """`base` (a dataclass instance) with the values of the mapping `data`, recursively."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a mapping for {type(base).__name__}, got {data!r}")  # noqa: TRY004  (a setting error, reported as ValueError by the CLI)
    known = {f.name for f in fields(base)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown setting(s) {sorted(unknown)} for {type(base).__name__}; known: {sorted(known)}")
    values = {}
    for name, value in data.items():
        current = getattr(base, name)
        values[name] = _build(current, value) if is_dataclass(current) else _leaf(current, value)
    return replace(base, **values)


def _leaf(current: Any, value: Any) -> Any:
    if isinstance(current, tuple) and isinstance(value, list):
        return tuple(tuple(v) if isinstance(v, list) else v for v in value)
    if isinstance(current, bool):
        return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")
    if isinstance(current, float) and isinstance(value, (int, str)):
        return float(value)
    if isinstance(current, int) and isinstance(value, str):
        return int(value)
    return value


def _set(tree: dict[str, Any], dotted: str, raw: str) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = yaml.safe_load(raw)


def load_config(path: str | Path | None, overrides: list[str] = ()) -> PipelineConfig:  # type: ignore[assignment]
    """A `PipelineConfig` from a YAML preset (None: the defaults) and ``key=value`` overrides."""
    data: dict[str, Any] = (yaml.safe_load(Path(path).read_text()) or {}) if path else {}
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value")
        key, raw = item.split("=", 1)
        _set(data, key.strip(), raw)
    return _build(PipelineConfig(), data)
