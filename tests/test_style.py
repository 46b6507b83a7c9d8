"""The tree as the project's own tools leave it: `ruff format` changes nothing, `ruff check` finds
nothing (the settings are pyproject.toml's)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tier("unit")

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ["codedance", "tests", "benchmarks", "scripts"]


def ruff() -> list[str]:
    """The venv's ruff (a dev dependency), else the one on PATH."""
    beside = Path(sys.executable).with_name("ruff")
    found = str(beside) if beside.exists() else shutil.which("ruff")
    assert found, "ruff is a dev dependency: pip install -e '.[dev]'"
    return [found]


def test_the_tree_is_formatted() -> None:
    run = subprocess.run(
        [*ruff(), "format", "--check", *FOLDERS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, f"run `ruff format {' '.join(FOLDERS)}`:\n{run.stdout[-3000:]}"


def test_the_linter_finds_nothing() -> None:
    run = subprocess.run(
        [*ruff(), "check", *FOLDERS], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout[-3000:]
