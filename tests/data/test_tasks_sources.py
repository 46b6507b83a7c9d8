"""The Task JSONL of a CodeDance-RL import (fixture parquet in the card's schema) as a task source:
``load_tasks`` and its one-line errors, and ``codedance eval --tasks`` over a real HTTP scripted
server with the real sandbox, scored by the rule of each task's kind."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from codedance.cli import app
from codedance.data.rl_import import import_rl
from codedance.errors import DataError
from codedance.policy.replay_server import ReplayServer
from codedance.records import read_jsonl
from codedance.task_records import load_tasks
from tests.data.fixtures import RL_SCHEMA, rl_rows, write

pytestmark = pytest.mark.tier("integration")

CODE = "<think>count</think><code>\n```python\nprint(input_image.size)\n```\n</code>"
# question start -> replies per turn (the model's choices), with the verdict the kind's rule gives
PLAN = {
    "What is half of one?": (["<answer>0.5</answer>"], True),  # math: 1/2 == 0.5
    "How many shapes are there?": ([CODE, "<answer>2</answer>"], True),  # count, after a code turn
    "What colour is the circle?": (["<answer>B</answer>"], True),  # choice, gold (B)
    "What is the value of the bar?": (["<answer>23.5</answer>"], True),  # relaxed
    "What is in the picture?": (
        ["<answer>a blue circle</answer>"],
        False,
    ),  # text, gold "a red square"
    "Which shape is red?": (["<answer>the square</answer>"], True),  # text
}


@pytest.fixture
def imported(tmp_path: Path) -> Path:
    rows, _ = rl_rows()
    import_rl(
        [write(rows, RL_SCHEMA, tmp_path / "rl-00000.parquet")], tmp_path / "rl", val_fraction=0.5
    )
    return tmp_path / "rl"


def test_load_tasks_reads_splits_and_names_each_bad_line(imported: Path, tmp_path: Path) -> None:
    every = load_tasks(imported)
    assert len(every) == 6 and {s for *_, s in every} == {"train", "val"}
    assert len(load_tasks(imported / "tasks.jsonl", "train", limit=1)) == 1
    lines = (imported / "tasks.jsonl").read_text().splitlines()
    bad = tmp_path / "bad" / "tasks.jsonl"
    bad.parent.mkdir()
    (bad.parent / "images").symlink_to(imported / "images")
    broken = json.loads(lines[1])
    del broken["question"]
    bad.write_text("\n".join([lines[0], json.dumps(broken)]) + "\n")
    with pytest.raises(DataError, match=r"tasks.jsonl line 2: not a task record \(no 'question'\)"):
        load_tasks(bad)
    missing = json.loads(lines[0]) | {"images": ["images/nope.png"]}
    bad.write_text(json.dumps(missing) + "\n")
    with pytest.raises(DataError, match=r"line 1: not a usable task \(.*nope.png"):
        load_tasks(bad.parent)
    bad.write_text(lines[0] + "\n")
    with pytest.raises(DataError, match="no tasks in split 'test'"):
        load_tasks(bad, "test")
    with pytest.raises(
        DataError, match="no Task JSONL at .*nowhere.*codedance data import codedance-rl"
    ):
        load_tasks(tmp_path / "nowhere")


def test_world_gen_files_read_as_tasks(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["world", "gen", "--out", str(tmp_path / "w"), "--n", "3", "--skills", "counting"]
    )
    assert result.exit_code == 0, result.output
    tasks = load_tasks(tmp_path / "w")
    assert [(d, s) for _, d, s in tasks] == [("general", "train")] * 3
    assert all(
        t.images[0].width > 0 and dict(t.metadata)["skill"] == "counting" for t, _, _ in tasks
    )


def _script(body: dict) -> str:
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    text = json.dumps(body["messages"])
    return next(replies[turn] for q, (replies, _) in PLAN.items() if q in text)


def test_eval_on_the_imported_tasks(imported: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["eval", "--tasks", str(imported), "--concurrency", "2", "--out", str(out)]
    with ReplayServer(_script) as server:
        result = CliRunner().invoke(app, [*args, "--model", server.url])
        assert result.exit_code == 0, result.output
        again = CliRunner().invoke(
            app, [*args, "--model", server.url]
        )  # resumes: nothing asked again
        assert again.exit_code == 0 and len(server.requests) == 7
    scores = {r["task_id"]: r for r in read_jsonl(out / "scores.jsonl")}
    tasks = {t.id: t for t, _, _ in load_tasks(imported)}
    assert set(scores) == {f"tasks/{i.replace('#', ':')}" for i in tasks}
    for key, score in scores.items():
        task = tasks[key.removeprefix("tasks/").replace(":", "#")]
        _, right = next(v for q, v in PLAN.items() if task.question.startswith(q))
        assert (score["correct"], score["scorer"]) == (right, f"rule:{task.kind.value}"), (
            key,
            score,
        )
    report = json.loads((out / "report.json").read_text())
    (result_,) = report["results"]
    assert (result_["name"], result_["expected"], result_["failed"]) == ("tasks", 6, 0)
    assert dict(result_["metrics"])["accuracy"] == pytest.approx(5 / 6)
    assert result_["agent"]["samples"] == 6
    by_source = {
        row[0]: row for field, rows in result_["groups"] for row in rows if field == "data_source"
    }
    assert set(by_source) == {"thinklite_eureka", "pixmo", "vstar", "chart", "vl_agent"}
    records = {r["task_id"]: r for r in read_jsonl(out / "trajectories.jsonl")}
    count = next(r for r in records.values() if len(r["turns"]) == 2)
    # the sandbox ran on the image the model saw: 64×48 is below the 4·28·28-pixel floor, so 56×56
    assert (
        count["turns"][0]["result"]["status"] == "ok"
        and count["turns"][0]["result"]["stdout"] == "(56, 56)\n"
    )


def test_eval_tasks_split_limit_and_bad_paths(imported: Path, tmp_path: Path) -> None:
    from codedance.eval.loaders import read_tasks

    n_val = sum(1 for *_, s in load_tasks(imported) if s == "val")
    lines = (imported / "tasks.jsonl").read_text().splitlines()
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "images").symlink_to(imported / "images")
    (tmp_path / "cut" / "tasks.jsonl").write_text(
        "\n".join([*lines[:2], '{"id": "broken"}']) + "\n"
    )
    assert len(read_tasks(tmp_path / "cut", limit=2)) == 2  # the broken third line is never read
    with pytest.raises(DataError, match="line 3: not a task record"):
        read_tasks(tmp_path / "cut")
    with ReplayServer(_script) as server:
        ok = CliRunner().invoke(
            app,
            [
                "eval",
                "--tasks",
                str(imported / "tasks.jsonl"),
                "tasks_split=val",
                "--model",
                server.url,
                "--out",
                str(tmp_path / "val"),
            ],
        )
        assert ok.exit_code == 0, ok.output
        assert len(read_jsonl(tmp_path / "val" / "scores.jsonl")) == n_val
        for path, words in (
            (tmp_path / "missing", "no Task JSONL at"),
            (imported, "no tasks in split 'test'"),
        ):
            bad = CliRunner().invoke(
                app,
                [
                    "eval",
                    "--tasks",
                    str(path),
                    "tasks_split=test",
                    "--model",
                    server.url,
                    "--out",
                    str(tmp_path / "bad"),
                ],
            )
            assert bad.exit_code == 2 and words in bad.output and "Traceback" not in bad.output, (
                bad.output
            )
            assert not (tmp_path / "bad").exists()  # refused before the run folder is written
    printed = CliRunner().invoke(app, ["eval", "--tasks", str(imported), "--print-config"])
    assert (
        re.search(r"^tasks: .*rl$", printed.output, re.MULTILINE)
        and "benchmarks: ''" in printed.output
    )
