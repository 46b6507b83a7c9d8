"""The ``codedance`` command line: thin commands that parse options and call one library function.

Each command group lives in its own module and is registered here.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="codedance",
    help="Executable visual reasoning: sandbox, rollout loop, rewards, training and evaluation.",
    no_args_is_help=True,
    add_completion=False,
)

from codedance.cli import (
    curate_cmd,
    data_cmd,
    demo_cmd,
    eval_cmd,
    grading_cmd,
    sandbox_cmd,
    sft_cmd,
    solve_cmd,
    synth_cmd,
    train_cmd,
    verl_cmd,
    world_cmd,
)

app.add_typer(sandbox_cmd.app, name="sandbox")
app.add_typer(grading_cmd.app, name="grading")
app.add_typer(solve_cmd.app, name="solve")
app.add_typer(demo_cmd.app, name="demo")
app.add_typer(world_cmd.app, name="world")
app.add_typer(synth_cmd.app, name="synth")
app.add_typer(eval_cmd.app, name="eval")
app.add_typer(verl_cmd.app, name="verl")
app.add_typer(train_cmd.app, name="train")
app.add_typer(sft_cmd.app, name="sft")
app.add_typer(data_cmd.app, name="data")
app.add_typer(curate_cmd.app, name="curate")
app.command("report", help="Compare evaluation runs side by side.")(eval_cmd.report)


def main() -> None:
    app()
