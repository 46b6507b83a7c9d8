"""``codedance data``: import the authors' released data, verify it in the sandbox, describe it.

    codedance data import codedance-sft CodeDance-SFT/data --out data/cd-sft [--verify]
    codedance data import codedance-rl CodeDance-RL/data --out data/cd-rl
    codedance data verify data/cd-sft [--concurrency 8]
    codedance data stats data/cd-sft

Every command resumes when rerun with the same ``--out``. Exit codes: 0 done; 1 when an import
kept no row at all (every row skipped: the wrong dataset?); 2 on bad input
(missing files, wrong columns, a folder of another import, an option out of range: checked before
any row is read or sandbox started); 130 when interrupted (Ctrl-C, SIGTERM). See docs/data.md and
`codedance.data`.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from codedance.cli.console import make_console, user_errors
from codedance.rollout import EXEC_TIMEOUT_S

app = typer.Typer(help="Import, verify and describe the authors' released datasets.", no_args_is_help=True)
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
    console.print(f"{what}: {result.imported} imported, {skipped} skipped of {result.rows} rows read "
                  f"({result.total} in the input; {result.ran} this run, {result.seconds:.1f} s) → {result.out}")
    for reason, n in result.skipped.items():
        console.print(f"  skipped {n}: {reason}")
    for name, n in result.conventions.items():
        if not name.startswith("prompt template"):
            console.print(f"  {name}: {n}")


def _nothing_imported(console, result) -> None:  # type: ignore[no-untyped-def]
    """An import folder without one row is no dataset: say so and exit 1 instead of printing
    the next step's command."""
    if result.imported == 0:
        console.print("[red]nothing imported:[/red] every row was skipped (the reasons are above); "
                      "is it the right dataset for this import?")
        raise typer.Exit(1)


def _check_import(limit: int | None, val_fraction: float = 0.0) -> None:
    from codedance.errors import SettingsError

    if limit is not None and limit < 1:
        raise SettingsError(f"--limit must be at least 1, got {limit}")
    if not 0 <= val_fraction < 1:
        raise SettingsError(f"--val-fraction must be at least 0 and below 1, got {val_fraction}")


def _fail(console, exc: Exception) -> None:  # type: ignore[no-untyped-def]
    console.print(f"[red]error:[/red] {exc}")
    raise typer.Exit(2) from None


def _verify(console, out: Path, concurrency: int, tolerance: float, timeout_s: float,  # type: ignore[no-untyped-def]
            limit: int | None) -> None:
    from rich.table import Table

    from codedance.data.verify import ROW_VERDICTS, STEP_VERDICTS, verify_dir

    bar = _Bar("verify")
    try:
        result = verify_dir(out, concurrency=concurrency, tolerance=tolerance, timeout_s=timeout_s,
                            limit=limit, progress=bar)
    finally:
        bar.stop()
    table = Table(title=f"re-execution in the sandbox ({result.ran} this run, {result.seconds:.1f} s)")
    table.add_column("level")
    table.add_column("verdict")
    table.add_column("count", justify="right")
    for level, counts, order in (("trajectory", result.rows, ROW_VERDICTS), ("step", result.steps, STEP_VERDICTS)):
        for verdict in order:
            if counts.get(verdict):
                table.add_row(level, verdict, str(counts[verdict]))
    for kind, n in result.divergence.items():
        table.add_row("divergence", kind, str(n))
    console.print(table)
    console.print(f"per-trajectory verdicts: {out / 'verify.jsonl'}; totals: {out / 'verify_summary.json'}")


