"""The CPU presets end to end: teacher data → initial model (a `MODEL_BUILDERS` entry: ``tiny``,
a model from a config; ``smollm2``, pretrained SmolLM2 in the Qwen2.5-VL class) → SFT → GRPO, with
held-out evaluation before and after each stage; `run_ablation` repeats the GRPO stage under
several reward profiles from the same SFT checkpoint with the same seeds.

Layout of ``out_dir``: ``run.json`` (the settings that define the run: a rerun with other
settings is refused, naming them, instead of reusing stale stages) and ``config.yaml`` (the
resolved config, loadable with ``--config``), ``teacher/`` (teacher trajectories, resumable), ``init/`` (the untrained
model), ``sft/`` (TRL output, ``sft/final``), ``grpo-<profile>/`` (the GRPO trainer's folder),
``eval/<name>.json`` (held-out metrics), ``report.html`` + PNGs (`report`). Every stage is skipped
when its output exists, so a rerun resumes.

Ablation profiles: the named profiles of `codedance.rewards.ABLATIONS` (``paper``,
``outcome-only``, ``deepeyes``, ``paper-no-turn`` (w/o R_turn), ``paper-delta0``,
``paper-gamma5``). Held-out tasks come from a seed range disjoint from
the SFT and GRPO ones (checked).

Task sources (`stage_tasks`): the synthetic world, or for GRPO and the held-out eval a Task
JSONL (``grpo.tasks.file`` / ``eval.tasks.file``, ``codedance train --tasks DIR``: an imported
CodeDance-RL folder's train and val splits); its tasks keep their domain (math or general) for
the rewards and are graded by rules (`codedance.grading`; the release's LLM judge is not used).
The sources are read, and the held-out/training overlap checked, before ``out_dir`` is claimed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from codedance.config import dump
from codedance.errors import CodeDanceError, SettingsError
from codedance.progress import Eta
from codedance.records import ImageStore, append_jsonl, trajectory_json
from codedance.runs.batch import BatchProgress, run_batch
from codedance.runs.rundir import RunDir, episode_key, run_settings
from codedance.train.config import GRPOStage, PipelineConfig, TaskSpec
from codedance.train.device import place
from codedance.types import Task, Trajectory

Log = Callable[[str], None]


def world_tasks(spec: TaskSpec) -> tuple[Task, ...]:
    from codedance.teacher.policy import SOLVERS
    from codedance.world import skills, task_set

    names = spec.skills or tuple(s for s in skills() if s in SOLVERS)
    return task_set(spec.n, spec.seed, names, spec.difficulties)


@functools.lru_cache(maxsize=4)
def _file_tasks(path: str, split: str, n: int) -> tuple[tuple[Task, str], ...]:
    """(task, domain) of a Task JSONL slice, read once per process (every stage asks again)."""
    from codedance.task_records import load_tasks

    return tuple((t, domain) for t, domain, _ in load_tasks(path, split or None, limit=n))


def stage_tasks(spec: TaskSpec) -> tuple[Task, ...]:
    """The tasks of `spec`: its Task JSONL's (``file``) or the world's."""
    return (
        tuple(t for t, _ in _file_tasks(spec.file, spec.split, spec.n))
        if spec.file
        else world_tasks(spec)
    )


def stage_domains(spec: TaskSpec) -> dict[str, str]:
    """Task id -> reward domain of `spec`'s tasks (world tasks: none listed, all ``general``)."""
    return (
        {t.id: domain for t, domain in _file_tasks(spec.file, spec.split, spec.n)}
        if spec.file
        else {}
    )


def check_tasks(config: PipelineConfig) -> None:
    """Read every task source (a bad file is a one-line `DataError`) and refuse held-out tasks
    that are also training tasks."""
    held = {t.id for t in stage_tasks(config.eval.tasks)}
    train_ids = {t.id for t in stage_tasks(config.sft.tasks)} | {
        t.id for t in stage_tasks(config.grpo.tasks)
    }
    if held & train_ids:
        raise SettingsError(
            f"held-out tasks overlap the training tasks: {sorted(held & train_ids)[:3]}; "
            "give eval.tasks another seed range, file or split"
        )


def claim_run(config: PipelineConfig) -> RunDir:
    """Claim ``out_dir`` for this config (``run.json``; ``config.yaml`` holds the resolved
    config) once its task sources check out: a folder holding a run with other settings is
    refused, naming them, so no stage is ever reused from a run with other settings."""
    check_tasks(config)
    run = RunDir(config.out_dir, "train", run_settings(config))
    run.claim()
    (run.path / "config.yaml").write_text(dump(config), encoding="utf-8")
    return run


