"""``codedance synth``: verified teacher trajectories of the task world as SFT data.

    codedance synth --skills counting,search --n 50 --out runs/synth

Writes ``sft.jsonl`` (canonical records), ``swift.jsonl`` and ``trl.jsonl`` (exports),
``trajectories.jsonl`` + ``images/`` (for ``codedance sft --data``) and ``summary.json``
(accepted, rejected by reason); see `codedance.synth.run`. A rerun with the same settings resumes.
"""

from __future__ import annotations

from pathlib import Path

import typer

from codedance.cli.console import user_errors

app = typer.Typer(help="Synthesize verified SFT trajectories from the task world with the expert teacher.")


@app.command()
@user_errors
def synth(
    n: int = typer.Option(36, "--n", help="Accepted records wanted."),
    out: Path = typer.Option(Path("runs/synth"), help="Run directory (resumed if it holds this run)."),
    skills: str = typer.Option("all", help="Comma list of skills (see `codedance world list`)."),
    difficulties: str = typer.Option("easy,medium,hard", help="Comma list of difficulties."),
    seed: int = typer.Option(0, help="Seed of the first task and of the teacher's sampling."),
    max_tasks: int = typer.Option(0, help="Tasks to try at most (0: 2·n + 10)."),
    temperature: float = typer.Option(1.0, help="Teacher temperature (0: no first mistakes)."),
    mistake_rate: float = typer.Option(0.5, help="Chance of a noticed-and-corrected first mistake on hard tasks."),
    max_turns: int = typer.Option(6, help="Turn budget per episode."),
    concurrency: int = typer.Option(2, help="Episodes (and sandbox steps) at once."),
) -> None:
    """Run the teacher, re-execute and verify each trajectory, write the accepted ones as SFT data."""
    from codedance.cli.console import make_console
    from codedance.synth import SynthConfig, SynthError, run_synth
    from codedance.world import WorldError, parse_skills

    console = make_console()
    try:
        names = () if skills == "all" else parse_skills(skills)
        levels = tuple(d.strip() for d in difficulties.split(",") if d.strip())
        config = SynthConfig(n=n, out=str(out), skills=names, difficulties=levels, seed=seed,
                             max_tasks=max_tasks, temperature=temperature, mistake_rate=mistake_rate,
                             max_turns=max_turns, concurrency=concurrency)
        result = run_synth(config)
    except (SynthError, WorldError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    rejected = ", ".join(f"{reason} {count}" for reason, count in result.rejected) or "none"
    console.print(f"accepted {result.accepted}/{n} of {result.tried} tasks tried ({result.ran} this run, "
                  f"{result.seconds:.1f} s); rejected: {rejected}; episodes failed: {result.failures}")
    console.print(f"by skill: {result.mix_line()}")
    console.print(f"records: {out / 'sft.jsonl'}, exports: {out / 'swift.jsonl'}, {out / 'trl.jsonl'}")
    if result.accepted < n:
        console.print(f"[yellow]only {result.accepted} of {n} records: rerun with a larger --max-tasks "
                      "to try more tasks (the run resumes)[/yellow]")
        raise typer.Exit(1)
