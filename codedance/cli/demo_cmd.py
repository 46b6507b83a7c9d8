"""``codedance demo``: the offline end-to-end run (world tasks, expert teacher, real sandbox,
grades, rewards, advantages, report)."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="Run the whole pipeline offline on the synthetic task world.")


@app.callback(invoke_without_command=True)
def demo(
    tasks: int = typer.Option(18, help="How many tasks (cycling over skills × difficulties)."),
    rollouts: int = typer.Option(4, help="Rollouts per task (the GRPO group size G)."),
    seed: int = typer.Option(0, help="Seed of the task set and of the teacher's sampling."),
    out: Path = typer.Option(Path("runs/demo"), help="Run directory (resumed if it holds this run)."),
    skills: str = typer.Option("all", help="Comma list of skills (see `codedance world list`)."),
    temperature: float = typer.Option(1.0, help="Teacher temperature (0: no mistakes)."),
    mistake_rate: float = typer.Option(0.5, help="Chance of a first mistake on hard tasks."),
    max_turns: int = typer.Option(6, help="Turn budget per episode."),
    reward_profile: str = typer.Option("paper", help="Reward profile (paper, release, ...)."),
    concurrency: int = typer.Option(2, help="Episodes (and sandbox steps) at once."),
) -> None:
    """Generate tasks, run the teacher through the loop, grade, reward, and write a report."""
    from codedance.cli.console import make_console
    from codedance.demo import DemoConfig, DemoError, run_demo
    from codedance.demo_summary import render_table
    from codedance.world import WorldError, parse_skills

    console = make_console()
    try:
        names = () if skills == "all" else parse_skills(skills)
        config = DemoConfig(tasks=tasks, rollouts=rollouts, seed=seed, out=str(out), skills=names,
                            temperature=temperature, mistake_rate=mistake_rate, max_turns=max_turns,
                            reward_profile=reward_profile, concurrency=concurrency)
        result = run_demo(config)
    except (DemoError, WorldError, ValueError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    console.print(render_table(result.rows))
    console.print(f"{result.episodes_run} episodes run, {result.episodes_skipped} resumed, "
                  f"{len(result.failures)} failed, {result.seconds:.1f} s")
    for key, error in result.failures[:5]:
        console.print(f"[red]failed[/red] {key}: {error}")
    console.print(f"report: {Path(result.out_dir) / 'report.html'}")
