"""Typed settings of the training stages, read from YAML presets with ``key=value`` overrides.

`TaskSpec` names a slice of the synthetic world (``codedance.world.task_set(n, seed, skills,
difficulties)``; train and held-out slices use disjoint seed ranges) or, with ``file``, the first
``n`` tasks of one split of a Task JSONL (``codedance data import codedance-rl``; GRPO and eval
only: the SFT teacher solves world tasks). `SFTStage`, `GRPOStage` and `EvalStage` are the
stages; `PipelineConfig` (the ``tiny-cpu`` preset) chains them. The knobs shared with the other
commands are declared once elsewhere: ``episode`` is `codedance.rollout.EpisodeSettings` (turn
budget, seconds per execution, prompt profile, the images the episode and sandbox get) and
``sft.teacher`` is `codedance.teacher.TeacherConfig`; ``rollout`` holds what only this trainer
has (tokens per turn and per trajectory, the pixels its processor gives the model).
`load_config(specs)` builds a `PipelineConfig` from presets, YAML files and ``key=value``
overrides (`codedance.config`, the loader every command shares); an unknown key is an error naming
it, and a key moved by the shared declarations (``rollout.max_turns``, ``sft.teacher_*``) says
where it went. The reward and prompt profiles named are checked when the config is made, before
anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codedance.config import bounded, check_bounds, load, merged, not_resumed, refuse_moved
from codedance.errors import SettingsError
from codedance.rewards.profiles import ABLATIONS, get_profile
from codedance.rollout import EpisodeSettings
from codedance.teacher import TeacherConfig
from codedance.train.device import check_device


@dataclass(frozen=True)
class TaskSpec:
    """World tasks (n from seed, skills, difficulties) or, with ``file`` (a Task JSONL or the
    folder holding its ``tasks.jsonl``), its first ``n`` tasks of ``split`` ('' = every split)."""

    n: int = bounded(90, at_least=1)
    seed: int = 0
    skills: tuple[str, ...] = ()  # empty: every skill the teacher can solve
    difficulties: tuple[str, ...] = ("easy", "medium", "hard")
    file: str = ""
    split: str = ""

    def __post_init__(self) -> None:
        check_bounds(self)


@dataclass(frozen=True)
class RolloutSettings:
    """The trainer's own sampling limits (the episode's are `EpisodeSettings`)."""

    max_tokens: int = bounded(256, at_least=1)  # per assistant turn
    max_length: int = bounded(
        3072, at_least=1
    )  # whole trajectory, tokens (longer ones are cut, tail not trained)
    min_pixels: int = bounded(
        28 * 28, at_least=1
    )  # the image the model's processor makes; the episode and sandbox
    max_pixels: int = bounded(
        112 * 112, at_least=1
    )  # keep the task's images (`episode.min_pixels` / `max_pixels`)


@dataclass(frozen=True)
class SFTStage:
    """TRL SFT on teacher trajectories. Paper (Table 4): batch 128, lr 5e-5, warmup 0.05."""

    tasks: TaskSpec = TaskSpec(n=270, seed=10_000)
    rollouts_per_task: int = bounded(1, at_least=1)
    teacher: TeacherConfig = TeacherConfig()  # temperature, mistake_rate, seed, code_style
    epochs: float = bounded(3.0, above=0)
    batch_size: int = bounded(128, at_least=1)  # effective: per_device × accumulation
    per_device_batch: int = bounded(8, at_least=1)
    lr: float = bounded(5e-5, above=0)
    warmup_ratio: float = bounded(0.05, at_least=0, at_most=1)
    weight_decay: float = bounded(0.0, at_least=0)
    max_steps: int = bounded(-1, at_least=-1)  # -1: epochs decide
    logging_steps: int = bounded(5, at_least=1)
    gradient_checkpointing: bool = (
        True  # TRL's default; off for tiny CPU models (~3x slower with it)
    )
    seed: int = 0


@dataclass(frozen=True)
class GRPOStage:
    """The small GRPO trainer. Paper: lr 1e-6, clip 0.2, no KL, G = 8, temperature 1."""

    tasks: TaskSpec = TaskSpec(n=270, seed=20_000)
    steps: int = bounded(20, at_least=1)
    prompts_per_step: int = bounded(8, at_least=1)
    group_size: int = bounded(8, at_least=1)
    lr: float = bounded(1e-6, above=0)
    weight_decay: float = bounded(0.0, at_least=0)
    grad_clip: float = bounded(1.0, above=0)
    clip: float = bounded(0.2, above=0)
    aggregation: str = "token-mean"  # or "seq-mean" (the paper's 1/|τ|)
    kl_coef: float = bounded(0.0, at_least=0)
    mini_batches: int = bounded(1, at_least=1)  # optimizer steps per rollout batch (paper: 1)
    micro_batch: int = bounded(
        8, at_least=1
    )  # sequences per forward/backward (gradient accumulation)
    temperature: float = bounded(1.0, at_least=0)
    top_p: float = bounded(1.0, above=0, at_most=1)
    profile: str = "paper"
    profile_overrides: tuple[tuple[str, float], ...] = ()  # e.g. (("delta", 0.0),)
    save_every: int = bounded(5, at_least=0)  # 0: no checkpoints
    keep_checkpoints: int = bounded(2, at_least=1)
    save_rollouts: bool = True
    seed: int = 0


@dataclass(frozen=True)
class EvalStage:
    tasks: TaskSpec = TaskSpec(n=90, seed=90_000)
    temperature: float = bounded(0.0, at_least=0)


@dataclass(frozen=True)
class TinyModel:
    """Model settings. vocab_size … intermediate: the ``tiny`` builder only (``smollm2`` reads its
    sizes from the checkpoint). vision_hidden: the fresh vision tower of ``smollm2``.
    train_layers: -1 trains every parameter; k ≥ 0 only the top k decoder blocks and the final
    norm, and the vision tower only when k covers every block (`codedance.train.smol.freeze_lower`),
    in SFT and GRPO alike."""

    vocab_size: int = bounded(1024, at_least=1)
    tokenizer_split: str = "lines"  # "words" (GPT-2 style), "lines" (merges within a line), "lines-digits" (and digits alone)
    hidden: int = bounded(256, at_least=1)
    layers: int = bounded(4, at_least=1)
    heads: int = bounded(4, at_least=1)
    kv_heads: int = bounded(2, at_least=1)
    intermediate: int = bounded(512, at_least=1)
    vision_hidden: int = bounded(64, at_least=1)
    train_layers: int = bounded(-1, at_least=-1)


@dataclass(frozen=True)
class PipelineConfig:
    out_dir: str = not_resumed("runs/tiny-cpu")
    init: str = (
        "tiny"  # a builder in `pipeline.MODEL_BUILDERS` ("tiny", "smollm2") or a checkpoint folder
    )
    model: TinyModel = TinyModel()
    episode: EpisodeSettings = EpisodeSettings()  # paper: 6 turns in training
    profiles: str = ""  # a YAML file of user prompt profiles (e.g. an import's profiles.yaml)
    rollout: RolloutSettings = RolloutSettings()
    sft: SFTStage = SFTStage()
    grpo: GRPOStage = GRPOStage()
    eval: EvalStage = EvalStage()
    threads: int = not_resumed(2, at_least=1)
    # where the model trains and samples (`codedance.train.device`): auto = the GPU when torch
    # sees one, else the CPU; cpu; cuda[:N]
    device: str = not_resumed("auto")
    ablation_profiles: tuple[str, ...] = ABLATIONS  # named profiles of codedance.rewards

    def __post_init__(self) -> None:
        check_device(self.device)
        for name in (self.grpo.profile, *self.ablation_profiles):
            try:
                get_profile(
                    name, **dict(self.grpo.profile_overrides) if name == self.grpo.profile else {}
                )
            except (ValueError, TypeError) as exc:
                raise SettingsError(f"grpo.profile / ablation_profiles: {exc}") from None
        self.episode.episode_config(
            profiles=self.profiles or None
        )  # an unknown prompt profile raises
        if self.sft.tasks.file:
            raise SettingsError(
                "sft.tasks.file: the SFT teacher solves world tasks only; train on imported "
                "SFT data with `codedance sft --data DIR` and start from it with init=DIR"
            )


# keys the shared declarations moved: old dotted key -> new one
MOVED = {
    **{f"rollout.{k}": f"episode.{k}" for k in ("max_turns", "exec_timeout_s", "prompt_profile")},
    **{
        f"sft.teacher_{k}": f"sft.teacher.{k}"
        for k in ("temperature", "mistake_rate", "code_style")
    },
}


def load_config(
    specs: str | Path | list[str] | tuple[str, ...] | None,
    overrides: list[str] | tuple[str, ...] = (),
) -> PipelineConfig:
    """A `PipelineConfig` from preset names, YAML files (one path, or a list; None: the
    defaults) and ``key=value`` overrides (`codedance.config.load`); a bad file, key or value is
    a `SettingsError`."""
    for item in overrides:
        if "=" not in item:
            raise SettingsError(f"override {item!r} is not key=value")
    given = [str(specs)] if isinstance(specs, (str, Path)) else list(specs or [])
    refuse_moved(
        merged(given + list(overrides), "train"),
        MOVED,
        " (the setting every command shares); rename it",
    )
    return load(PipelineConfig, given + list(overrides), command="train")