@import_app.command("codedance-sft")
@user_errors
def import_sft_cmd(
    paths: list[Path] = typer.Argument(..., help="Parquet files or folders (the dataset's data/)"),
    out: Path = typer.Option(..., help="Output folder (rerun to resume)"),
    verify: bool = typer.Option(False, "--verify", help="Then re-execute every trajectory in the sandbox"),
    limit: int | None = typer.Option(None, help="Import at most this many new rows"),
    concurrency: int = typer.Option(2, help="--verify: trajectories (and sandbox steps) at once"),
    tolerance: float = typer.Option(0.02, help="--verify: mean absolute pixel difference allowed (0-1)"),
    timeout_s: float = typer.Option(EXEC_TIMEOUT_S, help="--verify: seconds per snippet (the release: 15)"),
) -> None:
    """CodeDance-SFT → trajectory records (what `codedance sft --data OUT` trains on)."""
    from codedance.data.sft_import import import_sft
    from codedance.data.stream import InputError
    from codedance.data.verify import check_options

    _check_import(limit)
    if verify:
        check_options(concurrency=concurrency, tolerance=tolerance, timeout_s=timeout_s)
    console = make_console()
    bar = _Bar("import")
    try:
        result = import_sft(paths, out, progress=lambda p: bar(p.done, p.total), limit=limit)
    except (InputError, FileNotFoundError) as exc:
        _fail(console, exc)
    finally:
        bar.stop()
    _report(console, result, "codedance-sft")
    _nothing_imported(console, result)
    console.print(f"train: codedance sft --data {out} --model MODEL --out runs/sft; "
                  f"ms-swift: codedance sft --data {out} --export-swift {out / 'swift.jsonl'}")
    if verify:
        _verify(console, out, concurrency, tolerance, timeout_s, None)


@import_app.command("codedance-rl")
@user_errors
def import_rl_cmd(
    paths: list[Path] = typer.Argument(..., help="Parquet files or folders (the dataset's data/)"),
    out: Path = typer.Option(..., help="Output folder (rerun to resume)"),
    val_fraction: float = typer.Option(0.005, help="Share of rows held out for val.parquet (by key hash)"),
    limit: int | None = typer.Option(None, help="Import at most this many new rows"),
) -> None:
    """CodeDance-RL → Task JSONL plus verl's train.parquet / val.parquet."""
    from codedance.data.rl_import import import_rl
    from codedance.data.stream import InputError

    _check_import(limit, val_fraction)
    console = make_console()
    bar = _Bar("import")
    try:
        result = import_rl(paths, out, val_fraction=val_fraction, progress=lambda p: bar(p.done, p.total),
                           limit=limit)
    except (InputError, FileNotFoundError, ValueError, ImportError) as exc:
        _fail(console, exc)
    finally:
        bar.stop()
    _report(console, result, "codedance-rl")
    _nothing_imported(console, result)
    rows = json.loads((out / "summary.json").read_text())["verl_rows"]
    console.print(f"verl parquet: train.parquet {rows['train']} rows, val.parquet {rows['val']} rows")
    if not rows["val"]:
        console.print("[yellow]val.parquet is empty: raise --val-fraction (verl validates on it)[/yellow]")
    console.print(f"verl: DATA={out} bash scripts/train_verl.sh codedance/presets/verl/single_node_8gpu.yaml; "
                  f"tasks: {out / 'tasks.jsonl'}; prompt profile: --profiles {out / 'profiles.yaml'} "
                  "--profile codedance-rl")


@app.command("verify")
@user_errors
def verify_cmd(
    out: Path = typer.Argument(..., help="A codedance-sft import folder"),
    concurrency: int = typer.Option(2, help="Trajectories (and sandbox steps) at once"),
    tolerance: float = typer.Option(0.02, help="Mean absolute pixel difference allowed (0-1)"),
    timeout_s: float = typer.Option(EXEC_TIMEOUT_S, help="Seconds per snippet (the release: 15)"),
    limit: int | None = typer.Option(None, help="Verify at most this many new trajectories"),
) -> None:
    """Re-execute imported trajectories turn by turn in the sandbox; compare with the recording."""
    from codedance.data.verify import check_options

    check_options(concurrency=concurrency, tolerance=tolerance, timeout_s=timeout_s, limit=limit)
    console = make_console()
    if not (out / "trajectories.jsonl").exists():
        _fail(console, FileNotFoundError(f"no {out / 'trajectories.jsonl'}: import with "
                                         f"`codedance data import codedance-sft PATH --out {out}` first"))
    _verify(console, out, concurrency, tolerance, timeout_s, limit)


@app.command("stats")
def stats_cmd(
    out: Path = typer.Argument(..., help="An import folder"),
    png: Path | None = typer.Option(None, help="Histogram file (default OUT/stats.png)"),
) -> None:
    """Tables of an import folder and a histogram PNG."""
    from codedance.data.stats import collect, histogram, tables

    console = make_console()
    try:
        stats = collect(out)
    except FileNotFoundError as exc:
        _fail(console, exc)
    for table in tables(stats):
        console.print(table)
    written = histogram(stats, png or out / "stats.png")
    if written is not None:
        console.print(f"histograms: {written}")
