"""``codedance demo``: the offline end-to-end run (world tasks, expert teacher, real sandbox,
grades, rewards, advantages, report).

    codedance demo [-c PRESET|FILE.yaml]... [key=value]... [--tasks N --rollouts G ...]

Settings are `codedance.demo.DemoConfig` (``codedance presets ls demo``; the flags below are
sugar for its keys and win over presets and files).
"""

from __future__ import annotations

from pathlib import Path

import typer

from codedance.cli.console import user_errors

RUN, TEACHER = "Run", "Teacher and episode"
app = typer.Typer(help="Run the whole pipeline offline on the synthetic task world.")


@app.command()
@user_errors
def demo(
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help="Settings, e.g. episode.max_turns=8"),
    config: list[str] = typer.Option([], "-c", "--config", metavar="SPEC", help="A preset name or YAML file (repeatable)."),
    tasks: int = typer.Option(None, help="How many tasks (cycling over skills × difficulties) [18].", rich_help_panel=RUN),
    rollouts: int = typer.Option(None, help="Rollouts per task (the GRPO group size G) [4].", rich_help_panel=RUN),
    seed: int = typer.Option(None, help="Seed of the task set and of the teacher's sampling [0].", rich_help_panel=RUN),
    out: Path = typer.Option(None, metavar="DIR", help="Run directory, resumed if it holds this run [runs/demo].",
                             rich_help_panel=RUN),
    skills: str = typer.Option(None, help="Comma list of skills (see `codedance world list`) [all].", rich_help_panel=RUN),
    reward_profile: str = typer.Option(None, help="Reward profile: paper, release, ... [paper].", rich_help_panel=RUN),
    concurrency: int = typer.Option(None, help="Episodes (and sandbox steps) at once [2].", rich_help_panel=RUN),
    temperature: float = typer.Option(None, help="Teacher temperature; 0: no mistakes [1.0].", rich_help_panel=TEACHER),
    mistake_rate: float = typer.Option(None, help="Chance of a first mistake on hard tasks [0.5].",
                                       rich_help_panel=TEACHER),
    max_turns: int = typer.Option(None, help="Turn budget per episode [6].", rich_help_panel=TEACHER),
    print_config: bool = typer.Option(False, "--print-config", help="Print the resolved settings and exit."),
) -> None:
    """Generate tasks, run the teacher through the loop, grade, reward, and write a report."""
    from codedance.cli.console import make_console
    from codedance.config import dump, load
    from codedance.demo import DemoConfig, run_demo
    from codedance.demo.summary import render_table

    console = make_console()
    cfg = load(DemoConfig, [*config, *(overrides or [])], command="demo", tasks=tasks, rollouts=rollouts,
               seed=seed, out=None if out is None else str(out), reward_profile=reward_profile,
               concurrency=concurrency, skills=None if skills in (None, "all") else skills,
               teacher__temperature=temperature, teacher__mistake_rate=mistake_rate,
               episode__max_turns=max_turns)
    if print_config:
        console.print(dump(cfg), end="", markup=False, highlight=False)
        return
    result = run_demo(cfg)
    console.print(render_table(result.rows))
    console.print(f"{result.episodes_run} episodes run, {result.episodes_skipped} resumed, "
                  f"{len(result.failures)} failed, {result.seconds:.1f} s")
    for key, error in result.failures[:5]:
        console.print(f"[red]failed[/red] {key}: {error}")
    console.print(f"report: {Path(result.out_dir) / 'report.html'}")
