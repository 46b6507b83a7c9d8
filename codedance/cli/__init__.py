"""The ``codedance`` command line: thin commands that parse options and call one library function.

Commands are listed in pipeline order. Each lives in its own module; errors a person can act on
print one line and exit with code 2 (`codedance.cli.console.user_errors`). An interrupted command
(Ctrl-C or SIGTERM) keeps its finished work, closes its sandboxes and exits with code 130.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="codedance",
    help="Executable visual reasoning: sandbox, rollout loop, rewards, training and evaluation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

from codedance.cli import (
    curate_cmd,
    data_cmd,
    demo_cmd,
    eval_cmd,
    grading_cmd,
    presets_cmd,
    sandbox_cmd,
    sft_cmd,
    solve_cmd,
    synth_cmd,
    train_cmd,
    verl_cmd,
    world_cmd,
)

RUN, TOOLS = "Run (in pipeline order)", "Tools"
app.add_typer(sandbox_cmd.app, name="sandbox", rich_help_panel=TOOLS)
app.command(
    "solve",
    rich_help_panel=RUN,
    help="Solve one question about one or more images with a served model.",
)(solve_cmd.solve)
app.command(
    "demo", rich_help_panel=RUN, help="Run the whole pipeline offline on the synthetic task world."
)(demo_cmd.demo)
app.add_typer(world_cmd.app, name="world", rich_help_panel=TOOLS)
app.add_typer(data_cmd.app, name="data", rich_help_panel=RUN)
app.add_typer(curate_cmd.app, name="curate", rich_help_panel=RUN)
app.command(
    "synth",
    rich_help_panel=RUN,
    help="Synthesize verified SFT trajectories with the expert teacher.",
)(synth_cmd.synth)
app.command("eval", rich_help_panel=RUN, help="Evaluate a served model on the paper's benchmarks.")(
    eval_cmd.eval_
)
app.command("report", rich_help_panel=RUN, help="Compare evaluation runs side by side.")(
    eval_cmd.report
)
app.add_typer(grading_cmd.app, name="grading", rich_help_panel=TOOLS)
app.command(
    "train",
    rich_help_panel=RUN,
    help="Train on CPU: SFT then GRPO on the synthetic world or imported tasks (--tasks).",
)(train_cmd.train)
app.command(
    "sft",
    rich_help_panel=RUN,
    help="Supervised fine-tuning on trajectories (TRL), or export for ms-swift.",
)(sft_cmd.sft)
app.add_typer(verl_cmd.app, name="verl", rich_help_panel=TOOLS)
app.add_typer(presets_cmd.app, name="presets", rich_help_panel=TOOLS)


def main() -> None:
    from codedance.cli.console import interrupt_on_sigterm

    interrupt_on_sigterm()
    app()


if __name__ == "__main__":
    main()
