"""``codedance data``: import the authors' released data, verify it in the sandbox, describe it.

    codedance data import codedance-sft CodeDance-SFT/data --out data/cd-sft [--verify]
    codedance data import codedance-rl CodeDance-RL/data --out data/cd-rl
    codedance data verify data/cd-sft [--concurrency 8 | concurrency=8] [-c FILE.yaml] \\
        [--print-config]
    codedance data stats data/cd-sft [--png FILE | png=FILE] [-c FILE.yaml] [--print-config]

Settings of import, verify and stats are `codedance.data.options` trees through the one loader
(``-c FILE.yaml``, ``key=value``, ``--print-config``); the flags are sugar for their keys and win
over files and overrides. Every command resumes when rerun with the same ``--out``. Exit codes: 0
done; 1 when an import kept no row at all (every row skipped: the wrong dataset?); 2 on bad input
(missing files, wrong columns, a folder of another import, an option out of range: checked before
any row is read or sandbox started); 130 when interrupted (Ctrl-C, SIGTERM). See docs/data.md and
`codedance.data`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from codedance.cli import options as opt
from codedance.cli.console import make_console, user_errors

app = typer.Typer(
    help="Import, verify and describe the authors' released datasets.", no_args_is_help=True
)
import_app = typer.Typer(help="Import a released dataset's parquet files.", no_args_is_help=True)
app.add_typer(import_app, name="import")


class _Bar:
    """rich's progress bar (done/total, elapsed, remaining) behind a callback that is told the
    totals, started at the first call (the total is known only then)."""

    def __init__(self, label: str) -> None:
        self.label, self.bar = label, None

    def __call__(self, done: int, total: int) -> None:
        from codedance.runs.batch import BatchProgress

        if self.bar is None:
            self.bar = BatchProgress(total, self.label, done=done)
        self.bar.set(done)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _report(console, result, what: str) -> None:  # type: ignore[no-untyped-def]
    skipped = sum(result.skipped.values())
    console.print(
        f"{what}: {result.imported} imported, {skipped} skipped of {result.rows} rows read "
        f"({result.total} in the input; {result.ran} this run, {result.seconds:.1f} s) "
        f"→ {result.out}"
    )
    for reason, n in result.skipped.items():
        console.print(f"  skipped {n}: {reason}")
    for name, n in result.conventions.items():
        if not name.startswith("prompt template"):
            console.print(f"  {name}: {n}")


def _nothing_imported(console, result) -> None:  # type: ignore[no-untyped-def]
    """An import folder without one row is no dataset: say so and exit 1 instead of printing
    the next step's command."""
    if result.imported == 0:
        console.print(
            "[red]nothing imported:[/red] every row was skipped (the reasons are above); "
            "is it the right dataset for this import?"
        )
        raise typer.Exit(1)


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _verify(
    console,
    out: Path,
    concurrency: int,
    tolerance: float,
    timeout_s: float,  # type: ignore[no-untyped-def]
    limit: int | None,
) -> None:
    from rich.table import Table

    from codedance.data.verify import ROW_VERDICTS, STEP_VERDICTS, verify_dir

    bar = _Bar("verify")
    try:
        result = verify_dir(
            out,
            concurrency=concurrency,
            tolerance=tolerance,
            timeout_s=timeout_s,
            limit=limit,
            progress=bar,
        )
    finally:
        bar.stop()
    table = Table(
        title=f"re-execution in the sandbox ({result.ran} this run, {result.seconds:.1f} s)"
    )
    table.add_column("level")
    table.add_column("verdict")
    table.add_column("count", justify="right")
    for level, counts, order in (
        ("trajectory", result.rows, ROW_VERDICTS),
        ("step", result.steps, STEP_VERDICTS),
    ):
        for verdict in order:
            if counts.get(verdict):
                table.add_row(level, verdict, str(counts[verdict]))
    for kind, n in result.divergence.items():
        table.add_row("divergence", kind, str(n))
    console.print(table)
    console.print(
        f"per-trajectory verdicts: {out / 'verify.jsonl'}; totals: {out / 'verify_summary.json'}"
    )


PATHS = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="PATH... [KEY=VALUE]...",
        show_default=False,
        help="Parquet files or folders (the dataset's data/), then settings, e.g. limit=100 "
        "(all: --print-config)",
    ),
]


@import_app.command("codedance-sft")
@user_errors
def import_sft_cmd(
    items: PATHS = None,
    config: opt.Presets = None,
    out: Path = typer.Option(None, help="Output folder (rerun to resume)"),
    verify: bool = typer.Option(
        None, "--verify", help="Then re-execute every trajectory in the sandbox", show_default=False
    ),
    limit: int = typer.Option(None, help="Import at most this many new rows \\[all]"),
    concurrency: int = typer.Option(
        None, help="--verify: trajectories (and sandbox steps) at once [2]"
    ),
    tolerance: float = typer.Option(
        None, help="--verify: mean absolute pixel difference allowed (0-1) [0.02]"
    ),
    timeout_s: float = typer.Option(
        None, help="--verify: seconds per snippet (the release: 15) [15]"
    ),
    print_config: opt.PrintConfig = False,
) -> None:
    """CodeDance-SFT → trajectory records (what `codedance sft --data OUT` trains on)."""
    from codedance.data.options import SftImportConfig
    from codedance.data.sft_import import import_sft

    console = make_console()
    paths, overrides = opt.split_positionals(items)
    cfg = opt.resolve(
        SftImportConfig,
        config,
        overrides,
        print_config=print_config,
        console=console,
        command="data",
        paths=paths or None,
        out=_text(out),
        verify=verify,
        limit=limit,
        concurrency=concurrency,
        tolerance=tolerance,
        timeout_s=timeout_s,
    )
    cfg.check()
    out = Path(cfg.out)
    bar = _Bar("import")
    try:
        result = import_sft(
            [Path(p) for p in cfg.paths],
            out,
            progress=lambda p: bar(p.done, p.total),
            limit=cfg.limit,
        )
    finally:
        bar.stop()
    _report(console, result, "codedance-sft")
    _nothing_imported(console, result)
    console.print(
        f"train: codedance sft --data {out} --model MODEL --out runs/sft; "
        f"ms-swift: codedance sft --data {out} --export-swift {out / 'swift.jsonl'}"
    )
    if cfg.verify:
        _verify(console, out, cfg.concurrency, cfg.tolerance, cfg.timeout_s, None)


