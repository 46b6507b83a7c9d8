"""``codedance eval --agent NAME`` over real HTTP: the replay server answers each recorded case with
the replies the peer's own loop was given (``fixtures/<agent>.jsonl``), and what the server
receives, the saved answers and the report are compared with the recording."""

from __future__ import annotations

import base64
import csv
import importlib.util
import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from codedance.cli import app
from codedance.policy.replay_server import ReplayServer

pytestmark = pytest.mark.tier("integration")

_spec = importlib.util.spec_from_file_location("fixture_cases", Path(__file__).parent / "fixture_cases.py")
fc = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(fc)  # type: ignore[union-attr]


def vstar_tsv(path: Path, cases: list[dict]) -> Path:
    """The cases as a VLMEvalKit VStarBench TSV; each question names its case (the server tells
    the conversations apart by it)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, ["index", "question", "A", "B", "C", "D", "answer", "category", "image"],
                                delimiter="\t")
        writer.writeheader()
        for n, case in enumerate(cases):
            writer.writerow({"index": n, "question": f"{case['question']} [{case['id']}]",
                             **dict(zip("ABCD", case["options"])), "answer": "B", "category": "direct_attributes",
                             "image": base64.b64encode(fc.image_bytes(case)).decode()})
    return path


def case_of(messages: list[dict], ids: list[str]) -> str:
    text = json.dumps(messages[1]["content"])
    return next(i for i in ids if f"[{i}]" in text)


@pytest.mark.parametrize("agent", ["deepeyes"])
def test_eval_agent_replays_the_recorded_protocol(tmp_path, agent):
    cases = {c["id"]: c for c in fc.cases(agent)}
    asked: Counter[str] = Counter()
    lock = threading.Lock()

    def reply(body: dict) -> str:
        with lock:
            case = case_of(body["messages"], list(cases))
            asked[case] += 1
            return cases[case]["replies"][asked[case] - 1]

    data = vstar_tsv(tmp_path / "VStarBench.tsv", list(cases.values()))
    with ReplayServer(reply) as server:
        result = CliRunner().invoke(app, ["eval", "--agent", agent, "--benchmarks", "vstar", "--data",
                                          f"vstar={data}", "--model", server.url, "--out", str(tmp_path / "run"),
                                          "--concurrency", "4", "--lmu-data", str(tmp_path)])
        requests = list(server.requests)
    assert result.exit_code == 0, result.output
    by_case: dict[str, list[list[dict]]] = {}
    for body in requests:
        messages = fc.normal(body["messages"])
        case = case_of(body["messages"], list(cases))
        for message in messages:  # the recording's question, without the case's name
            message["parts"] = [{"text": p["text"].replace(f" [{case}]", "")} if "text" in p else p
                                for p in message["parts"]]
        by_case.setdefault(case, []).append(messages)
    records = {r["task_id"]: r for r in map(json.loads, (tmp_path / "run" / "trajectories.jsonl").open())}
    assert len(records) == len(cases)
    for n, (name, case) in enumerate(cases.items()):
        theirs = case[agent]
        assert fc.deltas(by_case[name]) == theirs["requests"], name
        record = records[f"vstar/{n}"]
        assert record["answer"] == theirs["answer"], name
        errors = [v for k, v in record["metadata"] if k == "error"]
        assert bool(errors) == (theirs["status"] == "error"), (name, errors)
    pages = "".join(p.read_text() for p in (tmp_path / "run" / "view").rglob("*.html"))
    assert "&lt;tool_call&gt;" in pages  # the viewer shows each call as the model wrote it
    report = (tmp_path / "run" / "report.md").read_text()
    assert f"| {agent} | 11 |" in report and f"11 turns, profile {agent}" in report, report
