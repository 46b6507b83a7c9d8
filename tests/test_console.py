"""Commands print tables uncut when their output is piped (CI logs, tee, files)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from codedance.cli.console import PIPED_WIDTH, make_console


def test_piped_output_is_wide_unless_columns_says_otherwise(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # not a terminal, even under `pytest -s`
    assert make_console().width == PIPED_WIDTH
    monkeypatch.setenv("COLUMNS", "100")
    assert make_console().width == 100


def test_a_piped_demo_table_keeps_its_words(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run([str(Path(sys.executable).parent / "codedance"), "demo", "--out", str(tmp_path / "d"),
                          "--tasks", "3", "--rollouts", "1", "--skills", "counting"],
                         capture_output=True, text=True, env=env, timeout=300, check=True).stdout
    assert "counting" in out and "medium" in out and "…" not in out
