"""``codedance train``: the CPU-scale pipeline (SFT on teacher trajectories, then GRPO).

    codedance train [-c PRESET|FILE.yaml]... [key=value ...] [--ablation [--seeds N]] \\
        [--print-config]
    codedance train -c my.yaml grpo.steps=4 out_dir=runs/quick
    codedance train --tasks data/codedance-rl grpo.steps=2     # GRPO and held-out eval on an import
    codedance train --preset testbed --ablation --seeds 3 --publish docs/testbed
        # 3 SFT seeds × every profile, resumable

Settings are `codedance.train.config.PipelineConfig` through the one loader (presets in
``codedance/presets/train/``, default ``tiny-cpu``; ``--preset NAME`` is ``-c NAME``; each preset's
header gives its command). ``--tasks PATH`` (a Task JSONL or the folder ``codedance data import
codedance-rl`` wrote) is sugar for ``grpo.tasks.file=PATH grpo.tasks.split=train
eval.tasks.file=PATH eval.tasks.split=val`` plus ``profiles=PATH/profiles.yaml`` when the folder
has one (``key=value`` overrides refine them). ``--ablation`` runs the GRPO stage under each
ablation reward profile from one SFT checkpoint; ``--seeds N`` with it trains one SFT per seed
k < N (``sft-s<k>/``), measures every profile's first-turn push on it, runs each profile's GRPO
with seed k from it (``sft-s<k>/grpo-<profile>-s<k>``) and writes ``ablation.md`` /
``curves.png`` with 95 % intervals over the seeds (`codedance.train.seeds`), copied into
``--publish DIR`` after every stage; ``--stage sft`` stops
after SFT. Prints the held-out table and writes ``<out_dir>/report.html``. Exit code 2 on a setting
error. Needs the ``train`` extra.
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


def load_cli_config(
    preset: str | None,
    config: Path | list[str] | None,
    overrides: list[str] | None,
    tasks: Path | None = None,
) -> PipelineConfig:
    """The `PipelineConfig` of ``--preset`` then ``--config`` (files or preset names), then what
    ``--tasks`` sets, then the ``key=value`` overrides; a bad setting is a `SettingsError` (one
    line, exit 2, through `user_errors`)."""
    from codedance.train.config import load_config

    specs = ([preset] if preset else []) + (
        [str(config)] if isinstance(config, Path) else list(config or [])
    )
    given = []
    if tasks is not None:
        given += [
            f"grpo.tasks.file={tasks}",
            "grpo.tasks.split=train",
            f"eval.tasks.file={tasks}",
            "eval.tasks.split=val",
        ]
        profiles = (tasks if tasks.is_dir() else tasks.parent) / "profiles.yaml"
        if profiles.is_file():
            given.append(f"profiles={profiles}")
    return load_config(specs, given + list(overrides or []))  # key=value refines what --tasks set


def print_table(console: Console, evals: dict[str, dict[str, float]]) -> None:
    keys = (
        "accuracy",
        "accuracy/easy",
        "accuracy/hard",
        "calls",
        "calls/easy",
        "calls/hard",
        "exec_success",
    )
    table = Table(title="held-out tasks (in run order)")
    table.add_column("stage", no_wrap=True)
    for key in keys:
        table.add_column(key, no_wrap=True)
    for name, m in evals.items():
        table.add_row(
            name,
            *(f"{m[k]:.3f}" if isinstance(m.get(k), float) and m[k] == m[k] else "–" for k in keys),
        )
    console.print(table)


@app.command()
@user_errors
def train(
    overrides: list[str] = typer.Argument(
        None, metavar="[KEY=VALUE]...", help="Settings, e.g. grpo.steps=4"
    ),
    config: list[str] = typer.Option(
        [],
        "-c",
        "--config",
        metavar="SPEC",
        help="A preset name or YAML file (repeatable); default: the tiny-cpu preset.",
    ),
    preset: str = typer.Option(
        None, help="A preset name in codedance/presets/train (the same as -c NAME)."
    ),
    tasks: Path = typer.Option(
        None,
        metavar="PATH",
        help="A Task JSONL or import folder: GRPO on its train "
        "split, held-out eval on its val split (the SFT teacher stays on the world).",
    ),
    ablation: bool = typer.Option(
        False, "--ablation", help="GRPO under each ablation reward profile"
    ),
    stage: str = typer.Option("all", help="all, or sft (stop after SFT)"),
    print_config: bool = typer.Option(
        False, "--print-config", help="Print the resolved settings and exit."
    ),
    seeds: int = typer.Option(
        0,
        help="with --ablation: each profile's GRPO for seeds 0..N-1 "
        "and ablation.md with 95 % intervals over them",
    ),
    publish: Path = typer.Option(
        None,
        metavar="DIR",
        help="with --seeds: also copy ablation.md, ablation.json and curves.png "
        "into DIR after every stage (e.g. docs/testbed)",
    ),
) -> None:
    from codedance.config import dump
    from codedance.errors import SettingsError

    console = make_console()
    if stage not in ("all", "sft"):
        raise SettingsError(f"--stage must be all or sft, got {stage!r}")
    if seeds and (not ablation or stage != "all" or seeds < 0):
        raise SettingsError("--seeds N needs --ablation (and no --stage), with N ≥ 1")
    if publish is not None and not seeds:
        raise SettingsError("--publish DIR needs --ablation --seeds N")
    cfg = load_cli_config(preset if preset or config else "tiny-cpu", config, overrides, tasks)
    if print_config:
        console.print(dump(cfg), end="", markup=False, highlight=False)
        return
    try:
        import torch

        from codedance.train.sft import quiet_libraries

        torch.set_num_threads(cfg.threads)
        quiet_libraries()
    except ImportError:
        raise SettingsError(
            "training needs the train extra: pip install 'codedance[train]'"
        ) from None
    from codedance.train.pipeline import run_ablation, run_pipeline, run_sft_stage
    from codedance.train.report import write_report

    log = console.print
    if seeds:
        from codedance.train.seeds import run_seeds

        run_seeds(cfg, seeds, log, publish=publish)
        console.print((Path(cfg.out_dir) / "ablation.md").read_text(encoding="utf-8"), markup=False)
        console.print(
            f"summary: {Path(cfg.out_dir) / 'ablation.md'}, "
            f"curves: {Path(cfg.out_dir) / 'curves.png'}"
        )
        return
    if stage == "sft":
        run_sft_stage(cfg, log)
        evals = write_report(cfg.out_dir)
    else:
        evals = run_ablation(cfg, log) if ablation else run_pipeline(cfg, log)
    print_table(console, evals)
    console.print(f"report: {Path(cfg.out_dir) / 'report.html'}")
