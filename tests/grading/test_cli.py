"""The ``grading`` CLI module, driven by typer's test runner (not in the main app here)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from codedance.cli.grading_cmd import app

pytestmark = pytest.mark.tier("unit")


def test_check_command_exit_codes() -> None:
    runner = CliRunner()
    right = runner.invoke(app, ["check", "<answer>seven</answer>", "7", "--kind", "count"])
    assert right.exit_code == 0 and "correct" in right.output and "answer_tag" in right.output
    wrong = runner.invoke(
        app,
        [
            "check",
            "<answer>(A)</answer>",
            "B",
            "--kind",
            "choice",
            "--choice",
            "A=red",
            "--choice",
            "B=blue",
        ],
    )
    assert wrong.exit_code == 1 and "wrong" in wrong.output


def test_judge_command_reports_unreachable_server() -> None:
    result = CliRunner().invoke(
        app, ["judge", "q", "a", "a", "--base-url", "http://127.0.0.1:9/v1"]
    )
    assert result.exit_code == 2 and "not reachable" in result.output


def test_an_unknown_answer_kind_is_one_line_naming_the_kinds() -> None:
    result = CliRunner().invoke(app, ["check", "<answer>7</answer>", "7", "--kind", "colour"])
    assert result.exit_code == 2 and "unknown answer kind 'colour'; one of: " in result.output
    assert "Traceback" not in result.output


def test_a_gold_the_kind_cannot_hold_is_one_line() -> None:
    result = CliRunner().invoke(app, ["check", "<answer>7</answer>", "seven", "--kind", "number"])
    assert result.exit_code == 2 and "number gold 'seven' is not a number" in result.output
