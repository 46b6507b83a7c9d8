"""``codedance eval --agent NAME`` over real HTTP: the replay server answers each recorded case with
the replies the peer's own loop was given (``fixtures/<agent>.jsonl``), and what the server
receives, the saved answers and the report are compared with the recording."""

from __future__ import annotations

import base64
import csv
import dataclasses
import importlib.util
import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from codedance.agents.deepeyes import SOURCE as DEEPEYES_SOURCE
from codedance.agents.thyme import SOURCE as THYME_SOURCE
from codedance.cli import app
from codedance.config import load
from codedance.eval.options import EvalConfig
from codedance.eval.runner import run_eval
from codedance.policy import OpenAIChatPolicy
from codedance.policy.replay_server import ReplayServer, ServerReply
from codedance.prompts import image_from_bytes
from codedance.types import ExecResult, ExecStatus

pytestmark = pytest.mark.tier("integration")

_spec = importlib.util.spec_from_file_location(
    "fixture_cases", Path(__file__).parent / "fixture_cases.py"
)
fc = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(fc)  # type: ignore[union-attr]


def vstar_tsv(path: Path, cases: list[dict]) -> Path:
    """The cases as a VLMEvalKit VStarBench TSV; each question names its case (the server tells
    the conversations apart by it)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(
            f,
            ["index", "question", "A", "B", "C", "D", "answer", "category", "image"],
            delimiter="\t",
        )
        writer.writeheader()
        for n, case in enumerate(cases):
            writer.writerow(
                {
                    "index": n,
                    "question": f"{raw_question(case)} [{case['id']}]",
                    **dict(zip("ABCD", case["options"])),
                    "answer": "B",
                    "category": "direct_attributes",
                    "image": base64.b64encode(fc.image_bytes(case)).decode(),
                }
            )
    return path


def raw_question(case: dict) -> str:
    """The question without VLMEvalKit's option lines (the loader adds them back)."""
    return case["question"].split("\n")[0].removeprefix("Question: ")


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
        result = CliRunner().invoke(
            app,
            [
                "eval",
                "--agent",
                agent,
                "--benchmarks",
                "vstar",
                "--data",
                f"vstar={data}",
                "--model",
                server.url,
                "--out",
                str(tmp_path / "run"),
                "--concurrency",
                "4",
                "--lmu-data",
                str(tmp_path),
            ],
        )
        requests = list(server.requests)
    assert result.exit_code == 0, result.output
    by_case: dict[str, list[list[dict]]] = {}
    for body in requests:
        messages = fc.normal(body["messages"])
        case = case_of(body["messages"], list(cases))
        for message in messages:  # the recording's question, without the case's name
            message["parts"] = [
                {"text": p["text"].replace(f" [{case}]", "")} if "text" in p else p
                for p in message["parts"]
            ]
        by_case.setdefault(case, []).append(messages)
    records = {
        r["task_id"]: r for r in map(json.loads, (tmp_path / "run" / "trajectories.jsonl").open())
    }
    assert len(records) == len(cases)
    for n, (name, case) in enumerate(cases.items()):
        theirs = case[agent]
        assert fc.deltas(by_case[name]) == theirs["requests"], name
        record = records[f"vstar/{n}"]
        assert record["answer"] == theirs["answer"], name
        assert ["agent_source", DEEPEYES_SOURCE] in record["metadata"]
        errors = [v for k, v in record["metadata"] if k == "error"]
        assert bool(errors) == (theirs["status"] == "error"), (name, errors)
    pages = "".join(p.read_text() for p in (tmp_path / "run" / "view").rglob("*.html"))
    assert "&lt;tool_call&gt;" in pages  # the viewer shows each call as the model wrote it
    report = (tmp_path / "run" / "report.md").read_text()
    assert f"| {agent} | 11 |" in report and f"11 turns, profile {agent}" in report, report


class ToolByCode:
    """The recorded session-server results, looked up by the code sent (a test double for the
    tool's outputs; the codes of the recorded cases tell them apart)."""

    def __init__(self, cases: list[dict]) -> None:
        self.results = {}
        for case in cases:
            for code, result in zip(case["deepeyesv2"]["codes"], case["tool"], strict=True):
                assert self.results.setdefault(code, result) == result, f"two results for {code!r}"
        self.codes: list[str] = []

    def run(self, code: str) -> ExecResult:
        self.codes.append(code)
        result = self.results.get(code, {"stdout": "", "stderr": "", "images": []})
        images = tuple(
            image_from_bytes((fc.FIXTURES / "images" / name).read_bytes())
            for name in result["images"]
        )
        return ExecResult(
            ExecStatus.OK, stdout=result["stdout"], stderr=result["stderr"], images=images
        )

    async def arun(self, code: str) -> ExecResult:
        return self.run(code)

    def close(self) -> None:
        pass