def teacher_trajectories(
    config: PipelineConfig, tasks: tuple[Task, ...], log: Log = print
) -> list[Trajectory]:
    """The teacher's rollouts of `tasks` in ``out_dir/teacher`` (`codedance.runs.batch`,
    resumable by key), in task order; an episode that failed stops the pipeline (rerun to retry)."""
    from codedance.sandbox import Sandbox
    from codedance.teacher import ExpertTeacher

    run = RunDir(Path(config.out_dir) / "teacher")
    sft = config.sft
    teacher = ExpertTeacher(sft.teacher)
    timeout = config.episode.exec_timeout_s
    summary = run_batch(
        teacher.policy,
        tasks,
        lambda images: Sandbox(images=images, timeout_s=timeout),
        run,
        episode_config(config),
        rollouts=sft.rollouts_per_task,
        concurrency=config.threads,
    )
    if summary.failures:
        key, error = summary.failures[0]
        raise CodeDanceError(
            f"teacher: {len(summary.failures)} episodes failed (first: {key}: {error}); "
            f"see {run.path / 'failures.jsonl'}"
        )
    order = {
        episode_key(t.id, k): i * sft.rollouts_per_task + k
        for i, t in enumerate(tasks)
        for k in range(sft.rollouts_per_task)
    }
    have = sorted(
        ((key, t) for key, t in run.trajectories() if key in order), key=lambda kt: order[kt[0]]
    )
    log(f"teacher: {len(have)} trajectories in {run.path}")
    return [t for _, t in have]


def episode_config(config: PipelineConfig) -> Any:
    """The `EpisodeConfig` of ``config.episode`` (prompt profiles from ``config.profiles``)."""
    return config.episode.episode_config(profiles=config.profiles or None)


def evaluate(
    model: Any,
    processor: Any,
    config: PipelineConfig,
    tasks: tuple[Task, ...],
    name: str,
    log: Log = print,
) -> dict[str, float]:
    """Held-out metrics (greedy unless ``eval.temperature`` > 0, then sampled with torch seeded by
    the held-out tasks' seed, so a rerun samples the same), cached in ``eval/<name>.json``. With
    the non-adaptive teacher (``sft.teacher.call_rate`` ≥ 0) also ``p_direct`` and ``p_bug``
    (`codedance.train.branch`: the first-turn decisions' probabilities, exact) and ``p_copy``
    (the probability of answering with the tool's printed value, exact)."""
    import torch

    from codedance.grading import grade_trajectory
    from codedance.train.grpo import make_sampler, sandbox_factory
    from codedance.train.metrics import rollout_metrics
    from codedance.train.sampler import run_lockstep

    path = Path(config.out_dir) / "eval" / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    model.eval()
    torch.manual_seed(config.eval.tasks.seed)
    sampler = make_sampler(model, processor, config.rollout, config.eval.temperature)
    episode = episode_config(config)
    bar = BatchProgress(
        len(tasks) * episode.max_turns, f"eval {name}: turns of {len(tasks)} tasks (at most)"
    )
    try:
        trajectories = run_lockstep(
            sampler,
            tasks,
            sandbox_factory(config.episode.exec_timeout_s),
            episode,
            threads=config.threads,
            on_turns=bar.set,
        )
    finally:
        bar.stop()
    correct = [
        grade_trajectory(trajectory=t, task=task).correct
        for t, task in zip(trajectories, tasks, strict=True)
    ]
    metrics = rollout_metrics(trajectories, tasks, correct)
    if (
        config.sft.teacher.call_rate >= 0
    ):  # the non-adaptive teacher's two decisions, exactly (`branch`)
        from codedance.train.branch import bug_probability, copy_probability, direct_probability

        cfg, style = episode_config(config), config.sft.teacher.code_style
        metrics.update(direct_probability(model, processor, tasks, cfg))
        metrics.update(bug_probability(model, processor, tasks, cfg, style))
        metrics.update(copy_probability(model, processor, tasks, cfg, style))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics, indent=1))
    store = ImageStore(path.parent / "images")
    for t in trajectories:
        append_jsonl(
            path.parent / f"{name}.jsonl", trajectory_json(t, store, episode_key(t.task_id, 0))
        )
    log(f"eval {name}: accuracy {metrics['accuracy']:.3f}, calls/traj {metrics['calls']:.2f}")
    return metrics


def build_tiny(config: PipelineConfig, texts: list[str]) -> tuple[Any, Any]:
    """The tiny-cpu builder: a BPE fitted on `texts` and a random Qwen2.5-VL of ``config.model``."""
    from codedance.train.tiny import TinySize, build_model, build_tokenizer

    m = config.model
    tok = build_tokenizer(texts, m.vocab_size, m.tokenizer_split)
    return build_model(
        tok, TinySize(m.hidden, m.layers, m.heads, m.kv_heads, m.intermediate), seed=config.sft.seed
    ), tok


def build_smollm2(config: PipelineConfig, texts: list[str]) -> tuple[Any, Any]:
    """The smol-cpu builder: SmolLM2-135M-Instruct in the Qwen2.5-VL class (`codedance.train.smol`)."""
    from codedance.train.smol import build_smol

    return build_smol(vision_hidden=config.model.vision_hidden, seed=config.sft.seed)


# init name -> builder(config, teacher texts) -> (untrained Qwen2.5-VL model, tokenizer)
MODEL_BUILDERS: dict[str, Callable[[PipelineConfig, list[str]], tuple[Any, Any]]] = {
    "tiny": build_tiny,
    "smollm2": build_smollm2,
}


