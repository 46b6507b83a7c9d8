"""``codedance world``: list skills, generate tasks to files, measure the teacher's accuracy.
Bad settings (an unknown skill, a file as ``--out``) are one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from codedance.cli import options as opt
from codedance.cli.console import make_console, user_errors

app = typer.Typer(help="The synthetic task world and its expert teacher.", no_args_is_help=True)


@app.command("list")
@user_errors
def list_skills() -> None:
    """Print the skills and difficulties."""
    from codedance.world import DIFFICULTIES, skills

    console = make_console()
    for name in skills():
        console.print(name, " ".join(d.value for d in DIFFICULTIES), markup=False, highlight=False)


@app.command()
@user_errors
def gen(
    out: Path = typer.Option(..., help="Directory for tasks.jsonl and the PNG images."),
    n: int = typer.Option(18, help="How many tasks."),
    seed: int = typer.Option(0, help="First seed."),
    skills: str = typer.Option("all", help="Comma list of skills."),
) -> None:
    """Write n tasks (question, gold answer, kind, labels, image file) to a directory."""
    from codedance.errors import SettingsError
    from codedance.world import task_set

    tasks = task_set(
        n, seed, None if skills == "all" else skills.split(",")
    )  # WorldError: one line, exit 2
    if out.exists() and not out.is_dir():
        raise SettingsError(f"--out {out} is a file; give a folder")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "tasks.jsonl", "w") as f:
        for t in tasks:
            (out / f"{t.id}.png").write_bytes(t.images[0].png)
            f.write(
                json.dumps(
                    {
                        "id": t.id,
                        "question": t.question,
                        "answer": t.answer,
                        "kind": t.kind.value,
                        "choices": [list(c) for c in t.choices],
                        "image": f"{t.id}.png",
                        "metadata": dict(t.metadata),
                    }
                )
                + "\n"
            )
    make_console().print(f"{len(tasks)} tasks in {out}", markup=False, highlight=False)


@app.command()
@user_errors
def accuracy(
    overrides: opt.Overrides = None,
    config: opt.Presets = None,
    n: int = typer.Option(
        None,
        help="Tasks per run (cycling over skills × difficulties) \\[36].",
        rich_help_panel=opt.RUN,
    ),
    seed: int = typer.Option(None, help="First seed \\[1000].", rich_help_panel=opt.RUN),
    rollouts: int = typer.Option(None, help="Rollouts per task \\[2].", rich_help_panel=opt.RUN),
    skills: opt.Skills = None,
    out: Path = typer.Option(
        None,
        metavar="DIR",
        help="Run folder, resumed if it holds this run \\[runs/teacher-accuracy].",
        rich_help_panel=opt.RUN,
    ),
    concurrency: opt.Episodes = None,
    temperature: opt.TeacherTemperature = None,
    mistake_rate: opt.MistakeRate = None,
    print_config: opt.PrintConfig = False,
) -> None:
    """Measure the teacher through the real sandbox; print accuracy per skill and difficulty.
    Settings are `codedance.teacher.accuracy.AccuracyConfig` (the flags are sugar for its keys);
    the episodes go to a run folder, and a rerun with the same settings resumes it."""
    from codedance.teacher.accuracy import AccuracyConfig, measure_config

    console = make_console()
    cfg = opt.resolve(
        AccuracyConfig,
        config,
        overrides,
        print_config=print_config,
        console=console,
        command="world-accuracy",
        n=n,
        seed=seed,
        rollouts=rollouts,
        skills=None if skills in (None, "all") else skills,
        out=None if out is None else str(out),
        concurrency=concurrency,
        teacher__temperature=temperature,
        teacher__mistake_rate=mistake_rate,
    )
    report = measure_config(cfg)  # an unknown skill: WorldError, one line, exit 2
    console.print(report.table())
    console.print(f"run folder: {report.out_dir}", markup=False, highlight=False)
    if report.failures:
        key, error = report.failures[0]
        console.print(
            f"[red]{len(report.failures)} episodes failed[/red] (first: {key}: {error}); "
            f"rerun the same command to retry them"
        )
        raise typer.Exit(1)
