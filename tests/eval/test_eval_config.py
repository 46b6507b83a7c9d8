"""``codedance eval`` on the one loader: presets, files, key=value, --print-config, errors."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from codedance.cli import app
from codedance.config import load, presets
from codedance.eval.options import EvalConfig

pytestmark = pytest.mark.tier("unit")


def test_presets_files_overrides_and_flags_compose(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert {"paper", "smoke", "avg-at-8"} <= set(presets("eval")["eval"])
    mine = tmp_path / "mine.yaml"
    mine.write_text("episode:\n  max_turns: 6\njudge:\n  url: http://judge:8000/v1\n")
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "-c",
            "smoke",
            "-c",
            str(mine),
            "server.max_tokens=512",
            "--limit",
            "5",
            "--model",
            "http://m/v1",
            "--out",
            "o",
            "--print-config",
        ],
    )
    assert result.exit_code == 0, result.output
    for line in (
        "benchmarks: vstar,chartqa",
        "limit: 5",
        "max_turns: 6",
        "max_tokens: 512",
        "url: http://judge:8000/v1",
        "url: http://m/v1",
    ):
        assert line in result.output
    assert "EMPTY" not in result.output  # the API key is never printed


def test_settings_are_checked_before_anything_runs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    bad = runner.invoke(app, ["eval", "serverr.url=x", "--out", str(tmp_path / "a")])
    assert bad.exit_code == 2 and "serverr" in bad.output
    bad = runner.invoke(app, ["eval", "--benchmarks", "vstar"])
    assert bad.exit_code == 2 and "--model URL --out DIR" in bad.output
    bad = runner.invoke(
        app, ["eval", "limit=abc", "--model", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "b")]
    )
    assert bad.exit_code == 2 and "limit" in bad.output and not (tmp_path / "b").exists()
    settings = load(
        EvalConfig, ["avg-at-8", "server.url=http://m/v1", "out=o"], command="eval"
    ).run_settings()
    assert (
        settings.samples == 8 and settings.temperature == 1.0 and settings.episode.max_turns == 10
    )


def test_renamed_server_keys_are_refused_with_their_new_name(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    for old, new in (
        ("server.name=m", "server.name is now server.model"),
        ("server.request_timeout_s=5", "server.request_timeout_s is now server.timeout_s"),
        ("server.plain_openai=true", "server.plain_openai is now server.vllm_extras"),
        ("judge.base_url=http://j/v1", "judge.base_url is now judge.url"),
        ("judge.max_concurrency=4", "judge.max_concurrency is now judge.max_in_flight"),
    ):
        bad = runner.invoke(
            app, ["eval", old, "--model", "http://m/v1", "--out", str(tmp_path / "o")]
        )
        assert bad.exit_code == 2 and new in bad.output and not (tmp_path / "o").exists(), (
            bad.output
        )
    shown = runner.invoke(
        app,
        [
            "eval",
            "--plain-openai",
            "--model-name",
            "m",
            "--request-timeout",
            "5",
            "--judge",
            "http://j/v1",
            "--model",
            "http://m/v1",
            "--out",
            "o",
            "--print-config",
        ],
    )
    assert shown.exit_code == 0, shown.output
    assert all(
        s in shown.output
        for s in (
            "vllm_extras: false",
            "model: m",
            "timeout_s: 5.0",
            "url: http://j/v1",
            "model: Qwen/Qwen2.5-72B-Instruct",
        )
    )