def trainable(model: Any, config: PipelineConfig) -> Any:
    """Apply ``model.train_layers`` (freeze the lower blocks) and return `model`."""
    if config.model.train_layers >= 0:
        from codedance.train.smol import freeze_lower

        freeze_lower(model, config.model.train_layers)
    return model


def prepare(config: PipelineConfig, log: Log = print) -> tuple[Any, Any, list[Trajectory]]:
    """Teacher data, then the untrained model and its tokenizer from the ``init`` builder (or
    load ``init/``, or the checkpoint folder ``init`` names)."""
    from codedance.prompts import conversation
    from codedance.train.processor import ImageTextProcessor
    from codedance.train.tiny import load_policy, parameter_count, save_policy

    trajectories = teacher_trajectories(config, world_tasks(config.sft.tasks), log)
    init = Path(config.out_dir) / "init"
    if config.init not in MODEL_BUILDERS:
        model, processor = load_policy(config.init)
        return trainable(model, config), processor, trajectories
    if (init / "config.json").exists():
        model, processor = load_policy(init)
        return trainable(model, config), processor, trajectories
    texts = [
        p for t in trajectories for m in conversation(t) for p in m.parts if isinstance(p, str)
    ]
    model, tok = MODEL_BUILDERS[config.init](config, texts)
    processor = ImageTextProcessor(
        tok, min_pixels=config.rollout.min_pixels, max_pixels=config.rollout.max_pixels
    )
    save_policy(init, model, processor)
    log(
        f"{config.init} model: {parameter_count(model) / 1e6:.2f}M parameters, vocabulary {len(tok)}"
    )
    return trainable(model, config), processor, trajectories


def run_sft_stage(config: PipelineConfig, log: Log = print) -> tuple[Any, Any]:
    from codedance.train.sft import run_sft
    from codedance.train.tiny import load_policy

    claim_run(config)
    final = Path(config.out_dir) / "sft" / "final"
    model, processor, trajectories = prepare(config, log)
    held = stage_tasks(config.eval.tasks)
    model = place(model, config.device)
    evaluate(model, processor, config, held, "before-sft", log)
    if not (final / "config.json").exists():
        result = run_sft(
            model,
            processor,
            trajectories,
            config.sft,
            Path(config.out_dir) / "sft",
            max_length=config.rollout.max_length,
            device=config.device,
            log=log,
        )
        log(
            f"sft: {result.steps} steps on {result.sequences} sequences; loss {result.losses[0][1]:.3f} → "
            f"{result.losses[-1][1]:.3f}"
        )
    model, processor = load_policy(final)
    model = place(model, config.device)
    evaluate(model, processor, config, held, "after-sft", log)
    return model, processor


def run_grpo_stage(
    config: PipelineConfig, name: str, stage: GRPOStage, log: Log = print
) -> dict[str, float]:
    """GRPO from ``sft/final`` into ``grpo-<name>``; returns the held-out metrics after it."""
    from codedance.train.grpo import GRPOTrainer
    from codedance.train.tiny import load_policy

    model, processor = load_policy(Path(config.out_dir) / "sft" / "final")
    trainer = GRPOTrainer(
        place(trainable(model, config), config.device),
        processor,
        stage,
        config.rollout,
        config.episode,
        stage_tasks(stage.tasks),
        Path(config.out_dir) / f"grpo-{name}",
        profiles=config.profiles or None,
        domains=stage_domains(stage.tasks),
        threads=config.threads,
    )
    if trainer.resume():
        log(f"grpo-{name}: resumed at step {trainer.step}")
    eta = Eta(stage.steps, trainer.step)
    trainer.train(
        on_step=lambda r: log(
            f"grpo-{name} step {int(r['step'])}/{stage.steps}: acc {r['accuracy']:.3f} calls {r['calls']:.2f} "
            f"reward {r['reward/total']:.3f} loss {r['loss']:.4f} ({r['rollout_s'] + r['update_s']:.0f}s; "
            f"{eta.text(int(r['step']))})"
        ),
        log=log,
    )
    return evaluate(
        trainer.model, processor, config, stage_tasks(config.eval.tasks), f"after-grpo-{name}", log
    )


def run_pipeline(config: PipelineConfig, log: Log = print) -> dict[str, dict[str, float]]:
    """SFT then GRPO under ``grpo.profile``; returns the held-out metrics of every stage."""
    from codedance.train.report import write_report

    run_sft_stage(config, log)
    name = (
        config.grpo.profile
        if not config.grpo.profile_overrides
        else f"{config.grpo.profile}-custom"
    )
    run_grpo_stage(config, name, config.grpo, log)
    return write_report(config.out_dir)


def run_ablation(config: PipelineConfig, log: Log = print) -> dict[str, dict[str, float]]:
    """SFT once, then GRPO under each of ``ablation_profiles`` with the same seeds."""
    from codedance.train.report import write_report

    run_sft_stage(config, log)
    for name in config.ablation_profiles:
        run_grpo_stage(config, name, replace(config.grpo, profile=name, profile_overrides=()), log)
    return write_report(config.out_dir)
