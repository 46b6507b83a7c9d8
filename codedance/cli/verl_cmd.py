"""``codedance verl``: prepare data for RL on verl, and run a local preset (see docs/verl.md).

    codedance verl prepare-data --out data/verl
    codedance verl train --preset cpu-smoke out_dir=runs/verl-cpu [steps=N] [hydra overrides...]

GPU runs launch with ``scripts/train_verl.sh`` and a preset from ``codedance/presets/verl``.
``train`` exits with verl's exit code, or 2 on a setting error; both exit 130 when interrupted
(Ctrl-C, SIGTERM). Needs the ``train`` extra.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import typer

from codedance.cli.console import user_errors

app = typer.Typer(help="RL on verl: data preparation and local runs.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """RL on verl (see docs/verl.md)."""


@app.command("prepare-data")
@user_errors
def prepare_data(
    out: Path = typer.Option(..., help="Folder for train.parquet and val.parquet."),
    n_train: int = typer.Option(2048, help="Training tasks from the synthetic world."),
    n_val: int = typer.Option(128, help="Validation tasks (seeds after the training ones)."),
    seed: int = typer.Option(0, help="First seed."),
    skills: str = typer.Option("", help="Comma-separated skills (default: all)."),
) -> None:
    """Write the synthetic world's tasks as verl parquet files with their images."""
    from codedance.integrations.verl.data import prepare_world
    from codedance.world import task_cycle

    names = [s.strip() for s in skills.split(",") if s.strip()] or None
    train, val = prepare_world(out, n_train=n_train, n_val=n_val, seed=seed, skills=names)
    typer.echo(f"wrote {train} ({n_train} tasks) and {val} ({n_val} tasks)")
    cycle = task_cycle(names)
    for split, n in (("train", n_train), ("val", n_val)):
        mix = Counter(f"{cycle[i % len(cycle)][0]}/{cycle[i % len(cycle)][1].value}" for i in range(n))
        typer.echo(f"{split} by skill/difficulty: " + ", ".join(f"{k} {v}" for k, v in sorted(mix.items())))


@app.command("train", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@user_errors
def train(
    ctx: typer.Context,
    preset: str = typer.Option("cpu-smoke", help="Local preset: cpu-smoke (GRPO on the CPU backend)."),
) -> None:
    """Build a preset's tiny model and data, then run GRPO steps with verl's main_ppo.
    Arguments: out_dir=DIR (required), steps=N (default 1), and Hydra overrides."""
    from codedance.integrations.verl.launch import run_local

    try:
        code = run_local(preset, list(ctx.args), echo=typer.echo)
    except (ValueError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    raise typer.Exit(code)
