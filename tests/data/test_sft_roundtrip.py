"""An imported CodeDance-SFT folder trains with ``codedance sft`` (a few steps of the tiny model)
and exports for ms-swift; the export is loaded by ms-swift's own dataset code when an
interpreter with ms-swift is named in ``CODEDANCE_SWIFT_PYTHON`` (docs/data.md says how)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from codedance.cli import app
from codedance.data.sft_import import import_sft
from codedance.records import load_trajectories
from tests.data.fixtures import SFT_SCHEMA, sft_rows, write

pytestmark = pytest.mark.tier("torch")


@pytest.fixture
def imported(tmp_path: Path) -> Path:
    rows, _ = sft_rows()
    import_sft([write(rows, SFT_SCHEMA, tmp_path / "train-0.parquet")], tmp_path / "out")
    return tmp_path / "out"


def test_codedance_sft_trains_on_the_import(imported: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    from codedance.train.tiny import save_policy
    from tests.train.helpers import tiny

    torch.manual_seed(0)
    model, processor = tiny([t for _, t in load_trajectories(imported)])
    save_policy(tmp_path / "model", model, processor)
    result = CliRunner().invoke(
        app,
        [
            "sft",
            "--data",
            str(imported),
            "--model",
            str(tmp_path / "model"),
            "--out",
            str(tmp_path / "run"),
            "sft.max_steps=2",
            "sft.batch_size=5",
            "sft.per_device_batch=5",
            "sft.logging_steps=1",
            "sft.warmup_ratio=0",
            "sft.gradient_checkpointing=false",
            "rollout.max_length=1024",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "sft: 2 steps on 5 sequences (0 cut)" in result.output
    assert (tmp_path / "run" / "final" / "codedance_processor.json").exists()


def test_ms_swift_loads_and_encodes_the_export(imported: Path, tmp_path: Path) -> None:
    python = os.environ.get("CODEDANCE_SWIFT_PYTHON", "")
    if not python or not Path(python).exists():
        pytest.skip("set CODEDANCE_SWIFT_PYTHON to a Python with ms-swift installed (docs/data.md)")
    export = imported / "swift.jsonl"
    result = CliRunner().invoke(
        app, ["sft", "--data", str(imported), "--export-swift", str(export)]
    )
    assert result.exit_code == 0, result.output
    ours = [json.loads(line) for line in export.read_text().splitlines()]
    script = Path(__file__).parent / "swift_check.py"
    run = subprocess.run(
        [python, str(script), str(export), str(tmp_path / "model")],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=export.parent,
    )  # relative paths
    assert run.returncode == 0, run.stderr[-3000:]
    loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(loaded) == len(ours) == 5
    for theirs, mine in zip(loaded, ours, strict=True):
        assert theirs["roles"] == [m["role"] for m in mine["messages"]]
        assert theirs["loss"] == [m["loss"] for m in mine["messages"]]
        assert theirs["images"] == theirs["vision_blocks"] == len(mine["images"])
        # ms-swift's labels: each assistant turn, its end-of-turn token and the newline after it
        assert theirs["trained"] == "".join(
            m["content"] + "<|im_end|>\n" for m in mine["messages"] if m["loss"]
        )
