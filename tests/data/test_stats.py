"""``codedance data stats``: counts and distributions of an import folder, tables and a PNG."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from codedance.cli import app
from codedance.data.sft_import import import_sft
from codedance.data.stats import collect
from tests.data.fixtures import SFT_SCHEMA, sft_rows, write

pytestmark = pytest.mark.tier("integration")


def test_stats_of_an_sft_import(tmp_path: Path) -> None:
    rows, _ = sft_rows()
    import_sft([write(rows, SFT_SCHEMA, tmp_path / "a.parquet")], tmp_path / "out")
    stats = collect(tmp_path / "out")
    assert (
        stats.counts["rows"]["imported"] == 5
        and stats.counts["rows"]["skipped: image does not decode"] == 1
    )
    assert stats.counts["trajectories per file"] == {"a.parquet": 5}
    assert stats.counts["code form"] == {"code_tag": 3, "tool_call": 2}
    assert stats.series["assistant turns per trajectory"] == [2] * 5
    assert stats.series["code calls per trajectory"] == [1] * 5
    assert stats.series["feedback image megapixels"] == [32 * 24 / 1e6]
    result = CliRunner().invoke(app, ["data", "stats", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "code lines per call" in result.output and "trajectories per file" in result.output
    png = (tmp_path / "out" / "stats.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    missing = CliRunner().invoke(app, ["data", "stats", str(tmp_path)])
    assert missing.exit_code == 2 and "neither trajectories.jsonl nor tasks.jsonl" in missing.output
