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

    tasks = task_set(n, seed, None if skills == "all" else skills.split(","))  # WorldError: one line, exit 2
    if out.exists() and not out.is_dir():
        raise SettingsError(f"--out {out} is a file; give a folder")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "tasks.jsonl", "w") as f:
        for t in tasks:
            (out / f"{t.id}.png").write_bytes(t.images[0].png)
            f.write(json.dumps({"id": t.id, "question": t.question, "answer": t.answer,
                                "kind": t.kind.value, "choices": [list(c) for c in t.choices],
                                "image": f"{t.id}.png", "metadata": dict(t.metadata)}) + "\n")
    make_console().print(f"{len(tasks)} tasks in {out}", markup=False, highlight=False)


@app.command()
@user_errors
def accuracy(
    n: int = typer.Option(36, help="Tasks per run (cycling over skills × difficulties).", rich_help_panel=opt.RUN),
    seed: int = typer.Option(1000, help="First seed.", rich_help_panel=opt.RUN),
    rollouts: int = typer.Option(2, help="Rollouts per task.", rich_help_panel=opt.RUN),
    skills: opt.Skills = None,
    temperature: opt.TeacherTemperature = None,
    mistake_rate: opt.MistakeRate = None,
) -> None:
    """Measure the teacher through the real sandbox; print accuracy per skill and difficulty."""
    from codedance.config import load
    from codedance.teacher import TeacherConfig
    from codedance.teacher.accuracy import measure
    from codedance.world import parse_skills, task_set

    teacher = load(TeacherConfig, seed=seed, temperature=temperature, mistake_rate=mistake_rate)  # SettingsError
    tasks = task_set(n, seed, parse_skills(None if skills in (None, "all") else skills))  # WorldError: one line
    report = measure(tasks, teacher, rollouts=rollouts)
    make_console().print(report.table())
