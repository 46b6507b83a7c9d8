"""Commands print tables uncut when their output is piped (CI logs, tee, files)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from codedance.cli.console import PIPED_WIDTH, make_console

pytestmark = pytest.mark.tier("integration")


def test_piped_output_is_wide_unless_columns_says_otherwise(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # not a terminal, even under `pytest -s`
    assert make_console().width == PIPED_WIDTH
    monkeypatch.setenv("COLUMNS", "100")
    assert make_console().width == 100


def test_scorer_names_are_not_read_as_emoji_codes(monkeypatch):
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    make_console().print("rule:relaxed: 5")
    assert sys.stdout.getvalue().strip() == "rule:relaxed: 5"


def test_a_piped_demo_table_keeps_its_words(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}  # a clean environment
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "codedance"),
            "demo",
            "--out",
            str(tmp_path / "d"),
            "--tasks",
            "3",
            "--rollouts",
            "1",
            "--skills",
            "counting",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    ).stdout
    assert "counting" in out and "medium" in out and "…" not in out


def test_bad_input_is_one_line_and_exit_2_in_every_command(tmp_path):
    """world, grading, sandbox, train and sft through the one handler (`user_errors`)."""
    from typer.testing import CliRunner

    from codedance.cli import app

    afile = tmp_path / "a.png"
    afile.write_bytes(b"not an image")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("sft:\n  lr: 'unclosed\n")
    (tmp_path / "empty").mkdir()
    cases = [
        (["world", "gen", "--out", str(tmp_path / "w"), "--skills", "knitting"], "knitting"),
        (["world", "gen", "--out", str(afile)], "is a file"),
        (["world", "accuracy", "--mistake-rate", "2"], "--mistake-rate"),
        (["grading", "check", "4", "4", "--kind", "bogus"], "bogus"),
        (["grading", "check", "4", "4", "--choice", "A"], "LETTER=TEXT"),
        (["sandbox", "check", "--require", "bogus"], "unknown isolation layer"),
        (["sandbox", "run", str(afile), "--image", str(afile)], "--image"),
        (["train", "--config", str(bad_yaml)], "bad.yaml line"),
        (["train", "--config", str(tmp_path / "missing.yaml")], "missing.yaml"),
        (["train", "grpo.steps=abc"], "grpo.steps"),
        (["train", "--preset", "nope"], "unknown train preset"),
        (["train", "--stage", "grpo"], "--stage"),
        (
            ["sft", "--data", str(tmp_path / "empty"), "--export-swift", str(tmp_path / "x.jsonl")],
            "no trajectories",
        ),
        (["sft", "--data", str(tmp_path), "-c", "nope", "--print-config"], "unknown train preset"),
    ]
    runner = CliRunner()
    for args, words in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert words in result.output and "Traceback" not in result.output, (args, result.output)
        assert (
            result.output.strip().startswith("error:")
            and len(result.output.strip().splitlines()) <= 3
        ), result.output


def test_sft_refuses_a_model_path_that_does_not_exist(tmp_path):
    from typer.testing import CliRunner

    from codedance.cli import app
    from codedance.records import ImageStore, append_jsonl, trajectory_json
    from codedance.types import StopReason, Trajectory, Turn

    data = tmp_path / "data"
    append_jsonl(
        data / "trajectories.jsonl",
        trajectory_json(
            Trajectory("t", (Turn("<answer>1</answer>", answer="1"),), StopReason.ANSWERED),
            ImageStore(data / "images"),
            "t#0",
        ),
    )
    result = CliRunner().invoke(
        app, ["sft", "--data", str(data), "--model", str(tmp_path / "runs" / "nope")]
    )
    assert result.exit_code == 2 and "no such folder" in result.output


def test_sft_takes_presets_files_and_overrides_like_train(tmp_path):
    """`codedance sft` has train's option shape: -c (repeatable), key=value, --print-config."""
    from typer.testing import CliRunner

    from codedance.cli import app

    spec = tmp_path / "mine.yaml"
    spec.write_text("sft:\n  lr: 0.003\n")
    result = CliRunner().invoke(
        app,
        [
            "sft",
            "--data",
            str(tmp_path),
            "-c",
            "tiny-cpu",
            "-c",
            str(spec),
            "sft.epochs=7",
            "--print-config",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "lr: 0.003" in result.output and "epochs: 7" in result.output


def test_a_models_words_and_a_snippets_output_are_shown_as_text_never_markup_or_controls():
    """A step's output holding "[/bold]" must not raise MarkupError in the turn view, "[link=...]"
    must not draw a link the model chose, and escape sequences must not reach the terminal."""
    from rich.console import Console

    from codedance.cli.console import untrusted
    from codedance.cli.solve_view import print_turn
    from codedance.types import ExecResult, ExecStatus, FormatVerdict, Turn

    hostile = "[/bold] [link=https://evil.example]click[/link] \x1b]0;retitled\x07 \x1b[2J\r\x9b"
    turn = Turn(
        text="t",
        think=hostile,
        code="print(1)  " + hostile,
        answer=hostile,
        verdict=FormatVerdict(ok=False, reasons=(hostile,)),
        result=ExecResult(ExecStatus.OK, stdout=hostile),
    )
    buffer = io.StringIO()
    print_turn(turn, 1, Console(file=buffer, width=400, color_system=None), {})
    shown = buffer.getvalue()
    assert "[/bold]" in shown and "[link=https://evil.example]" in shown
    assert not any(ch in shown for ch in "\x1b\x07\r\x9b")
    assert "\\x1b]0;retitled\\x07" in shown
    assert untrusted("a\tb\nc\x00") == "a\tb\nc\\x00"
