"""``codedance world``: list skills, generate tasks to files, measure the teacher's accuracy.
Bad settings (an unknown skill, a file as ``--out``) are one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import typer

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
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help="Settings, e.g. episode.max_turns=4"),
    config: list[str] = typer.Option([], "-c", "--config", metavar="SPEC", help="A YAML file (repeatable)."),
    n: int = typer.Option(None, help="Tasks per run (cycling over skills × difficulties) [36]."),
    seed: int = typer.Option(None, help="First seed [1000]."),
    rollouts: int = typer.Option(None, help="Rollouts per task [2]."),
    skills: str = typer.Option(None, help="Comma list of skills [all]."),
    temperature: float = typer.Option(None, help="Teacher temperature [1.0]."),
    mistake_rate: float = typer.Option(None, help="First-mistake rate on hard tasks [0.5]."),
    print_config: bool = typer.Option(False, "--print-config", help="Print the resolved settings and exit."),
) -> None:
    """Measure the teacher through the real sandbox; print accuracy per skill and difficulty.
    Settings are `codedance.teacher.accuracy.AccuracyConfig` (the flags are sugar for its keys)."""
    from codedance.config import dump, load
    from codedance.teacher.accuracy import AccuracyConfig, measure_config

    cfg = load(AccuracyConfig, [*config, *(overrides or [])], command="world-accuracy", n=n, seed=seed,
               rollouts=rollouts, skills=None if skills in (None, "all") else skills,
               teacher__temperature=temperature, teacher__mistake_rate=mistake_rate)
    if print_config:
        make_console().print(dump(cfg), end="", markup=False, highlight=False)
        return
    make_console().print(measure_config(cfg).table())  # an unknown skill: WorldError, one line, exit 2
