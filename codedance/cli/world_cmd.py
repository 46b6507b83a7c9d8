"""``codedance world``: list skills, generate tasks to files, measure the teacher's accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(help="The synthetic task world and its expert teacher.", no_args_is_help=True)


@app.command("list")
def list_skills() -> None:
    """Print the skills and difficulties."""
    from codedance.world import DIFFICULTIES, skills

    for name in skills():
        print(name, " ".join(d.value for d in DIFFICULTIES))


@app.command()
def gen(
    out: Path = typer.Option(..., help="Directory for tasks.jsonl and the PNG images."),
    n: int = typer.Option(18, help="How many tasks."),
    seed: int = typer.Option(0, help="First seed."),
    skills: str = typer.Option("all", help="Comma list of skills."),
) -> None:
    """Write n tasks (question, gold answer, kind, labels, image file) to a directory."""
    from codedance.world import WorldError, task_set

    try:
        tasks = task_set(n, seed, None if skills == "all" else skills.split(","))
    except WorldError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "tasks.jsonl", "w") as f:
        for t in tasks:
            (out / f"{t.id}.png").write_bytes(t.images[0].png)
            f.write(json.dumps({"id": t.id, "question": t.question, "answer": t.answer,
                                "kind": t.kind.value, "choices": [list(c) for c in t.choices],
                                "image": f"{t.id}.png", "metadata": dict(t.metadata)}) + "\n")
    typer.echo(f"{len(tasks)} tasks in {out}")


@app.command()
def accuracy(
    n: int = typer.Option(36, help="Tasks per run (cycling over skills × difficulties)."),
    seed: int = typer.Option(1000, help="First seed."),
    rollouts: int = typer.Option(2, help="Rollouts per task."),
    skills: str = typer.Option("all", help="Comma list of skills."),
    temperature: float = typer.Option(1.0, help="Teacher temperature."),
    mistake_rate: float = typer.Option(0.5, help="First-mistake rate on hard tasks."),
) -> None:
    """Measure the teacher through the real sandbox; print accuracy per skill and difficulty."""
    from codedance.cli.console import make_console
    from codedance.teacher import TeacherConfig
    from codedance.teacher.accuracy import measure
    from codedance.world import WorldError, parse_skills, task_set

    try:
        tasks = task_set(n, seed, parse_skills(None if skills == "all" else skills))
    except WorldError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    report = measure(tasks, TeacherConfig(temperature, mistake_rate, seed), rollouts=rollouts)
    make_console().print(report.table())
