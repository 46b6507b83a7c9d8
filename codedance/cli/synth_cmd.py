"""``codedance synth``: verified teacher trajectories of the task world as SFT data.

    codedance synth [-c PRESET|FILE.yaml]... [key=value]... [--skills counting,search --n 50 ...]

Settings are `codedance.synth.SynthConfig` (``codedance presets ls synth``; the flags below are
sugar for its keys and win over presets and files; ``--print-config`` shows the result). Writes
``sft.jsonl`` (canonical records), ``swift.jsonl`` and ``trl.jsonl`` (exports),
``trajectories.jsonl`` + ``images/`` (for ``codedance sft --data``) and ``summary.json``
(accepted, rejected by reason); see `codedance.synth.run`. A rerun with the same settings resumes.
"""

from __future__ import annotations

from pathlib import Path

import typer

from codedance.cli import options as opt
from codedance.cli.console import make_console, user_errors

app = typer.Typer(
    help="Synthesize verified SFT trajectories from the task world with the expert teacher."
)


@app.command()
@user_errors
def synth(
    overrides: opt.Overrides = None,
    config: opt.Presets = None,
    n: int = typer.Option(
        None, "--n", help="Accepted records wanted [36].", rich_help_panel=opt.RUN
    ),
    out: Path = typer.Option(
        None,
        metavar="DIR",
        help="Run directory, resumed if it holds this run \\[runs/synth].",
        rich_help_panel=opt.RUN,
    ),
    skills: opt.Skills = None,
    difficulties: str = typer.Option(
        None, help="Comma list of difficulties \\[easy,medium,hard].", rich_help_panel=opt.RUN
    ),
    seed: opt.TeacherSeed = None,
    max_tasks: int = typer.Option(
        None, help="Tasks to try at most; 0: 2·n + 10 [0].", rich_help_panel=opt.RUN
    ),
    concurrency: opt.Episodes = None,
    temperature: opt.TeacherTemperature = None,
    mistake_rate: opt.MistakeRate = None,
    max_turns: opt.TurnBudget = None,
    print_config: opt.PrintConfig = False,
) -> None:
    """Run the teacher, re-execute and verify each trajectory, write the accepted ones as SFT
    data."""
    from codedance.synth import SynthConfig, run_synth

    console = make_console()
    names = (
        None if skills in (None, "all") else skills
    )  # checked (unknown skills named) before the run
    cfg = opt.resolve(
        SynthConfig,
        config,
        overrides,
        print_config=print_config,
        console=console,
        command="synth",
        n=n,
        out=None if out is None else str(out),
        skills=names,
        difficulties=difficulties,
        seed=seed,
        max_tasks=max_tasks,
        concurrency=concurrency,
        teacher__temperature=temperature,
        teacher__mistake_rate=mistake_rate,
        episode__max_turns=max_turns,
    )
    result = run_synth(cfg)
    rejected = ", ".join(f"{reason} {count}" for reason, count in result.rejected) or "none"
    console.print(
        f"accepted {result.accepted}/{cfg.n} of {result.tried} tasks tried ({result.ran} this run, "
        f"{result.seconds:.1f} s); rejected: {rejected}; episodes failed: {result.failures}"
    )
    console.print(f"by skill: {result.mix_line()}")
    where = Path(cfg.out)
    console.print(
        f"records: {where / 'sft.jsonl'}, exports: {where / 'swift.jsonl'}, {where / 'trl.jsonl'}"
    )
    if result.accepted < cfg.n:
        console.print(
            f"[yellow]only {result.accepted} of {cfg.n} records: rerun with a larger --max-tasks "
            "to try more tasks (the run resumes)[/yellow]"
        )
        raise typer.Exit(1)
