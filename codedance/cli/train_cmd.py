"""``codedance train``: the CPU-scale pipeline (SFT on teacher trajectories, then GRPO).

    codedance train --preset tiny-cpu [--ablation] [key=value ...]
    codedance train --preset testbed --ablation --seeds 3        (every profile × 3 seeds, resumable)
    codedance train --config my.yaml grpo.steps=4 out_dir=runs/quick

Presets live in ``codedance/presets/train/`` (each header gives its command). ``--ablation``
runs the GRPO stage under the paper, outcome-only, deepeyes and paper-δ=0 reward profiles from
one SFT checkpoint; ``--seeds N`` with it runs each profile's GRPO for seeds 0..N-1 from that
checkpoint (``grpo-<profile>-s<k>``) and writes ``ablation.md`` / ``curves.png`` with 95 % intervals over the seeds
(`codedance.train.seeds`); ``--stage sft`` stops after SFT. Prints the held-out table and writes
``<out_dir>/report.html``. Exit code 2 on a setting error. Needs the ``train`` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from codedance.cli.console import make_console, user_errors

if TYPE_CHECKING:
    from codedance.train.config import PipelineConfig

app = typer.Typer(help="Train the policy: SFT then GRPO on the synthetic world, on CPU.")


def preset_path(preset: str | None, config: Path | None) -> Path | None:
    from codedance.config import preset_path as find

    if config is not None:
        return config
    return None if preset is None else find("train", preset)


def load_cli_config(preset: str | None, config: Path | None, overrides: list[str] | None) -> PipelineConfig:
    """The `PipelineConfig` of ``--preset``/``--config`` with the ``key=value`` overrides; a bad
    setting is a `SettingsError` (one line, exit 2, through `user_errors`)."""
    from codedance.errors import SettingsError
    from codedance.train.config import load_config

    try:
        return load_config(preset_path(preset, config), list(overrides or []))
    except SettingsError:
        raise
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


def print_table(console: Console, evals: dict[str, dict[str, float]]) -> None:
    keys = ("accuracy", "accuracy/easy", "accuracy/hard", "calls", "calls/easy", "calls/hard", "exec_success")
    table = Table(title="held-out tasks (in run order)")
    table.add_column("stage", no_wrap=True)
    for key in keys:
        table.add_column(key, no_wrap=True)
    for name, m in evals.items():
        table.add_row(name, *(f"{m[k]:.3f}" if isinstance(m.get(k), float) and m[k] == m[k] else "–" for k in keys))
    console.print(table)


@app.command()
@user_errors
def train(
    overrides: list[str] = typer.Argument(None, help="key=value settings, e.g. grpo.steps=4"),
    preset: str = typer.Option("tiny-cpu", help="Preset name in codedance/presets/train"),
    config: Path | None = typer.Option(None, help="A YAML config file instead of a preset"),
    ablation: bool = typer.Option(False, "--ablation", help="GRPO under each ablation reward profile"),
    stage: str = typer.Option("all", help="all, or sft (stop after SFT)"),
    seeds: int = typer.Option(0, help="with --ablation: each profile's GRPO for seeds 0..N-1 "
                                      "and ablation.md with 95 % intervals over them"),
) -> None:
    from codedance.errors import SettingsError

    console = make_console()
    if stage not in ("all", "sft"):
        raise SettingsError(f"--stage must be all or sft, got {stage!r}")
    if seeds and (not ablation or stage != "all" or seeds < 0):
        raise SettingsError("--seeds N needs --ablation (and no --stage), with N ≥ 1")
    cfg = load_cli_config(preset, config, overrides)
    try:
        import torch
        from transformers.utils import logging as hf_logging

        torch.set_num_threads(cfg.threads)
        hf_logging.disable_progress_bar()  # per-shard bars bury the stage lines in a log
    except ImportError:
        raise SettingsError("training needs the train extra: pip install 'codedance[train]'") from None
    from codedance.train.pipeline import run_ablation, run_pipeline, run_sft_stage
    from codedance.train.report import write_report

    log = console.print
    if seeds:
        from codedance.train.seeds import run_seeds

        run_seeds(cfg, seeds, log)
        console.print((Path(cfg.out_dir) / "ablation.md").read_text(encoding="utf-8"), markup=False)
        console.print(f"summary: {Path(cfg.out_dir) / 'ablation.md'}, curves: {Path(cfg.out_dir) / 'curves.png'}")
        return
    if stage == "sft":
        run_sft_stage(cfg, log)
        evals = write_report(cfg.out_dir)
    else:
        evals = run_ablation(cfg, log) if ablation else run_pipeline(cfg, log)
    print_table(console, evals)
    console.print(f"report: {Path(cfg.out_dir) / 'report.html'}")
