"""``codedance curate``: the data engine over your images and questions with your model servers.

    codedance curate run curate.yaml            # all configured stages, resumable
    codedance curate run curate.yaml --dry-run  # the plan and the request budget, nothing sent

See docs/curate.md and `codedance.curate`.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(help="Curate SFT data with weak/strong/judge model servers (the paper's data engine).",
                  no_args_is_help=True)


@app.command("run")
def run(
    config_path: Path = typer.Argument(..., metavar="CONFIG", help="The curate YAML (docs/curate.md)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and request budget; send nothing."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines."),
) -> None:
    """Run the stages of CONFIG; a rerun resumes by item key."""
    import sys

    from codedance.cli.console import make_console
    from codedance.curate import CurateError, load_config, plan, run_curate

    console = make_console()
    try:
        config = load_config(config_path)
        if dry_run:
            print(json.dumps(plan(config), indent=2))
            return
        result = run_curate(config, None if quiet else sys.stderr)
    except (CurateError, FileNotFoundError, ImportError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    console.print(f"{result.accepted} accepted of {result.items} items in {result.seconds:.1f} s; "
                  f"report: {config.out / 'report.html'}, records: {config.out / 'sft.jsonl'}")
    if result.down:
        console.print(f"[red]stopped:[/red] {result.down}; rerun the same command to resume")
        raise typer.Exit(1)
