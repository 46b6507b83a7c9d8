"""``codedance data import``, ``verify`` and ``stats`` on the one loader: files, key=value overrides
beside the positional paths, flags winning, --print-config, ranges refused at load."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from codedance.cli import app

pytestmark = pytest.mark.tier("unit")


def shown(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--print-config"])
    assert result.exit_code == 0, result.output
    return result.output


def test_verify_settings_compose_from_a_file_overrides_and_flags(tmp_path):
    mine = tmp_path / "verify.yaml"
    mine.write_text("tolerance: 0.1\nconcurrency: 5\n")
    text = shown("data", "verify", "d", "-c", str(mine), "concurrency=3", "timeout_s=30")
    assert all(
        line in text for line in ("out: d", "concurrency: 3", "tolerance: 0.1", "timeout_s: 30.0")
    )
    assert "concurrency: 4" in shown("data", "verify", "d", "concurrency=3", "--concurrency", "4")


def test_import_takes_paths_and_overrides_side_by_side():
    text = shown(
        "data",
        "import",
        "codedance-sft",
        "a.parquet",
        "data/b=c.parquet",
        "limit=5",
        "--out",
        "o",
        "--verify",
    )
    assert (
        "- a.parquet\n- data/b=c.parquet" in text and "limit: 5" in text and "verify: true" in text
    )
    text = shown("data", "import", "codedance-rl", "a.parquet", "val_fraction=0.1", "out=o")
    assert "val_fraction: 0.1" in text and "out: o" in text


def test_stats_settings_compose_from_a_file_overrides_and_flags(tmp_path):
    mine = tmp_path / "stats.yaml"
    mine.write_text("png: from-file.png\n")
    assert "out: d\npng: from-file.png" in shown("data", "stats", "d", "-c", str(mine))
    assert "png: h.png" in shown("data", "stats", "d", "png=h.png")
    assert "png: flag.png" in shown("data", "stats", "d", "png=h.png", "--png", "flag.png")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["data", "verify", "d", "tolerance=2"],
            "tolerance: must be at least 0 and at most 1, got 2.0",
        ),
        (["data", "verify", "d", "limit=abc"], "limit: expected a whole number, got 'abc'"),
        (["data", "verify", "d", "e"], "give one import folder, got 2: d e"),
        (["data", "verify"], "give the import folder"),
        (["data", "stats"], "give the import folder"),
        (["data", "stats", "d", "e"], "give one import folder, got 2: d e"),
        (["data", "stats", "d", "bins=3"], "unknown setting(s) bins"),
        (["data", "verify", "d"], "no d/trajectories.jsonl: import with"),
        (
            ["data", "import", "codedance-rl", "a.parquet"],
            "give the parquet files and the output folder",
        ),
        (
            ["data", "import", "codedance-rl", "a.parquet", "--out", "o", "val_fraction=-0.5"],
            "val_fraction: must be at least 0, got -0.5",
        ),
    ],
)
def test_settings_no_run_can_use_are_one_line_errors(tmp_path, args, words):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split()) and "Traceback" not in result.output
