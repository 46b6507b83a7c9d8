"""The training report: held-out stages in run order, the SFT curve, styled and linked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from codedance.train.report import write_report

pytestmark = pytest.mark.tier("torch")

pytest.importorskip("matplotlib")


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_stages_in_run_order_with_the_sft_curve(tmp_path: Path) -> None:
    order = ["before-sft", "after-sft", "after-grpo-paper", "after-grpo-deepeyes"]
    for k, name in enumerate(order):  # written in run order, alphabetical order differs
        path = tmp_path / "eval" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"accuracy": k / 10}))
        os.utime(path, ns=(10**18 + k * 10**9, 10**18 + k * 10**9))
    _write(tmp_path / "eval" / "after-sft.jsonl", [{}])
    _write(
        tmp_path / "sft" / "sft_log.jsonl",
        [{"step": s, "loss": 3.0 / s, "mean_token_accuracy": 0.1 * s} for s in (1, 2, 3)],
    )
    _write(tmp_path / "grpo-paper" / "metrics.jsonl", [{"step": 1, "accuracy": 0.5}])
    evals = write_report(tmp_path)
    assert list(evals) == order
    page = (tmp_path / "report.html").read_text()
    assert [page.index(f">{name}<") for name in order] == sorted(
        page.index(f">{name}<") for name in order
    )
    assert '<img src="sft.png">' in page and (tmp_path / "sft.png").stat().st_size > 0
    assert "font-family" in page and '<a href="eval/after-sft.jsonl">after-sft</a>' in page