@import_app.command("codedance-rl")
@user_errors
def import_rl_cmd(
    items: PATHS = None,
    config: opt.Presets = None,
    out: Path = typer.Option(None, help="Output folder (rerun to resume)"),
    val_fraction: float = typer.Option(
        None, help="Share of rows held out for val.parquet (by key hash) [0.005]"
    ),
    limit: int = typer.Option(None, help="Import at most this many new rows \\[all]"),
    print_config: opt.PrintConfig = False,
) -> None:
    """CodeDance-RL → Task JSONL plus verl's train.parquet / val.parquet."""
    from codedance.data.options import RlImportConfig
    from codedance.data.rl_import import import_rl

    console = make_console()
    paths, overrides = opt.split_positionals(items)
    cfg = opt.resolve(
        RlImportConfig,
        config,
        overrides,
        print_config=print_config,
        console=console,
        command="data",
        paths=paths or None,
        out=_text(out),
        val_fraction=val_fraction,
        limit=limit,
    )
    cfg.check()
    out = Path(cfg.out)
    bar = _Bar("import")
    try:
        result = import_rl(
            [Path(p) for p in cfg.paths],
            out,
            val_fraction=cfg.val_fraction,
            progress=lambda p: bar(p.done, p.total),
            limit=cfg.limit,
        )
    finally:
        bar.stop()
    _report(console, result, "codedance-rl")
    _nothing_imported(console, result)
    rows = json.loads((out / "summary.json").read_text())["verl_rows"]
    console.print(
        f"verl parquet: train.parquet {rows['train']} rows, val.parquet {rows['val']} rows"
    )
    if not rows["val"]:
        console.print(
            "[yellow]val.parquet is empty: raise --val-fraction (verl validates on it)[/yellow]"
        )
    console.print(
        f"verl: DATA={out} bash scripts/train_verl.sh "
        "codedance/presets/verl/single_node_8gpu.yaml; "
        f"tasks: {out / 'tasks.jsonl'}; prompt profile: --profiles {out / 'profiles.yaml'} "
        "--profile codedance-rl"
    )


@app.command("verify")
@user_errors
def verify_cmd(
    items: list[str] | None = typer.Argument(
        None,
        metavar="DIR [KEY=VALUE]...",
        show_default=False,
        help="A codedance-sft import folder, then settings, e.g. concurrency=8 "
        "(all: --print-config)",
    ),
    config: opt.Presets = None,
    concurrency: int = typer.Option(None, help="Trajectories (and sandbox steps) at once [2]"),
    tolerance: float = typer.Option(
        None, help="Mean absolute pixel difference allowed (0-1) [0.02]"
    ),
    timeout_s: float = typer.Option(None, help="Seconds per snippet (the release: 15) [15]"),
    limit: int = typer.Option(None, help="Verify at most this many new trajectories \\[all]"),
    print_config: opt.PrintConfig = False,
) -> None:
    """Re-execute imported trajectories turn by turn in the sandbox; compare with the recording."""
    from codedance.data.options import VerifyConfig

    console = make_console()
    cfg = _folder_settings(
        VerifyConfig,
        items,
        config,
        print_config,
        console,
        concurrency=concurrency,
        tolerance=tolerance,
        timeout_s=timeout_s,
        limit=limit,
    )
    cfg.check()
    _verify(console, Path(cfg.out), cfg.concurrency, cfg.tolerance, cfg.timeout_s, cfg.limit)


def _folder_settings(kind, items, config, print_config, console, **flags):  # type: ignore[no-untyped-def]
    """A command's settings from ``DIR [KEY=VALUE]...``: one import folder (its ``out``), then
    overrides, through the one loader."""
    from codedance.errors import SettingsError

    folders, overrides = opt.split_positionals(items)
    if len(folders) > 1:
        raise SettingsError(f"give one import folder, got {len(folders)}: {' '.join(folders)}")
    return opt.resolve(
        kind,
        config,
        overrides,
        print_config=print_config,
        console=console,
        command="data",
        out=folders[0] if folders else None,
        **flags,
    )


@app.command("stats")
@user_errors
def stats_cmd(
    items: list[str] | None = typer.Argument(
        None,
        metavar="DIR [KEY=VALUE]...",
        show_default=False,
        help="An import folder, then settings, e.g. png=hist.png (all: --print-config)",
    ),
    config: opt.Presets = None,
    png: Path | None = typer.Option(None, help="Histogram file \\[OUT/stats.png]"),
    print_config: opt.PrintConfig = False,
) -> None:
    """Tables of an import folder and a histogram PNG."""
    from codedance.data.options import StatsConfig
    from codedance.data.stats import collect, histogram, tables

    console = make_console()
    cfg = _folder_settings(StatsConfig, items, config, print_config, console, png=_text(png))
    cfg.check()
    out = Path(cfg.out)
    stats = collect(out)
    for table in tables(stats):
        console.print(table)
    written = histogram(stats, Path(cfg.png) if cfg.png else out / "stats.png")
    if written is not None:
        console.print(f"histograms: {written}")
