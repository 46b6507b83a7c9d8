"""``codedance sandbox check`` (the contract checks), ``codedance sandbox run`` (a snippet file
against images, from the shell) and ``codedance sandbox gc`` (what dead services left)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from codedance.cli.console import echo_untrusted, make_console, user_errors
from codedance.cli.options import image_file
from codedance.errors import SettingsError

app = typer.Typer(help="The transactional code sandbox.", no_args_is_help=True)


@app.command()
@user_errors
def check(
    image: Path = typer.Option(None, exists=True, dir_okay=False,
                               help="Image to give the sandboxes (default: the bundled example)."),
    require: str = typer.Option(None, help="Refuse to run below this isolation: 'full' or a comma list "
                                "of namespaces,users,seccomp,cgroups,rlimits."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON lines."),
) -> None:
    """Check every sandbox property on this host and print the isolation level achieved."""
    from codedance.sandbox import SandboxService
    from codedance.sandbox.checks import check_sandbox
    from codedance.sandbox.isolation import normalize_requirement

    console = make_console(stderr=as_json)
    data = image_file(image) if image else None  # a bad image is the user's file, not a failed property
    try:
        normalize_requirement(require)
    except ValueError as exc:  # an unknown layer name
        raise SettingsError(f"--require: {exc}") from None
    service = SandboxService()
    try:
        service.isolation.require(require)  # SandboxUnavailable: one message, exit 2
    except BaseException:
        service.close()
        raise
    console.print(service.isolation.describe())

    def show(result) -> None:
        if as_json:
            print(json.dumps(result.__dict__), flush=True)
            return
        colour = {"passed": "green", "failed": "red", "skipped": "yellow"}[result.outcome]
        console.print(f"[{colour}]{result.outcome:>7}[/{colour}]  {result.number}. {result.name} "
                      f"({result.seconds:.1f} s): {result.detail}")  # fmt: skip

    results = check_sandbox(service=service, image=data, on_result=show)
    service.close()
    failed = [r for r in results if r.outcome == "failed"]
    console.print(f"{len(results) - len(failed)}/{len(results)} properties hold "
                  f"at isolation level '{service.isolation.level}'")  # fmt: skip
    raise typer.Exit(1 if failed else 0)


@app.command()
@user_errors
def run(
    snippet: Path = typer.Argument(..., help="Python file to run ('-' for standard input)."),
    image: list[Path] = typer.Option([], "--image", "-i", exists=True, dir_okay=False,
                                     help="Input image (repeatable)."),
    timeout: float = typer.Option(15.0, help="Wall-clock limit in seconds."),
    out: Path = typer.Option(None, help="Directory to save the returned images in."),
) -> None:
    """Run one snippet against images in a fresh sandbox and print what came back."""
    from codedance.sandbox import Sandbox

    try:
        code = sys.stdin.read() if str(snippet) == "-" else snippet.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read the snippet {snippet}: {exc}") from None
    if timeout <= 0:
        raise SettingsError(f"--timeout must be above 0, got {timeout}")
    images = [image_file(p) for p in image]
    try:
        sandbox = Sandbox(images=images, timeout_s=timeout)
    except ValueError as exc:  # an --image that is not an image
        raise SettingsError(f"--image: {exc}") from None
    with sandbox:
        result = sandbox.run(code)
    typer.echo(f"status: {result.status.value} ({result.duration_s * 1000:.0f} ms"
               f"{', rolled back' if result.rolled_back else ''})")  # fmt: skip
    # what the snippet wrote reaches a terminal with its control characters escaped
    if result.stdout:
        echo_untrusted(result.stdout.rstrip("\n"))
    if result.stderr:
        echo_untrusted(result.stderr.rstrip("\n"), err=True)
    if result.error:
        echo_untrusted(result.error.traceback, err=True)
    for note in result.notes:
        echo_untrusted(f"note: {note}", err=True)
    if out and result.images:
        out.mkdir(parents=True, exist_ok=True)
        for index, returned in enumerate(result.images):
            path = out / f"image_{index}.png"
            path.write_bytes(returned.png)
            echo_untrusted(f"image {index}: {returned.width}x{returned.height} from {returned.origin} -> {path}")
    elif result.images:
        typer.echo(f"{len(result.images)} image(s) returned (pass --out DIR to save them)")
    raise typer.Exit(0 if result.ok else 1)


@app.command()
@user_errors
def gc() -> None:
    """Remove the directories and cgroups left by sandbox services that died without closing
    (a controller killed with SIGKILL). Live services are never touched: each holds a lock."""
    from codedance.sandbox.leftovers import sweep

    swept = sweep()
    typer.echo(f"removed the leftovers of {len(swept)} dead sandbox service(s)"
               + (f": {', '.join(swept)}" if swept else ""))