def test_eval_deepeyesv2_replays_the_recorded_protocol(tmp_path):
    cases = {c["id"]: c for c in fc.cases("deepeyesv2")}
    asked: Counter[str] = Counter()
    lock = threading.Lock()

    def reply(body: dict) -> str:
        with lock:
            case = case_of(body["messages"], list(cases))
            asked[case] += 1
            return cases[case]["replies"][asked[case] - 1]

    data = vstar_tsv(tmp_path / "VStarBench.tsv", list(cases.values()))
    settings = load(
        EvalConfig,
        [
            "server.url=http://unused/v1",
            f"out={tmp_path / 'run'}",
            "benchmarks=vstar",
            f"data=[vstar={data}]",
            "agent=deepeyesv2",
            "concurrency=4",
        ],
        command="eval",
    ).run_settings()
    settings = dataclasses.replace(settings, progress=False)
    tool = ToolByCode(list(cases.values()))
    with ReplayServer(reply) as server:
        policy = OpenAIChatPolicy(server.url, "scripted")
        run_eval(policy, settings, tmp_path / "run", make_runner=lambda images: tool)
        policy.close()
        requests = list(server.requests)
    assert {tuple(r["stop"]) for r in requests} == {("</code>", "<|im_end|>")}
    by_case: dict[str, list[list[dict]]] = {}
    for body in requests:
        case = case_of(body["messages"], list(cases))
        messages = fc.normal(body["messages"])
        for message in messages:
            message["parts"] = [
                {"text": p["text"].replace(f" [{case}]", "")} if "text" in p else p
                for p in message["parts"]
            ]
        by_case.setdefault(case, []).append(messages)
    records = {
        r["task_id"]: r for r in map(json.loads, (tmp_path / "run" / "trajectories.jsonl").open())
    }
    for n, (name, case) in enumerate(cases.items()):
        assert fc.deltas(by_case[name]) == case["deepeyesv2"]["requests"], name
        assert records[f"vstar/{n}"]["answer"] == case["deepeyesv2"]["answer"], name
    assert "11 turns, profile deepeyesv2" in (tmp_path / "run" / "report.md").read_text()


def test_eval_deepeyesv2_runs_its_code_in_the_sandbox_with_image_1(tmp_path):
    """The real sandbox: ``image_1`` is the fitted input, the stop string the server keeps is
    handled, and the step's output comes back in the protocol's template."""
    case = fc.cases("deepeyesv2")[0]
    replies = iter(
        [
            (
                "<think>size?</think>\n<code>\n```python\nprint(image_1.size, Image.__name__)\n"
                "```\n</code>"
            ),
            "<think>ok</think>\n<answer>B</answer>",
        ]
    )
    data = vstar_tsv(tmp_path / "VStarBench.tsv", [case])
    with ReplayServer(lambda body: next(replies)) as server:
        result = CliRunner().invoke(
            app,
            [
                "eval",
                "--agent",
                "deepeyesv2",
                "--benchmarks",
                "vstar",
                "--data",
                f"vstar={data}",
                "--model",
                server.url,
                "--out",
                str(tmp_path / "run"),
                "--lmu-data",
                str(tmp_path),
            ],
        )
        requests = list(server.requests)
    assert result.exit_code == 0, result.output
    assert requests[1]["messages"][2] == {
        "role": "assistant",
        "content": "<think>size?</think>\n<code>\n```python\n"
        "print(image_1.size, Image.__name__)\n```</code>",
    }
    observation = requests[1]["messages"][3]["content"][0]["text"]
    assert observation == (
        "Code execution result:\nstdout:\n```\n(448, 336) PIL.Image\n\n```\n\n"
        "stderr:\n```\n\n```\n\nImages:\n"
    )


