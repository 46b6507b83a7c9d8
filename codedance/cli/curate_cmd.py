"""``codedance curate``: the data engine over your images and questions with your model servers.

    codedance curate run curate.yaml                      # all configured stages, resumable
    codedance curate run curate.yaml --dry-run            # the plan and the request budget,
                                                          # nothing sent
    codedance curate run local-vllm sources.yaml filter.k=8   # a preset, a file, an override

Settings: `codedance.curate.config` through the one config loader (`codedance.config`: presets
under ``codedance presets ls curate``, YAML files, ``key=value``). See docs/curate.md.
"""

from __future__ import annotations

import json

import typer

from codedance.cli.console import make_console, user_errors

app = typer.Typer(
    help="Curate SFT data with weak/strong/judge model servers (the paper's data engine).",
    no_args_is_help=True,
)


@app.command("run")
@user_errors
def run(
    specs: list[str] = typer.Argument(
        ...,
        metavar="CONFIG... [KEY=VALUE]...",
        help="Curate YAML files or presets, then overrides (docs/curate.md).",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the plan and request budget; send nothing."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines."),
    print_config: bool = typer.Option(
        False, "--print-config", help="Print the resolved settings and exit."
    ),
) -> None:
    """Run the stages of CONFIG; a rerun with the same settings resumes by item key."""
    import sys

    import yaml

    from codedance.curate import load_config, plan, run_curate
    from codedance.curate.config import run_settings_of

    console = make_console()
    config = load_config(specs)
    if print_config:
        shown = {
            "out": str(config.out),
            "stages": list(config.stages),
            "sandboxes": config.sandboxes,
            **run_settings_of(config),
        }
        console.print(yaml.safe_dump(shown, sort_keys=False), end="", markup=False, highlight=False)
        return
    if dry_run:
        print(json.dumps(plan(config), indent=2))
        return
    result = run_curate(config, None if quiet else sys.stderr)
    console.print(
        f"{result.accepted} accepted of {result.items} items in {result.seconds:.1f} s; "
        f"report: {config.out / 'report.html'}, records: {config.out / 'sft.jsonl'}"
    )
    if result.down:
        console.print(f"[red]stopped:[/red] {result.down}; rerun the same command to resume")
        raise typer.Exit(1)
