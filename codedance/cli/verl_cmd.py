"""``codedance verl``: prepare data for RL on verl (see docs/verl.md). Launching is
``scripts/train_verl.sh`` with a preset from ``codedance/presets/verl``."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="RL on verl: data preparation.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """RL on verl (see docs/verl.md)."""


@app.command("prepare-data")
def prepare_data(
    out: Path = typer.Option(..., help="Folder for train.parquet and val.parquet."),
    n_train: int = typer.Option(2048, help="Training tasks from the synthetic world."),
    n_val: int = typer.Option(128, help="Validation tasks (seeds after the training ones)."),
    seed: int = typer.Option(0, help="First seed."),
    skills: str = typer.Option("", help="Comma-separated skills (default: all)."),
) -> None:
    """Write the synthetic world's tasks as verl parquet files with their images."""
    from codedance.integrations.verl.data import prepare_world

    names = [s.strip() for s in skills.split(",") if s.strip()] or None
    train, val = prepare_world(out, n_train=n_train, n_val=n_val, seed=seed, skills=names)
    typer.echo(f"wrote {train} ({n_train} tasks) and {val} ({n_val} tasks)")