def test_eval_thyme_replays_the_recorded_protocol(tmp_path):
    """Thyme over HTTP: later calls of an attempt continue the last message (vLLM's
    ``continue_final_message``), its code runs in the real sandbox, and what the server receives
    matches what Thyme's own loop rendered."""
    cases = {c["id"]: c for c in fc.cases("thyme") if c["options"]}
    asked: Counter[str] = Counter()
    lock = threading.Lock()

    def reply(body: dict) -> ServerReply:
        with lock:
            case = case_of(body["messages"], list(cases))
            asked[case] += 1
            text = cases[case]["replies"][asked[case] - 1]
        stop = next((s for s in ("</code>", "</answer>") if text.endswith(s)), None)
        return ServerReply(text=text, stop_reason=stop)

    data = vstar_tsv(tmp_path / "VStarBench.tsv", list(cases.values()))
    with ReplayServer(reply) as server:
        result = CliRunner().invoke(
            app,
            [
                "eval",
                "--agent",
                "thyme",
                "--benchmarks",
                "vstar",
                "--data",
                f"vstar={data}",
                "--model",
                server.url,
                "--out",
                str(tmp_path / "run"),
                "--concurrency",
                "4",
                "--lmu-data",
                str(tmp_path),
            ],
        )
        requests = list(server.requests)
    assert result.exit_code == 0, result.output
    assert {tuple(r["stop"]) for r in requests} == {("</code>", "</answer>")}
    by_case: dict[str, list[dict]] = {}
    for body in requests:
        case = case_of(body["messages"], list(cases))
        messages = fc.normal(body["messages"])
        for message in messages:
            message["parts"] = [
                {"text": p["text"].replace(f" [{case}]", "")} if "text" in p else p
                for p in message["parts"]
            ]
        continued = body.get("continue_final_message", False)
        assert body.get("add_generation_prompt", True) is not continued
        by_case.setdefault(case, []).append(
            {"messages": fc.joined(messages), "continue": continued}
        )
    records = {
        r["task_id"]: r for r in map(json.loads, (tmp_path / "run" / "trajectories.jsonl").open())
    }
    for n, (name, case) in enumerate(cases.items()):
        theirs = [
            {"messages": fc.joined(r["messages"]), "continue": r["continue"]}
            for r in case["thyme"]["requests"]
        ]
        assert by_case[name] == theirs, name
        assert records[f"vstar/{n}"]["answer"] == case["thyme"]["answer"], name
        assert ["agent_source", THYME_SOURCE] in records[f"vstar/{n}"]["metadata"]
    pages = "".join(p.read_text() for p in (tmp_path / "run" / "view").rglob("*.html"))
    assert "&lt;code&gt;" in pages and "&lt;sandbox_output&gt;" in pages
    assert "profile thyme" in (tmp_path / "run" / "report.md").read_text()


def test_eval_mini_o3_replays_the_recorded_protocol(tmp_path):
    """Mini-o3 over HTTP: the input and every observation the server receives match what its own
    tool code produced for the same calls."""
    cases = {c["id"]: c for c in fc.cases("mini_o3")}
    asked: Counter[str] = Counter()
    lock = threading.Lock()

    def reply(body: dict) -> ServerReply:
        with lock:
            case = case_of(body["messages"], list(cases))
            asked[case] += 1
            text = cases[case]["replies"][asked[case] - 1]
        stop = "</grounding>" if text.endswith("</grounding>") else None
        return ServerReply(text=text, stop_reason=stop)

    data = vstar_tsv(tmp_path / "VStarBench.tsv", list(cases.values()))
    with ReplayServer(reply) as server:
        result = CliRunner().invoke(
            app,
            [
                "eval",
                "--agent",
                "mini-o3",
                "--benchmarks",
                "vstar",
                "--data",
                f"vstar={data}",
                "--model",
                server.url,
                "--out",
                str(tmp_path / "run"),
                "--concurrency",
                "4",
                "--lmu-data",
                str(tmp_path),
            ],
        )
        requests = list(server.requests)
    assert result.exit_code == 0, result.output
    assert {tuple(r["stop"]) for r in requests} == {("</grounding>",)}
    by_case: dict[str, list[list[dict]]] = {}
    for body in requests:
        by_case.setdefault(case_of(body["messages"], list(cases)), []).append(
            fc.normal(body["messages"])
        )
    vision = "<|vision_start|><|image_pad|><|vision_end|>"
    for name, case in cases.items():
        theirs, seen = case["mini-o3"], by_case[name]
        assert len(seen) == theirs["calls"], name
        assert seen[0][1]["parts"][0] == {"image": theirs["input"]}, name
        for messages, turn in zip(seen[1:], theirs["turns"], strict=True):
            parts = messages[-1]["parts"]
            text = "".join(p.get("text", vision) for p in parts)
            assert (
                f"<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
                == (turn["message"])
            ), name
            assert [p["image"] for p in parts if "image" in p] == turn["images"], name
    pages = "".join(p.read_text() for p in (tmp_path / "run" / "view").rglob("*.html"))
    assert "&lt;grounding&gt;" in pages
    assert "profile mini-o3" in (tmp_path / "run" / "report.md").read_text()
