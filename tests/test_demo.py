"""The offline demo end to end: run directory, resume, refusals, and the HTML report in real
headless Chromium (skipped when Debian's `chromium` is not installed; the test installs nothing)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from codedance.demo import DemoConfig, run_demo
from codedance.errors import SettingsError
from codedance.records import read_jsonl

pytestmark = [pytest.mark.tier("integration"), pytest.mark.slow]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "run"
    config = DemoConfig(tasks=9, rollouts=2, seed=3, out=str(out))
    return config, run_demo(config, progress=False)


def test_demo_writes_a_complete_run(run):
    _config, result = run
    out = result.out_dir
    assert result.episodes_run == 18 and not result.failures
    records = read_jsonl(f"{out}/trajectories.jsonl")
    assert len({r["key"] for r in records}) == 18
    metrics = json.loads(Path(out, "metrics.json").read_text())
    overall = next(r for r in metrics["rows"] if r["skill"] == "all" and r["difficulty"] == "all")
    assert overall["n"] == 18 and overall["accuracy"] >= 0.8
    by_diff = {r["difficulty"]: r for r in metrics["rows"] if r["skill"] == "all"}
    assert by_diff["easy"]["tool_share"] == 0 and by_diff["hard"]["tool_share"] == 1
    assert (
        by_diff["easy"]["avg_turns"] < by_diff["medium"]["avg_turns"] < by_diff["hard"]["avg_turns"]
    )
    for t in metrics["trajectories"]:
        assert t["reward"]["total"] == pytest.approx(
            t["reward"]["accuracy"] + t["reward"]["format"] + t["reward"]["sequence_tool"]
        )
        if t["calls"] == 0:
            assert t["reward"]["sequence_tool"] == 0


def test_rerun_resumes_and_other_settings_are_refused(run, tmp_path):
    config, _first = run
    again = run_demo(config, progress=False)
    assert again.episodes_run == 0 and again.episodes_skipped == 18
    with pytest.raises(SettingsError, match=r"other settings \(rollouts differ\)"):
        run_demo(DemoConfig(tasks=9, rollouts=3, seed=3, out=config.out), progress=False)
    (tmp_path / "x.txt").write_text("not a run")
    with pytest.raises(SettingsError, match="not empty"):
        run_demo(DemoConfig(tasks=1, rollouts=1, out=str(tmp_path)), progress=False)


def test_bad_settings_are_refused_before_the_folder_is_written(tmp_path):
    with pytest.raises(SettingsError, match="unknown reward profile"):
        DemoConfig(reward_profile="nope", out=str(tmp_path / "d"))
    with pytest.raises(SettingsError, match="tasks: must be at least 1, got 0"):
        DemoConfig(tasks=0)
    out = tmp_path / "late"
    out.mkdir()
    (out / "run.json").write_text(
        '{"kind": "demo", "settings": {"tasks": 99}}'
    )  # a claim, no results
    again = run_demo(DemoConfig(tasks=1, rollouts=1, out=str(out)), progress=False)
    assert again.episodes_run == 1  # the empty claim was replaced, not a refusal


def test_interrupted_run_finishes_the_missing_episodes(tmp_path):
    config = DemoConfig(tasks=3, rollouts=2, seed=1, out=str(tmp_path / "r"))
    run_demo(config, progress=False)
    path = tmp_path / "r" / "trajectories.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])  # three lost and one torn line
    again = run_demo(config, progress=False)
    assert again.episodes_run == 3
    assert len({r["key"] for r in read_jsonl(path)}) == 6


def test_report_images_exist(run):
    _, result = run
    page = Path(result.out_dir, "report.html").read_text()
    srcs = re.findall(r'src="([^"]+)"', page)
    assert "turns.png" in srcs and len(srcs) > 18
    for src in srcs:
        assert Path(result.out_dir, src).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_report_renders_in_headless_chromium(run):
    _, result = run
    page = f"file://{result.out_dir}/report.html"
    common = [
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--allow-file-access-from-files",
    ]
    dom = subprocess.run(
        [*common, "--dump-dom", page], capture_output=True, text=True, timeout=120, check=False
    ).stdout  # the DOM is checked below
    assert '<table id="summary">' in dom and dom.count("<tr") >= 10
    shot = f"{result.out_dir}/report.png"
    subprocess.run(
        [*common, f"--screenshot={shot}", "--window-size=1200,1400", page],
        capture_output=True,
        timeout=120,
        check=True,
    )
    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("RGB"))
    assert (
        img.shape[0] >= 1000 and len(np.unique(img.reshape(-1, 3), axis=0)) > 50
    )  # plot colours rendered
