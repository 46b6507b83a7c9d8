"""``codedance eval`` / ``codedance report`` through typer, over a real HTTP scripted server."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from codedance.cli import app
from codedance.policy.replay_server import ReplayServer

pytestmark = pytest.mark.tier("integration")


def cli() -> typer.Typer:
    return app  # the real command line, as `codedance` registers eval and report


def test_eval_resume_and_report_compare(tmp_path, mathv_root):
    golds = {}
    import json

    for line in (mathv_root / "data" / "testmini.jsonl").read_text().splitlines()[:6]:
        item = json.loads(line)
        golds[item["question"].replace("<image1>", "").strip()[:50]] = item["answer"]

    def right(body):
        text = str(body["messages"])
        return next(
            (f"<answer>{a}</answer>" for q, a in golds.items() if json.dumps(q)[1:40] in text),
            "<answer>x</answer>",
        )

    runner = CliRunner()
    args = [
        "eval",
        "--benchmarks",
        "mathvision_mini",
        "--data",
        f"mathvision_mini={mathv_root}",
        "--limit",
        "6",
        "--concurrency",
        "3",
        "--lmu-data",
        str(tmp_path),
    ]
    with ReplayServer(right) as server:
        a = runner.invoke(cli(), [*args, "--model", server.url, "--out", str(tmp_path / "A")])
        assert a.exit_code == 0, a.output
        n = len(server.requests)
        again = runner.invoke(cli(), [*args, "--model", server.url, "--out", str(tmp_path / "A")])
        assert again.exit_code == 0 and len(server.requests) == n == 6
    with ReplayServer(lambda body: "<answer>x</answer>") as server:
        b = runner.invoke(
            cli(),
            [
                *args,
                "--model",
                server.url,
                "--out",
                str(tmp_path / "B"),
                "--no-tools",
                "--scoring",
                "strict",
            ],
        )
        assert b.exit_code == 0, b.output
    assert "| scripted | 100.0 |" in (tmp_path / "A" / "report.md").read_text()
    compare = runner.invoke(cli(), ["report", str(tmp_path / "A"), str(tmp_path / "B")])
    assert compare.exit_code == 0
    # 6 items: binomial (Wilson) 95 % intervals [61.0, 100.0] and [0.0, 39.0]; the delta lies
    # outside both
    assert re.search(
        r"\| MathVision \(testmini\) \| accuracy \| 100\.0 \[61\.0, 100\.0\] \| "
        r"0\.0 \[0\.0, 39\.0\] \(-100\.0, outside CIs\) \|",
        compare.output,
    ), compare.output
    assert "A: scoring vlmevalkit, judge none, 10 turns" in compare.output
    assert "B: scoring strict, judge none, 1 turns" in compare.output


def test_missing_data_is_an_actionable_error(tmp_path):
    with ReplayServer(["<answer>1</answer>"]) as server:
        result = CliRunner().invoke(
            cli(),
            [
                "eval",
                "--model",
                server.url,
                "--benchmarks",
                "chartqa",
                "--lmu-data",
                str(tmp_path),
                "--out",
                str(tmp_path / "r"),
            ],
        )
    assert result.exit_code == 2
    assert "ChartQA_TEST.tsv" in result.output and "LMUData" in result.output.replace("\n", "")


def test_report_of_a_missing_run(tmp_path):
    result = CliRunner().invoke(cli(), ["report", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "report.json" in result.output


def test_a_misspelt_benchmark_fails_before_the_server_is_asked(tmp_path):
    with ReplayServer(["<answer>x</answer>"]) as server:
        result = CliRunner().invoke(
            cli(),
            [
                "eval",
                "--benchmarks",
                "vstar,mathvison",
                "--model",
                server.url,
                "--out",
                str(tmp_path / "A"),
            ],
        )
        assert result.exit_code == 2
        assert "unknown benchmark 'mathvison'; known:" in result.output
        assert server.requests == []
