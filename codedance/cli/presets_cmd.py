"""``codedance presets ls`` / ``codedance presets cp NAME FILE``: the presets of every command
(`codedance.config`), listed, and copied out to edit (torchtune's ``tune ls`` / ``tune cp``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from codedance.cli.console import make_console, user_errors

app = typer.Typer(
    help="List the presets of every command, or copy one to edit.", no_args_is_help=True
)


@app.command("ls")
@user_errors
def ls(
    command: str = typer.Argument(
        None, help="Only this command's presets (demo, train, verl, ...)."
    ),
) -> None:
    """List presets per command, with the first line of each (its command)."""
    from codedance.config import preset_path, presets

    console = make_console()
    for name, items in presets(command).items():
        console.print(f"[bold]{name}[/bold]")
        for item in items:
            first = preset_path(name, item).read_text(encoding="utf-8").splitlines()[:1]
            hint = first[0].lstrip("# ").strip() if first and first[0].startswith("#") else ""
            console.print(f"  {item:<24} {hint}", markup=False, highlight=False)


@app.command("cp")
@user_errors
def cp(
    name: str = typer.Argument(
        ..., help="COMMAND/PRESET, e.g. train/tiny-cpu (or a unique preset name)."
    ),
    file: Path = typer.Argument(
        ..., help="Where to write the copy (an existing file is not replaced)."
    ),
) -> None:
    """Copy a preset to FILE; run it with ``-c FILE`` (or ``--config FILE`` for train)."""
    from codedance.config import preset_path, presets
    from codedance.errors import SettingsError

    if "/" in name:
        command, preset = name.split("/", 1)
    else:
        owners = [c for c, items in presets().items() if name in items]
        if len(owners) != 1:
            raise SettingsError(
                f"preset {name!r} is {'ambiguous' if owners else 'unknown'}; "
                "name it as COMMAND/PRESET (codedance presets ls)"
            )
        command, preset = owners[0], name
    if file.exists():
        raise SettingsError(f"{file} exists; choose another file")
    if not file.parent.is_dir():
        raise SettingsError(f"{file.parent} is not a folder; create it or choose another file")
    shutil.copyfile(preset_path(command, preset), file)
    make_console().print(f"copied {command}/{preset} to {file}")
