"""``codedance verl train``: build what a preset needs, then run verl's ``main_ppo``.

The trainer runs as ``python -m verl.trainer.main_ppo``.

Presets that run here (`LOCAL_PRESETS`): ``cpu-smoke`` (``codedance/presets/verl/cpu_smoke.yaml``).
`run_local` for it, in ``out_dir``:

1. ``data/train.parquet`` / ``data/val.parquet``: ``2 × steps`` (and 2) synthetic-world tasks
   (`codedance.integrations.verl.data.prepare_world`);
2. ``model/``: a tiny randomly initialised Qwen2.5-VL (`tiny_model`, from `codedance.train.tiny`)
   with a byte-level BPE fitted on the episodes' prompt texts, and the PIL image processor's
   config, so verl loads it like any checkpoint (`codedance.integrations.verl.processor` builds
   its processor without torchvision);
3. verl itself, in a subprocess, with the plugin in every process (``VERL_USE_EXTERNAL_MODULES``,
   ``VERL_PLATFORM=cpu`` for the CPU backend, passed to Ray's workers explicitly), verl's
   ``file`` logger writing each step's metrics to ``metrics.jsonl`` as it goes, the rollout
   server's weight loads to ``weight_sync.jsonl``, and verl's console output to ``train.log``.

Extra ``key=value`` arguments are Hydra overrides of the preset (``steps=N`` and ``out_dir=``
are ours). ``CODEDANCE_PROMPT_PROFILE`` / ``CODEDANCE_PROFILES`` in the environment choose the
agent loop's prompt profile (e.g. ``codedance-rl`` from an import's ``profiles.yaml``) in every
process. A run starts afresh (verl's file logger truncates ``metrics.jsonl``); data and model
already in ``out_dir`` are reused. Not handled: the GPU presets (they need a cluster, data and a
checkpoint of your own: ``scripts/train_verl.sh``, docs/verl.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from codedance.config import bounded
from codedance.errors import SettingsError

PRESETS = Path(__file__).resolve().parents[2] / "presets" / "verl"
PLUGIN = "codedance.integrations.verl"
PROFILE_ENV = ("CODEDANCE_PROMPT_PROFILE", "CODEDANCE_PROFILES")


@dataclass(frozen=True)
class LocalPreset:
    config_name: str
    agent_loop_yaml: str
    platform: str | None


LOCAL_PRESETS = {"cpu-smoke": LocalPreset("cpu_smoke", "agent_loop_cpu.yaml", "cpu")}


@dataclass(frozen=True)
class VerlTrainConfig:
    """Settings of ``codedance verl train``, through the one loader (`codedance.config.load`):
    the local preset, the run folder, the GRPO steps, and ``hydra``, overrides of the preset's
    verl config handed to ``main_ppo`` as they are (``trainer.seed=5``)."""

    preset: str = "cpu-smoke"
    out_dir: str = ""
    steps: int = bounded(1, at_least=1)
    hydra: tuple[str, ...] = ()

    def check(self) -> None:
        """Refuse what the loader's types and ranges cannot: an unknown preset, no run folder."""
        if self.preset not in LOCAL_PRESETS:
            raise SettingsError(
                f"unknown preset {self.preset!r}; local presets: {', '.join(LOCAL_PRESETS)} "
                "(GPU presets: scripts/train_verl.sh, docs/verl.md)"
            )
        if not self.out_dir:
            raise SettingsError("out_dir=DIR is required")


