"""``codedance demo``: the offline end-to-end run (world tasks, expert teacher, real sandbox,
grades, rewards, advantages, report).

    codedance demo [-c PRESET|FILE.yaml]... [key=value]... [--tasks N --rollouts G ...]

Settings are `codedance.demo.DemoConfig` (``codedance presets ls demo``; the flags below are
sugar for its keys and win over presets and files).
"""

from __future__ import annotations

from pathlib import Path

import typer

from codedance.cli import options as opt
from codedance.cli.console import user_errors

app = typer.Typer(help="Run the whole pipeline offline on the synthetic task world.")


@app.command()
@user_errors
def demo(
    overrides: opt.Overrides = None,
    config: opt.Presets = None,
    tasks: int = typer.Option(
        None,
        help="How many tasks (cycling over skills × difficulties) [18].",
        rich_help_panel=opt.RUN,
    ),
    rollouts: int = typer.Option(
        None, help="Rollouts per task (the GRPO group size G) [4].", rich_help_panel=opt.RUN
    ),
    seed: opt.TeacherSeed = None,
    out: Path = typer.Option(
        None,
        metavar="DIR",
        help="Run directory, resumed if it holds this run \\[runs/demo].",
        rich_help_panel=opt.RUN,
    ),
    skills: opt.Skills = None,
    reward_profile: str = typer.Option(
        None, help="Reward profile: paper, release, ... \\[paper].", rich_help_panel=opt.RUN
    ),
    concurrency: opt.Episodes = None,
    temperature: opt.TeacherTemperature = None,
    mistake_rate: opt.MistakeRate = None,
    max_turns: opt.TurnBudget = None,
    print_config: opt.PrintConfig = False,
) -> None:
    """Generate tasks, run the teacher through the loop, grade, reward, and write a report."""
    from codedance.cli.console import make_console
    from codedance.demo import DemoConfig, run_demo
    from codedance.demo.summary import render_table

    console = make_console()
    cfg = opt.resolve(
        DemoConfig,
        config,
        overrides,
        print_config=print_config,
        console=console,
        command="demo",
        tasks=tasks,
        rollouts=rollouts,
        seed=seed,
        out=None if out is None else str(out),
        reward_profile=reward_profile,
        concurrency=concurrency,
        skills=None if skills in (None, "all") else skills,
        teacher__temperature=temperature,
        teacher__mistake_rate=mistake_rate,
        episode__max_turns=max_turns,
    )
    result = run_demo(cfg)
    console.print(render_table(result.rows))
    console.print(
        f"{result.episodes_run} episodes run, {result.episodes_skipped} resumed, "
        f"{len(result.failures)} failed, {result.seconds:.1f} s"
    )
    for key, error in result.failures[:5]:
        console.print(f"[red]failed[/red] {key}: {error}")
    console.print(f"report: {Path(result.out_dir) / 'report.html'}")
