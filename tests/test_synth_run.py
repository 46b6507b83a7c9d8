"""`run_synth` end to end: records and exports, rejection counts, resume, refusals, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from codedance.cli.synth_cmd import app
from codedance.errors import SettingsError
from codedance.records import load_trajectories, read_jsonl
from codedance.rollout import EpisodeSettings
from codedance.synth import SynthConfig, SynthError, run_synth
from codedance.synth.run import check, task_at
from codedance.world import WorldError, task_set

pytestmark = [pytest.mark.tier("integration"), pytest.mark.slow]


def _lines(path) -> list[dict]:  # type: ignore[no-untyped-def]
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def run(tmp_path_factory):  # type: ignore[no-untyped-def]
    # with one turn, medium items (the teacher's first turn is code) stop unanswered; easy ones are
    # answered at a glance
    config = SynthConfig(
        n=4,
        max_tasks=5,
        skills=("counting", "photos"),
        difficulties=("easy", "medium"),
        seed=2,
        episode=EpisodeSettings(max_turns=1),
        out=str(tmp_path_factory.mktemp("synth") / "run"),
    )
    return config, run_synth(config, progress=False)


def test_accepted_records_and_rejections_by_reason(run) -> None:  # type: ignore[no-untyped-def]
    config, result = run
    out = result.out_dir
    verdicts = {r["key"]: r for r in read_jsonl(f"{out}/verdicts.jsonl")}
    assert len(verdicts) == result.tried == config.task_limit
    for key, v in verdicts.items():
        assert (v["reason"] == "") == ("-easy-" in key), v
        if v["reason"]:
            assert v["reason"] == "not_answered" and "max_turns" in v["detail"]
    summary = json.loads(Path(out, "summary.json").read_text())
    assert summary["rejected"] == {
        "not_answered": sum(bool(v["reason"]) for v in verdicts.values())
    }
    assert (
        summary["accepted"]
        == result.accepted
        == sum(not v["reason"] for v in verdicts.values())
        < config.n
    )
    keys = [k for k, _ in load_trajectories(out)]
    assert sorted(keys) == sorted(k for k, v in verdicts.items() if not v["reason"])
    sft, swift, trl = (_lines(Path(out) / f) for f in ("sft.jsonl", "swift.jsonl", "trl.jsonl"))
    assert [r["key"] for r in sft] == sorted(
        keys, key=lambda k: int(k.split("#")[0].rsplit("-", 1)[1])
    )
    assert len(sft) == len(swift) == len(trl) == result.accepted
    for record, plain in zip(sft, swift):
        assert (
            record["meta"]["skill"] in ("counting", "photos")
            and record["meta"]["difficulty"] == "easy"
        )
        assert record["messages"] == plain["messages"] and record["images"] == plain["images"]
        assert [m["loss"] for m in plain["messages"]] == [
            m["role"] == "assistant" for m in plain["messages"]
        ]
        assert sum(m["loss"] for m in plain["messages"]) == 1 and len(plain["images"]) == 1


def test_rerun_resumes_and_other_runs_are_refused(run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config, first = run
    again = run_synth(config, progress=False)
    assert again.ran == 0 and again.tried == first.tried and again.accepted == first.accepted
    with pytest.raises(SettingsError, match=r"synth run with other settings \(seed differ\)"):
        run_synth(SynthConfig(**{**config.__dict__, "seed": 3}), progress=False)
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "run.json").write_text(
        json.dumps({"kind": "demo", "settings": {"tasks": 9}})
    )
    (tmp_path / "demo" / "trajectories.jsonl").write_text("")
    with pytest.raises(SettingsError, match="another kind of run"):
        run_synth(SynthConfig(n=1, out=str(tmp_path / "demo")), progress=False)
    (tmp_path / "x.txt").write_text("not a run")
    with pytest.raises(SettingsError, match="not empty"):
        run_synth(SynthConfig(n=1, out=str(tmp_path)), progress=False)


def test_interrupted_run_finishes_what_is_missing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = SynthConfig(
        n=3, skills=("spatial",), difficulties=("easy", "medium"), seed=5, out=str(tmp_path / "r")
    )
    full = run_synth(config, progress=False)
    assert full.accepted == 3 and full.tried == 3
    path = tmp_path / "r" / "verdicts.jsonl"
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + lines[1][:20])  # one verdict lost, one torn mid-line
    again = run_synth(config, progress=False)
    assert again.ran == 2 and again.accepted == 3 and again.tried == 3
    swift = _lines(tmp_path / "r" / "swift.jsonl")
    assert len(swift) == 3  # the re-verified keys are not doubled
    tool = [
        r["messages"]
        for r in swift
        if any("<code>" in m["content"] for m in r["messages"] if m["loss"])
    ]
    assert tool and all(
        [m["loss"] for m in ms[-3:]] == [True, False, True] for ms in tool
    )  # feedback untrained


def test_task_order_is_the_worlds() -> None:
    combos = check(SynthConfig(n=1, skills=("geometry", "spatial"), difficulties=("easy", "hard")))
    assert [task_at(combos, 7, i).id for i in range(5)] == [
        t.id for t in task_set(5, 7, ("geometry", "spatial"), ("easy", "hard"))
    ]


def test_bad_settings_are_clear_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SettingsError, match="n: must be at least 1, got 0"):
        check(SynthConfig(n=0))
    with pytest.raises(SynthError, match="--max-tasks 3 cannot give 5"):
        check(SynthConfig(n=5, max_tasks=3))
    with pytest.raises(WorldError, match="unknown skill.*knitting"):
        check(SynthConfig(skills=("knitting",)))
    with pytest.raises(WorldError, match="unknown difficulty"):
        check(SynthConfig(difficulties=("brutal",)))
    cli = CliRunner()
    bad = cli.invoke(
        app, ["--skills", "counting,knitting", "--n", "2", "--out", str(tmp_path / "a")]
    )
    assert bad.exit_code == 2 and "knitting" in bad.output and not (tmp_path / "a").exists()
    bad = cli.invoke(app, ["--n", "-1", "--out", str(tmp_path / "b")])
    assert bad.exit_code == 2 and "at least 1" in bad.output


def test_cli_writes_and_prints_counts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(
        app,
        [
            "--skills",
            "geometry",
            "--difficulties",
            "easy",
            "--n",
            "2",
            "--out",
            str(tmp_path / "c"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "accepted 2/2 of 2 tasks" in result.output and "rejected: none" in result.output
    assert len(_lines(tmp_path / "c" / "trl.jsonl")) == 2


def test_cli_takes_presets_files_and_overrides_and_prints_the_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    mine = tmp_path / "mine.yaml"
    mine.write_text("teacher:\n  temperature: 0.0\nepisode:\n  max_turns: 4\n")
    result = CliRunner().invoke(
        app,
        [
            "-c",
            "quick",
            "-c",
            str(mine),
            "teacher.code_style=compact",
            "--max-turns",
            "5",
            "--print-config",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "n: 12" in result.output and "temperature: 0.0" in result.output
    assert (
        "code_style: compact" in result.output and "max_turns: 5" in result.output
    )  # the flag wins
    bad = CliRunner().invoke(app, ["teacher.colour=red", "--out", str(tmp_path / "e")])
    assert bad.exit_code == 2 and "teacher.colour" in bad.output and not (tmp_path / "e").exists()
    bad = CliRunner().invoke(app, ["episode.prompt_profile=nope", "--out", str(tmp_path / "f")])
    assert bad.exit_code == 2 and "nope" in bad.output and not (tmp_path / "f").exists()


def test_cli_exits_nonzero_when_short_of_records(tmp_path) -> None:  # type: ignore[no-untyped-def]
    args = [
        "--skills",
        "spatial",
        "--difficulties",
        "medium",
        "--max-turns",
        "1",
        "--n",
        "1",
        "--max-tasks",
        "1",
        "--out",
        str(tmp_path / "d"),
    ]
    result = CliRunner().invoke(app, args)
    assert (
        result.exit_code == 1
        and "rejected: not_answered 1" in result.output
        and "--max-tasks" in result.output
    )
