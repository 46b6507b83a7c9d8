"""``codedance verl``: prepare data for RL on verl, and run a local preset (see docs/verl.md).

    codedance verl prepare-data --out data/verl [-c FILE.yaml] [n_train=N ...] [--print-config]
    codedance verl train --preset cpu-smoke out_dir=runs/verl-cpu [steps=N] [-c FILE.yaml]
        [--print-config] [hydra overrides...]

Settings go through the one loader (``-c FILE.yaml``, ``key=value``, ``--print-config``; flags
are sugar for their keys): ``prepare-data``'s are
`codedance.integrations.verl.data.PrepareDataConfig`, ``train``'s
`codedance.integrations.verl.launch.VerlTrainConfig` (a ``key=value`` that names none of its
settings is a Hydra override of the preset, kept in its ``hydra`` list). GPU runs launch with
``scripts/train_verl.sh`` and a preset from ``codedance/presets/verl``.
``train`` exits with verl's exit code, or 2 on a setting error; both exit 130 when interrupted
(Ctrl-C, SIGTERM). Needs the ``train`` extra.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import typer

from codedance.cli import options as opt
from codedance.cli.console import make_console, user_errors

app = typer.Typer(help="RL on verl: data preparation and local runs.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """RL on verl (see docs/verl.md)."""


@app.command("prepare-data")
@user_errors
def prepare_data(
    overrides: opt.Overrides = None,
    config: opt.Presets = None,
    out: Path = typer.Option(None, help="Folder for train.parquet and val.parquet."),
    n_train: int = typer.Option(None, help="Training tasks from the synthetic world. [2048]"),
    n_val: int = typer.Option(None, help="Validation tasks (seeds after the training ones). [128]"),
    seed: int = typer.Option(None, help="First seed. [0]"),
    skills: str = typer.Option(None, help="Comma-separated skills \\[all]."),
    print_config: opt.PrintConfig = False,
) -> None:
    """Write the synthetic world's tasks as verl parquet files with their images."""
    from codedance.integrations.verl.data import PrepareDataConfig, prepare_world
    from codedance.world import task_cycle

    cfg = opt.resolve(
        PrepareDataConfig,
        config,
        overrides,
        print_config=print_config,
        console=make_console(),
        command="verl-data",
        out=None if out is None else str(out),
        n_train=n_train,
        n_val=n_val,
        seed=seed,
        skills=skills,
    )
    cfg.check()
    names = cfg.skill_names()
    train, val = prepare_world(
        cfg.out, n_train=cfg.n_train, n_val=cfg.n_val, seed=cfg.seed, skills=names
    )
    typer.echo(f"wrote {train} ({cfg.n_train} tasks) and {val} ({cfg.n_val} tasks)")
    cycle = task_cycle(names)
    for split, n in (("train", cfg.n_train), ("val", cfg.n_val)):
        mix = Counter(
            f"{cycle[i % len(cycle)][0]}/{cycle[i % len(cycle)][1].value}" for i in range(n)
        )
        typer.echo(
            f"{split} by skill/difficulty: " + ", ".join(f"{k} {v}" for k, v in sorted(mix.items()))
        )


@app.command("train", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@user_errors
def train(
    ctx: typer.Context,
    config: opt.Presets = None,
    preset: str = typer.Option(
        None, help="Local preset: cpu-smoke (GRPO on the CPU backend) \\[cpu-smoke]"
    ),
    print_config: opt.PrintConfig = False,
) -> None:
    """Build a preset's tiny model and data, then run GRPO steps with verl's main_ppo.
    Arguments: out_dir=DIR (required), steps=N (default 1), and Hydra overrides of the preset."""
    from dataclasses import replace

    from codedance.config import dump
    from codedance.integrations.verl.launch import VerlTrainConfig, run_local, split_args

    ours, hydra = split_args(ctx.args)
    console = make_console()
    cfg = opt.resolve(
        VerlTrainConfig, config, ours, print_config=False, console=console, preset=preset
    )
    cfg = replace(cfg, hydra=(*cfg.hydra, *hydra))  # after a file's own, so they win in Hydra
    if print_config:
        console.print(dump(cfg), end="", markup=False, highlight=False)
        raise typer.Exit(0)
    raise typer.Exit(run_local(cfg, echo=typer.echo))
