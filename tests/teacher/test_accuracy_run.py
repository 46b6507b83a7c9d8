"""``codedance world accuracy`` on the runs layer: the episodes go to a run folder that a rerun
resumes (running nothing twice), another setting is refused, and the mistakes are the teacher's
own draws."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from codedance.cli import app
from codedance.runs.rundir import RunDir
from codedance.teacher import ExpertTeacher, TeacherConfig
from codedance.teacher.accuracy import cells_of
from codedance.world import task_set

pytestmark = pytest.mark.tier("integration")


def test_the_report_resumes_its_run_folder_and_refuses_other_settings(tmp_path):
    out = tmp_path / "acc"
    args = [
        "world",
        "accuracy",
        "--n",
        "6",
        "--rollouts",
        "2",
        "--skills",
        "counting",
        "--seed",
        "7",
        "--mistake-rate",
        "1",
        "--out",
        str(out),
    ]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "teacher accuracy" in first.output and f"run folder: {out}" in first.output
    assert json.loads((out / "run.json").read_text())["kind"] == "teacher-accuracy"
    saved = (out / "trajectories.jsonl").read_text()
    assert len(saved.splitlines()) == 12
    assert json.loads((out / "report.json").read_text())["episodes_run"] == 12

    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "teacher accuracy" in again.output and first.output.endswith(
        again.output
    )  # the same table, no bar
    assert (out / "trajectories.jsonl").read_text() == saved
    assert json.loads((out / "report.json").read_text())["episodes_run"] == 0

    other = CliRunner().invoke(app, [*args, "--rollouts", "3"])
    assert other.exit_code == 2 and "other settings" in other.output and "rollouts" in other.output

    tasks = task_set(6, 7, ["counting"])
    teacher = ExpertTeacher(TeacherConfig(mistake_rate=1.0, seed=7))
    cells = {c.difficulty: c for c in cells_of(tasks, teacher, RunDir(out))}
    assert sorted(cells) == ["easy", "hard", "medium"] and all(c.n == 4 for c in cells.values())
    drawn = sum(
        teacher.policy(t, k).mistake is not None
        for t in tasks
        for k in range(2)
        if dict(t.metadata)["difficulty"] == "hard"
    )
    assert (
        cells["hard"].mistakes == drawn > 0
        and cells["easy"].mistakes == cells["medium"].mistakes == 0
    )
    assert cells["hard"].recovered <= cells["hard"].mistakes
