"""``codedance train --tasks DIR`` on a CodeDance-RL import (fixture parquet in the card's schema):
GRPO steps of a tiny model on one split of the import, held-out eval on the other, each task under
its domain; the shared settings (episode, teacher) and the one loader; bad sources refused
in one line before the run folder is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from codedance.cli import app
from codedance.config import PRESETS
from codedance.data.rl_import import import_rl
from codedance.errors import SettingsError
from codedance.task_records import load_tasks
from codedance.train.config import load_config
from tests.data.fixtures import RL_SCHEMA, rl_rows, write

pytestmark = pytest.mark.tier("torch")

TINY = [
    "sft.tasks.n=3",
    "sft.epochs=1",
    "sft.max_steps=1",
    "sft.batch_size=3",
    "sft.per_device_batch=3",
    "sft.logging_steps=1",
    "model.vocab_size=1024",
    "model.hidden=32",
    "model.layers=1",
    "model.heads=2",
    "model.kv_heads=1",
    "model.intermediate=64",
    "rollout.max_tokens=12",
    "rollout.max_length=2048",
    "episode.max_turns=2",
    "grpo.steps=2",
    "grpo.prompts_per_step=4",
    "grpo.group_size=2",
    "grpo.micro_batch=8",
    "grpo.save_every=0",
    "grpo.tasks.n=4",
    "eval.tasks.n=2",
    "threads=1",
]


@pytest.fixture
def imported(tmp_path: Path) -> Path:
    rows, _ = rl_rows()
    import_rl(
        [write(rows, RL_SCHEMA, tmp_path / "rl-00000.parquet")], tmp_path / "rl", val_fraction=0.5
    )
    return tmp_path / "rl"


def test_grpo_and_eval_on_the_import(imported: Path, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    pytest.importorskip("trl")
    from codedance.train import grpo

    seen: list[list[str]] = []
    original = grpo.compute_batch_rewards

    def spy(**kwargs):  # type: ignore[no-untyped-def]
        seen.append(list(kwargs["domains"]))
        return original(**kwargs)

    monkeypatch.setattr(grpo, "compute_batch_rewards", spy)  # observe the domains the rewards get
    out = tmp_path / "run"
    # the fixture's val split (val_fraction 0.5) holds its math row: GRPO there (key=value refines
    # what --tasks sets), held-out eval on the train split
    result = CliRunner().invoke(
        app,
        [
            "train",
            "--tasks",
            str(imported),
            f"out_dir={out}",
            *TINY,
            "grpo.tasks.split=val",
            "eval.tasks.split=train",
        ],
    )
    assert result.exit_code == 0, result.output
    config = load_config(out / "config.yaml")
    assert (config.grpo.tasks.file, config.grpo.tasks.split) == (str(imported), "val")
    assert (config.eval.tasks.file, config.eval.tasks.split) == (str(imported), "train")
    assert config.profiles == str(imported / "profiles.yaml")
    tasks = load_tasks(imported)
    domains = {t.id: d for t, d, _ in tasks}
    grpo_ids = [t.id for t, _, s in tasks if s == "val"]
    assert len(grpo_ids) == 4 and "math" in {domains[i] for i in grpo_ids}
    held = [
        json.loads(line)["task_id"]
        for line in (out / "eval" / "after-sft.jsonl").read_text().splitlines()
    ]
    assert (
        held == [t.id for t, _, s in tasks if s == "train"][:2]
    )  # the held-out eval, in file order
    for step in (1, 2):
        rollouts = [
            json.loads(line)
            for line in (out / "grpo-paper" / "rollouts" / f"step-{step}.jsonl")
            .read_text()
            .splitlines()
        ]
        assert sorted(r["task_id"] for r in rollouts) == sorted(
            grpo_ids * 2
        )  # 4 prompts x 2 rollouts
        # the rewards got each task's own domain (math for the math row), in rollout order
        assert seen[step - 1] == [domains[r["task_id"]] for r in rollouts]
    metrics = [
        json.loads(line) for line in (out / "grpo-paper" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [m["step"] for m in metrics] == [1, 2]
    assert "after-grpo-paper" in result.output and "sft step 1/1: loss" in result.output
    assert "{'loss'" not in result.output  # transformers' PrinterCallback dicts are gone
    assert (out / "report.html").exists()


def test_shared_settings_and_moved_keys() -> None:
    tiny = load_config("tiny-cpu", ["episode.max_turns=3", "sft.teacher.mistake_rate=0.25"])
    assert (tiny.episode.max_turns, tiny.episode.exec_timeout_s, tiny.episode.prompt_profile) == (
        3,
        15.0,
        "release",
    )
    assert (tiny.sft.teacher.code_style, tiny.sft.teacher.mistake_rate) == ("compact", 0.25)
    assert (tiny.rollout.max_tokens, tiny.rollout.max_pixels) == (160, 12544)
    assert load_config(PRESETS / "train" / "smol-cpu.yaml").episode.max_turns == 4
    for old, new in (
        ("rollout.max_turns=4", "episode.max_turns"),
        ("sft.teacher_code_style=full", "sft.teacher.code_style"),
    ):
        with pytest.raises(SettingsError, match=f"{old.split('=')[0]} is now {new}"):
            load_config("tiny-cpu", [old])
    with pytest.raises(SettingsError, match="mistake_rate"):
        load_config(None, ["sft.teacher.mistake_rate=2"])
    with pytest.raises(SettingsError, match="unknown prompt profile 'nope'"):
        load_config(None, ["episode.prompt_profile=nope"])
    with pytest.raises(
        SettingsError, match="sft.tasks.file: the SFT teacher solves world tasks only"
    ):
        load_config(None, ["sft.tasks.file=x.jsonl"])


def test_bad_task_sources_are_one_line_errors_before_the_run_folder(
    imported: Path, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    (tmp_path / "empty").mkdir()
    cases = [
        (["--tasks", str(tmp_path / "empty")], "no Task JSONL at"),
        (
            ["grpo.tasks.file=" + str(imported), "eval.tasks.file=" + str(imported)],
            "held-out tasks overlap",
        ),
        (["--tasks", str(imported), "eval.tasks.split=test"], "no tasks in split 'test'"),
    ]
    for args, words in cases:
        out = tmp_path / "run"
        result = CliRunner().invoke(app, ["train", f"out_dir={out}", *args])
        assert result.exit_code == 2 and words in result.output, (args, result.output)
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) <= 3, (
            result.output
        )
        assert not out.exists()
    printed = CliRunner().invoke(app, ["train", "--tasks", str(imported), "--print-config"])
    assert (
        printed.exit_code == 0
        and "split: val" in printed.output
        and "max_turns: 6" in printed.output
    )
