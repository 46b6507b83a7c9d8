"""End to end: fixture benchmarks in their on-disk formats, a real HTTP OpenAI-compatible server
with scripted replies (the model's choices), the real sandbox, scoring, report, resume."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, replace

import pytest

from codedance.eval.options import EvalConfig, EvalSettings
from codedance.eval.runner import run_eval
from codedance.grading import JUDGE_SERVER, JudgeClient
from codedance.policy import OpenAIChatPolicy, RetrySettings, SamplingParams
from codedance.policy.replay_server import ReplayServer, ServerReply
from codedance.policy.server_config import ServerConfig
from codedance.prompts import get_profile
from codedance.records import read_jsonl

pytestmark = pytest.mark.tier("integration")

OK_CODE = "<think>look</think><code>\n```python\nprint(input_image.size)\n```\n</code>"
BAD_CODE = "<think>look</think><code>\n```python\n1/0\n```\n</code>"

# marker -> replies per turn (the model's choices); hand-computed outcomes in the comments
PLAN = {
    "VS0": ["<answer>A</answer>"],  # gold A: right, 1 turn
    "VS1": [OK_CODE, "<answer>right</answer>"],  # gold A, by option text: right, 2 turns, 1 ok call
    "VS2": [BAD_CODE, "<answer>C</answer>"],  # gold A: wrong, 2 turns, 1 failed call
    "VS3": ["<answer>B or D</answer>"],  # no inference: wrong
    "CQ0": ["<answer>12.4</answer>"],  # human, gold 12: right (3.3 %)
    "CQ1": ["<answer>no</answer>"],  # human, gold Yes: wrong
    "CQ2": ["<answer>31</answer>"],  # augmented, gold 30: right
    "CQ3": ["<answer>B</answer>"],  # augmented, golds a/b: right
    "HR0": ["<answer>A</answer>"],  # c0 single, gold A: right
    "HR1": ["<answer>A</answer>"],  # c0 cross, gold B: wrong
    "HR2": ["<answer>C</answer>"],  # c1 single, gold C: right
    "HR3": ["<answer>D</answer>"],  # c1 cross, gold D: right
    "CX0": ["<answer>3.5</answer>"],  # CharXiv: judge says 1
    "CX1": ["<answer>blue</answer>"],  # CharXiv: judge says 0
}


def user_text(body: dict) -> str:
    texts = []
    for m in body["messages"]:
        if m["role"] == "user":
            content = m["content"]
            texts += (
                [p.get("text", "") for p in content] if isinstance(content, list) else [content]
            )
    return "\n".join(texts)


def model_script(body: dict) -> str:
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    marker = re.search(r"\b(VS|CQ|HR|CX)\d\b", user_text(body))
    if marker is None:
        return "<answer>0</answer>"
    return PLAN[marker.group(0)][turn]


def judge_script(body: dict) -> str:
    prompt = body["messages"][-1]["content"]
    return json.dumps({"extracted_answer": "x", "score": 1 if "PRED=3.5" in prompt else 0})


@pytest.fixture
def lmu(tmp_path, fx):
    png = fx.png()
    fx.tsv(
        tmp_path / "VStarBench.tsv",
        [
            {
                "index": str(i),
                "image": png,
                "question": f"VS{i}: which?",
                "A": "right",
                "B": "w1",
                "C": "w2",
                "D": "w3",
                "answer": "A",
                "category": "direct_attributes",
            }
            for i in range(4)
        ],
    )
    fx.tsv(
        tmp_path / "ChartQA_TEST.tsv",
        [
            {"index": str(i), "image": png, "question": f"CQ{i}: value?", "answer": a, "split": s}
            for i, (a, s) in enumerate(
                [
                    ("12", "human"),
                    ("Yes", "human"),
                    ("30", "augmented"),
                    ("['a', 'b']", "augmented"),
                ]
            )
        ],
    )
    fx.tsv(
        tmp_path / "HRBench4K.tsv",
        [
            {
                "index": str(i),
                "image": png,
                "question": f"HR{i}: where?",
                "A": "a",
                "B": "b",
                "C": "c",
                "D": "d",
                "answer": g,
                "category": c,
                "cycle_category": y,
            }
            for i, (g, c, y) in enumerate(
                [
                    ("A", "single", "c0"),
                    ("B", "cross", "c0"),
                    ("C", "single", "c1"),
                    ("D", "cross", "c1"),
                ]
            )
        ],
    )
    fx.tsv(
        tmp_path / "CharXiv_reasoning_val.tsv",
        [
            {
                "index": str(i),
                "image": png,
                "question": f"CX{i}: why?",
                "answer": "3.5",
                "inst_category": "3",
                "grading_query": "Grade this. PRED={PREDICTION} Reply JSON.",
            }
            for i in range(2)
        ],
    )
    return tmp_path


def settings(lmu, **kw) -> EvalSettings:
    """The run of ``codedance eval --model scripted ...`` with ``kw`` as config keys."""
    base = {
        "benchmarks": "vstar,chartqa,hrbench4k,charxiv",
        "concurrency": 4,
        "lmu_data": str(lmu),
        "out": "run",
        "server": ServerConfig(url="http://scripted/v1", model="scripted"),
    }
    return EvalConfig(**{**base, **kw}).run_settings(progress=False)


def policy(server) -> OpenAIChatPolicy:
    return OpenAIChatPolicy(
        server.url, "scripted", SamplingParams(), retry=RetrySettings(max_retries=0)
    )


def test_eval_end_to_end_then_resume_with_judge(lmu, tmp_path):
    out = tmp_path / "run"
    with ReplayServer(model_script) as server:
        report = run_eval(policy(server), settings(lmu), out)
        first_requests = len(server.requests)
        assert (
            first_requests == 14 + 2
        )  # one request per turn: 14 samples, two of them with 2 turns
        vstar, chartqa, hr, charxiv = (
            report.result(n) for n in ("vstar", "chartqa", "hrbench4k", "charxiv")
        )
        assert vstar.headline == 0.5
        assert vstar.agent.avg_turns == 1.5 and vstar.agent.calls == 2
        assert (
            vstar.agent.exec_success_per_call == 0.5 and vstar.agent.exec_success_per_sample == 0.5
        )
        assert vstar.agent.tool_use_share == 0.5
        assert chartqa.headline == 0.75
        assert {k: v for k, v, _ in dict(chartqa.breakdowns)["split"]} == {
            "augmented": 1.0,
            "human": 0.5,
        }
        assert hr.headline == 0.75 and dict(hr.metrics)["avg_cross"] == 0.5
        assert charxiv.headline is None and "need a judge" in charxiv.not_produced[0]
        md = (out / "report.md").read_text()
        assert "| scripted | 50.0 | 75.0 |" in md and "n/p" in md
        for name in (
            "report.json",
            "report.html",
            "plots/vstar.png",
            "view/index.html",
            "view/vstar/1_0.html",
        ):
            assert (out / name).is_file(), name

        with ReplayServer(judge_script) as judge_server:
            judge = JudgeClient(
                replace(JUDGE_SERVER, url=judge_server.url, model="scripted", retries=0)
            )
            report = run_eval(policy(server), settings(lmu), out, judge=judge)
            judge.close()
            assert len(judge_server.requests) == 2  # only the two pending CharXiv samples
        assert len(server.requests) == first_requests  # resumed: the model was asked nothing again
    assert report.result("charxiv").headline == 0.5
    assert report.result("vstar").headline == 0.5 and report.result("charxiv").judge is not None
    keys = [r["key"] for r in read_jsonl(out / "trajectories.jsonl")]
    assert len(keys) == len(set(keys)) == 14


def test_interrupted_run_loses_and_repeats_nothing(lmu, tmp_path):
    out = tmp_path / "run"
    s = settings(lmu, benchmarks="vstar,chartqa")

    def flaky(body):
        return (
            ServerReply(status=500, error="boom")
            if "CQ2" in user_text(body)
            else model_script(body)
        )

    with ReplayServer(flaky) as server:
        report = run_eval(policy(server), s, out)
    assert report.result("chartqa").failed == 1 and report.result("chartqa").agent.samples == 3
    # a crash mid-write: the last record is torn
    path = out / "trajectories.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    lost = json.loads(lines[-1])["key"]
    with ReplayServer(model_script) as server:
        report = run_eval(policy(server), s, out)
        asked = {re.search(r"\b(VS|CQ)\d\b", user_text(b)).group(0) for b in server.requests}
    lost_marker = {"vstar": "VS", "chartqa": "CQ"}[lost.split("/")[0]] + lost.split("/")[1].split(
        "#"
    )[0]
    assert asked == {"CQ2", lost_marker}  # exactly the failed and the torn sample, nothing else
    assert report.result("chartqa").headline == 0.75 and report.result("vstar").headline == 0.5
    keys = [r["key"] for r in read_jsonl(path)]
    assert len(keys) == len(set(keys)) == 8


def test_rerun_with_other_settings_is_refused(lmu, tmp_path):
    out = tmp_path / "run"
    s = settings(lmu, benchmarks="vstar", limit=1)
    with ReplayServer(model_script) as server:
        run_eval(policy(server), s, out)
        with pytest.raises(ValueError, match="other settings"):
            run_eval(policy(server), settings(lmu, benchmarks="vstar", limit=1, no_tools=True), out)


def test_a_run_folder_written_by_an_earlier_version_resumes(lmu, tmp_path):
    """``run.json`` as ``codedance eval`` has always written it (this literal shape is the resume
    contract of every run folder on disk): a rerun asks the server nothing and reports the same."""
    out = tmp_path / "run"
    s = settings(lmu, benchmarks="vstar,chartqa", limit=2)
    with ReplayServer(model_script) as server:
        first = run_eval(policy(server), s, out)
    (out / "run.json").write_text(
        json.dumps(
            {
                "kind": "eval",
                "settings": {
                    "model": "scripted",
                    "sampling": "temperature=0.0,max_tokens=2048",
                    "no_tools": False,
                    "max_turns": 10,
                    "profile": "release",
                    "profile_fields": asdict(get_profile("release")),
                },
                "benchmarks": ["chartqa", "vstar"],
                "limit": 2,
            },
            indent=1,
        )
    )
    with ReplayServer(model_script) as server:
        again = run_eval(policy(server), s, out)
        assert server.requests == []
    assert [r.headline for r in again.results] == [r.headline for r in first.results]


def test_no_tools_mode_one_turn_no_code_instruction(lmu, tmp_path):
    with ReplayServer(lambda body: OK_CODE) as server:
        report = run_eval(
            policy(server), settings(lmu, benchmarks="vstar", no_tools=True), tmp_path / "r"
        )
        assert all("write executable Python" not in user_text(b) for b in server.requests)
        assert len(server.requests) == 4
    r = report.result("vstar")
    assert (
        r.agent.avg_turns == 1.0
        and r.agent.calls == 0
        and r.headline == 0.0
        and r.profile == "no-tools"
    )