def split_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(our ``key=value`` overrides, verl's Hydra overrides) of the command line's extra
    arguments: a key naming a `VerlTrainConfig` setting is ours, any other ``key=value`` (also
    ``+key=`` and ``~key``) is Hydra's."""
    ours_keys = {f.name for f in fields(VerlTrainConfig)}
    ours, hydra = [], []
    for arg in args:
        key, sep, _ = arg.partition("=")
        if not sep and not arg.startswith("~"):
            raise SettingsError(f"expected key=value, got {arg!r}")
        (ours if key.split(".")[0] in ours_keys else hydra).append(arg)
    return ours, hydra


def tiny_model(path: Path, texts: Sequence[str], *, max_pixels: int = 12544, seed: int = 0) -> Path:
    """Save a tiny Qwen2.5-VL checkpoint verl can load (model, tokenizer, image processor)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from codedance.train.tiny import TinySize, build_model, build_tokenizer

    tokenizer = build_tokenizer(texts, vocab_size=512, split="lines-digits")
    model = build_model(
        tokenizer,
        TinySize(
            hidden=64,
            layers=2,
            heads=2,
            kv_heads=1,
            intermediate=128,
            vision_hidden=32,
            vision_depth=1,
        ),
        seed=seed,
    )
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=max_pixels).save_pretrained(str(path))
    return path


def _episode_texts(parquet: Path) -> list[str]:
    """The texts an episode of these rows shows the model (profile prompt, questions, scripted
    turns), for fitting the tiny tokenizer."""
    import pandas as pd

    from codedance.integrations.verl.cpu.scripted_first import ANSWER_TURN, CODE_TURN
    from codedance.integrations.verl.tasks import TASK_KEY, task_from_fields
    from codedance.prompts import get_profile
    from codedance.rollout import Episode, EpisodeConfig

    texts = [CODE_TURN, ANSWER_TURN]
    config = EpisodeConfig(profile=get_profile("release"))
    for info in pd.read_parquet(parquet)["extra_info"]:
        task, _ = task_from_fields(info[TASK_KEY], ())
        texts += [m.text for m in Episode(task, config).messages]
    return texts


def prepare(out_dir: Path, steps: int, batch: int = 2) -> tuple[Path, Path]:
    """(data dir, model dir) in `out_dir`, built unless present."""
    from codedance.integrations.verl.data import prepare_world

    data, model = out_dir / "data", out_dir / "model"
    n_train = batch * steps
    if not (data / "train.parquet").exists() or _rows(data / "train.parquet") < n_train:
        prepare_world(data, n_train=n_train, n_val=batch, seed=0)
    if not (model / "config.json").exists():
        tiny_model(model, _episode_texts(data / "train.parquet"))
    return data, model


def _rows(parquet: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(parquet).metadata.num_rows


def command(
    preset: LocalPreset, run: VerlTrainConfig, data: Path, model: Path
) -> tuple[list[str], dict[str, str]]:
    """The ``main_ppo`` command line and environment for `preset`."""
    out = Path(run.out_dir).resolve()
    env_vars = {
        "VERL_USE_EXTERNAL_MODULES": PLUGIN,
        "CODEDANCE_AGENT_LOOP_YAML": str(PRESETS / preset.agent_loop_yaml),
        "VERL_FILE_LOGGER_PATH": str(out / "metrics.jsonl"),
        "TOKENIZERS_PARALLELISM": "false",
    }
    if preset.platform:
        env_vars["VERL_PLATFORM"] = preset.platform
    for name in PROFILE_ENV:  # the agent loop YAML reads them (an imported prompt profile)
        if os.environ.get(name):
            value = os.environ[name]
            env_vars[name] = str(Path(value).resolve()) if name == "CODEDANCE_PROFILES" else value
    cmd = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        "--config-path",
        str(PRESETS),
        "--config-name",
        preset.config_name,
        f"data.train_files={data.resolve() / 'train.parquet'}",
        f"data.val_files={data.resolve() / 'val.parquet'}",
        f"actor_rollout_ref.model.path={model.resolve()}",
        f"trainer.total_training_steps={run.steps}",
        f"trainer.default_local_dir={out / 'checkpoints'}",
        f"actor_rollout_ref.rollout.custom.hf_server.weight_log={out / 'weight_sync.jsonl'}",
        f"hydra.run.dir={out / 'hydra'}",
        *[f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}='{v}'" for k, v in env_vars.items()],
        *run.hydra,
    ]
    return cmd, {**os.environ, **env_vars}


SUMMARY_KEYS = (
    "step",
    "actor/grad_norm",
    "critic/score/mean",
    "codedance/accuracy",
    "codedance/calls_per_traj",
    "codedance/exec_success",
    "timing_s/step",
)


def step_summary(line: str) -> str:
    """The `SUMMARY_KEYS` of one line of verl's console logger (``key:value - key:value ...``).

    >>> step_summary("(TaskRunner pid=1) step:2 - actor/grad_norm:0.5 - other:1 - "
    ...              "timing_s/step:3.25")
    'step:2 actor/grad_norm:0.5 timing_s/step:3.25'
    """
    pairs = dict(part.strip().rsplit(":", 1) for part in line.split(" - ") if ":" in part)
    pairs = {key.split()[-1]: value for key, value in pairs.items()}
    return " ".join(f"{key}:{pairs[key]}" for key in SUMMARY_KEYS if key in pairs)


def run_local(run: VerlTrainConfig, echo: Callable[[str], None] = print) -> int:
    """Prepare and run a local preset (see the module docstring); returns verl's exit code."""
    from codedance.integrations.verl.environment import check_trl

    run.check()
    preset = LOCAL_PRESETS[run.preset]
    check_trl()
    out_dir = Path(run.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data, model = prepare(out_dir, run.steps)
    for stale in ("metrics.jsonl", "weight_sync.jsonl"):
        (out_dir / stale).unlink(missing_ok=True)
    cmd, env = command(preset, run, data, model)
    log = out_dir / "train.log"
    echo(f"running verl ({run.steps} step(s)); log: {log}")
    with open(log, "w", encoding="utf-8") as handle:
        process = subprocess.Popen(
            cmd,
            cwd=out_dir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        assert process.stdout is not None
        for line in process.stdout:
            handle.write(line)
            if re.search(r"(^|\s)step:\d", line):  # verl's console logger, behind Ray's prefix
                echo(step_summary(line))
        code = process.wait()
    if code != 0:
        echo(
            "".join(
                log.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)[-40:]
            )
        )
    echo(f"verl exited with {code}; metrics: {out_dir / 'metrics.jsonl'}")
    return code
