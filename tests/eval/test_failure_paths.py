"""``codedance eval`` when things go wrong, over real HTTP with the real sandbox.

A server that dies mid-run (circuit breaker, honest partial report, resume), garbage replies,
an unreadable image, a judge that answers garbage, impossible settings; then Avg@k and the
MathVision testmini end to end. The model's and the judge's choices are scripted
(`ReplayServer`); everything else is real.
"""

from __future__ import annotations

import json
import re
import shutil
import threading

import pytest
from typer.testing import CliRunner

from codedance.policy.replay_server import ReplayServer, ServerReply
from codedance.records import read_jsonl

from .test_cli import cli

pytestmark = [pytest.mark.tier("integration"), pytest.mark.slow]


def _golds(root, n=None):
    """id -> MATH-V item of the first ``n`` testmini items."""
    items = [
        json.loads(line) for line in (root / "data" / "testmini.jsonl").read_text().splitlines()[:n]
    ]
    return {item["id"]: item for item in items}


def _item_of(body, golds):
    """The item a request asks about: its question, and its options where two questions are
    alike."""
    text = json.dumps(body["messages"])
    found = [
        item
        for item in golds.values()
        if json.dumps(item["question"].replace("<image1>", "").strip())[1:-1] in text
    ]
    if len(found) > 1:
        found = [
            item
            for item in found
            if all(
                json.dumps(f"({chr(65 + k)}) {o}")[1:-1] in text
                for k, o in enumerate(item["options"])
            )
        ]
    assert len(found) == 1, text[:300]
    return found[0]


def _args(root, out, url, limit, *extra):
    return [
        "eval",
        "--benchmarks",
        "mathvision_mini",
        "--data",
        f"mathvision_mini={root}",
        "--limit",
        str(limit),
        "--out",
        str(out),
        "--model",
        url,
        "--retries",
        "0",
        "--scoring",
        "strict",
        *extra,
    ]


def _charxiv(fx, root):
    """Three CharXiv reasoning rows in ``root``, each scored by a judge."""
    fx.tsv(
        root / "CharXiv_reasoning_val.tsv",
        [
            {
                "index": str(i),
                "image": fx.png(),
                "question": f"CX{i}",
                "answer": "3",
                "inst_category": "3",
                "grading_query": "Grade {PREDICTION} as JSON.",
            }
            for i in range(3)
        ],
    )


def _judged_args(root, model_url, judge_url):
    """`_charxiv`'s rows evaluated into ``root/j`` with the judge at ``judge_url``."""
    return [
        "eval",
        "--benchmarks",
        "charxiv",
        "--lmu-data",
        str(root),
        "--out",
        str(root / "j"),
        "--model",
        model_url,
        "--judge",
        judge_url,
        "--judge-model",
        "judge",
        "--retries",
        "0",
    ]


def test_dead_server_mid_run_stops_after_consecutive_failures_and_a_rerun_resumes(
    tmp_path, mathv_root
):
    golds = _golds(mathv_root, 12)
    lock, served = threading.Lock(), []

    def dying(body):  # answers 4 samples right, then every connection dies
        with lock:
            served.append(1)
            if len(served) > 4:
                return ServerReply(drop=True)
        return f"<answer>{_item_of(body, golds)['answer']}</answer>"

    out = tmp_path / "run"
    with ReplayServer(dying) as server:
        result = CliRunner().invoke(
            cli(), _args(mathv_root, out, server.url, 12, "--concurrency", "1", "--stop-after", "3")
        )
        asked = len(server.requests)
    assert result.exit_code == 1, result.output
    assert "stopped early: 3 consecutive server failures" in result.output
    assert "3/12 samples failed" in result.output and "PolicyConnectionError" in result.output
    assert str(out / "failures.jsonl") in result.output.replace("\n", "")
    assert asked == 7  # 4 answered, 3 dropped, then nothing more was tried
    assert len(read_jsonl(out / "trajectories.jsonl")) == 4
    report = json.loads((out / "report.json").read_text())["results"][0]
    assert report["complete"] is False and report["scored"] == 4 and report["failed"] == 3
    assert "| scripted | 100.0* (4/12) |" in (out / "report.md").read_text()

    with ReplayServer(lambda body: f"<answer>{_item_of(body, golds)['answer']}</answer>") as server:
        again = CliRunner().invoke(
            cli(), _args(mathv_root, out, server.url, 12, "--concurrency", "4")
        )
        assert len(server.requests) == 8  # only what had not finished
    assert again.exit_code == 0, again.output
    assert "| scripted | 100.0 |" in (out / "report.md").read_text()

    partial = tmp_path / "partial"
    shutil.copytree(out, partial)
    data = json.loads((partial / "report.json").read_text())
    data["results"][0].update(complete=False, scored=4)
    (partial / "report.json").write_text(json.dumps(data))
    refused = CliRunner().invoke(cli(), ["report", str(out), str(partial)])
    assert (
        refused.exit_code == 0
        and "(Δ n/c)" in refused.output
        and "--allow-incomplete" in refused.output
    )
    allowed = CliRunner().invoke(cli(), ["report", str(out), str(partial), "--allow-incomplete"])
    assert "100.0* (4/12)" in allowed.output and "(+0.0" in allowed.output


def test_garbage_replies_fail_their_samples_and_the_reason_is_printed(tmp_path, mathv_root):
    golds = _golds(mathv_root, 4)

    def half_garbage(body):
        item = _item_of(body, golds)
        return (
            ServerReply(raw=b"<html>oops</html>")
            if int(item["id"]) % 2
            else f"<answer>{item['answer']}</answer>"
        )

    with ReplayServer(half_garbage) as server:
        result = CliRunner().invoke(cli(), _args(mathv_root, tmp_path / "g", server.url, 4))
    assert result.exit_code == 1
    odd = sum(1 for item in golds.values() if int(item["id"]) % 2)
    assert f"{odd}/4 samples failed; most common: MalformedResponseError" in result.output.replace(
        "\n", " "
    )
    assert (
        f"{100 * (4 - odd) / (4 - odd):.1f}* ({4 - odd}/4)"
        in (tmp_path / "g" / "report.md").read_text()
    )


def test_an_unreadable_image_fails_that_row_only_and_names_it(tmp_path, mathv_root):
    root = tmp_path / "mv"
    (root / "data").mkdir(parents=True)
    lines = (mathv_root / "data" / "testmini.jsonl").read_text().splitlines()[:3]
    (root / "data" / "testmini.jsonl").write_text("\n".join(lines) + "\n")
    for line in lines:
        image = json.loads(line)["image"]
        (root / image).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(mathv_root / image, root / image)
    bad = json.loads(lines[1])
    (root / bad["image"]).write_text("this is not an image")
    with ReplayServer(lambda body: "<answer>1</answer>") as server:
        result = CliRunner().invoke(cli(), _args(root, tmp_path / "b", server.url, 3))
        assert len(server.requests) == 2
    assert result.exit_code == 1
    failure = read_jsonl(tmp_path / "b" / "failures.jsonl")[0]
    assert failure["key"] == f"mathvision_mini/{bad['id']}#0"
    assert (
        f"mathvision_mini/{bad['id']}: image {bad['image']} is not a readable image"
        in failure["error"]
    )
    assert len(read_jsonl(tmp_path / "b" / "trajectories.jsonl")) == 2


def test_a_judge_that_answers_garbage_scores_zero_and_is_counted(tmp_path, fx):
    _charxiv(fx, tmp_path)
    with (
        ReplayServer(lambda body: "<answer>3</answer>") as model,
        ReplayServer(lambda body: "I think it is right!", model_names=("judge",)) as judge,
    ):
        result = CliRunner().invoke(cli(), _judged_args(tmp_path, model.url, judge.url))
        assert len(judge.requests) == 3 * 10  # VLMEvalKit's 10 tries per sample, then 0
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "j" / "report.json").read_text())["results"][0]
    assert (
        report["headline"] == 0.0 and report["judge_failures"] == 3 and report["judge"] == "judge"
    )
    md = (tmp_path / "j" / "report.md").read_text()
    assert "3 sample(s) scored 0 because the judge's replies gave no verdict" in md
    assert "scoring vlmevalkit, judge judge, 10 turns" in md


def test_judge_free_mathvision_is_not_produced_with_its_rule_only_bound(tmp_path, mathv_root):
    golds = _golds(mathv_root, 6)

    def model(
        body,
    ):  # right on even ids; a wrong number (needs VLMEvalKit's judge) or letter on odd ones
        item = _item_of(body, golds)
        wrong = "Z" if item["options"] else "987654"
        return f"<answer>{item['answer'] if int(item['id']) % 2 == 0 else wrong}</answer>"

    with ReplayServer(model) as server:
        args = _args(mathv_root, tmp_path / "n", server.url, 6)
        args[args.index("strict")] = "vlmevalkit"
        assert CliRunner().invoke(cli(), args).exit_code == 0
    right = sum(1 for item in golds.values() if int(item["id"]) % 2 == 0)
    assert any(
        int(i["id"]) % 2 and not i["options"] for i in golds.values()
    )  # at least one pending
    md = (tmp_path / "n" / "report.md").read_text()
    assert f"| scripted | n/p (rule-only ≥ {100 * right / 6:.1f}) |" in md


def test_impossible_settings_are_refused_before_anything_runs(tmp_path):
    with ReplayServer(["<answer>1</answer>"]) as server:
        for extra, message in (
            (["--concurrency", "0"], "--concurrency must be at least 1"),
            (["--samples", "3"], "--samples 3 needs --temperature above 0"),
            (["--limit", "0"], "--limit must be at least 1"),
            (["--scoring", "lenient"], "--scoring must be one of vlmevalkit, strict"),
        ):
            result = CliRunner().invoke(
                cli(),
                [
                    "eval",
                    "--benchmarks",
                    "chartqa",
                    "--model",
                    server.url,
                    "--out",
                    str(tmp_path / "r"),
                    *extra,
                ],
            )
            assert result.exit_code == 2 and message in result.output, result.output
        assert server.requests == []
    assert not (tmp_path / "r").exists()


def test_samples_k_report_avg_at_k_with_a_bootstrap_interval_and_pass_at_k(tmp_path, mathv_root):
    golds = _golds(mathv_root, 10)
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def alternating(
        body,
    ):  # per item: samples 1 and 3 right, sample 2 wrong; items with even id always wrong
        item = _item_of(body, golds)
        with lock:
            seen[item["id"]] = seen.get(item["id"], 0) + 1
            n = seen[item["id"]]
        right = int(item["id"]) % 2 == 1 and n != 2
        return (
            f"<answer>{item['answer'] if right else 'Z' if item['options'] else '987654'}</answer>"
        )

    out = tmp_path / "k"
    with ReplayServer(alternating) as server:
        result = CliRunner().invoke(
            cli(),
            _args(
                mathv_root,
                out,
                server.url,
                10,
                "--samples",
                "3",
                "--temperature",
                "0.7",
                "--concurrency",
                "1",
            ),
        )
    assert result.exit_code == 0, result.output
    r = json.loads((out / "report.json").read_text())["results"][0]
    odd = sum(1 for item in golds.values() if int(item["id"]) % 2 == 1)
    assert r["samples_per_item"] == 3 and r["scored"] == 30 and r["complete"]
    assert abs(r["headline"] - odd * 2 / 3 / 10) < 1e-9  # Avg@3
    assert r["pass_at_k"] == odd / 10 and r["interval_kind"] == "bootstrap over items"
    low, high = r["interval"]
    assert low <= r["headline"] <= high and low < high
    assert re.search(
        r"\| MathVision \(testmini\) \| \d+\.\d \| \[\d+\.\d, \d+\.\d\] \| bootstrap over items \| "
        rf"{100 * odd / 10:.1f} \| 3 \| 30/30 \|",
        (out / "report.md").read_text(),
    )


def test_mathvision_testmini_end_to_end_with_code_and_a_judge(tmp_path, mathv_root):
    """All 304 items: the real sandbox runs code on every 10th, wrong answers on ids divisible by
    3."""
    golds = _golds(mathv_root)
    code = "<think>look</think><code>\n```python\nprint(input_image.size)\n```\n</code>"

    def model(body):
        item = _item_of(body, golds)
        calls = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if int(item["id"]) % 10 == 0 and calls == 0:
            return code
        wrong = int(item["id"]) % 3 == 0
        answer = ("Z" if item["options"] else "987654") if wrong else item["answer"]
        return f"<answer>{answer}</answer>"

    def extraction(body):  # the judge copies the response back (our prompt ends with it)
        prompt = body["messages"][-1]["content"]
        return prompt.rsplit("Model response: ", 1)[1].rsplit("\nExtracted answer:", 1)[0]

    out = tmp_path / "mv"
    with ReplayServer(model) as server, ReplayServer(extraction, model_names=("judge",)) as judge:
        result = CliRunner().invoke(
            cli(),
            [
                "eval",
                "--benchmarks",
                "mathvision_mini",
                "--data",
                f"mathvision_mini={mathv_root}",
                "--out",
                str(out),
                "--model",
                server.url,
                "--judge",
                judge.url,
                "--judge-model",
                "judge",
                "--concurrency",
                "16",
            ],
        )
    assert result.exit_code == 0, result.output
    r = json.loads((out / "report.json").read_text())["results"][0]
    right = sum(1 for item in golds.values() if int(item["id"]) % 3)
    assert len(golds) == r["expected"] == r["scored"] == 304 and r["complete"]
    assert abs(r["headline"] - right / 304) < 1e-9
    coded = [item for item in golds.values() if int(item["id"]) % 10 == 0]
    assert r["agent"]["calls"] == len(coded) and r["by_tool_use"][0][1] == len(coded)
    assert r["agent"]["exec_success_per_call"] == 1.0
    md = (out / "report.md").read_text()
    assert "## How each number was made" in md and "| MathVision (testmini) by category |" not in md
    assert "## MathVision (testmini) by category" in md and "## Accuracy by code use (%)" in md
    assert "How each number was made" in (out / "report.html").read_text()
    index = (out / "view" / "index.html").read_text()
    assert (
        "<th>subject</th><th>level</th>" in index
        and "<th>exec status</th>" in index
        and ">ok 1<" in index
    )
    ids = re.findall(r"href='mathvision_mini/(\d+)_0.html'", index)
    assert [int(i) for i in ids] == sorted(int(i) for i in golds)  # id order, not completion order


def test_a_server_answering_503_trips_the_breaker_and_the_reason_is_whole(tmp_path, mathv_root):
    golds = _golds(mathv_root, 12)
    lock, served = threading.Lock(), []
    shutting = "server is shutting down, " + "please try another replica " * 12

    def overloaded(body):  # answers 4 samples right, then only 503 with a long OpenAI error body
        with lock:
            served.append(1)
            if len(served) > 4:
                return ServerReply(status=503, error=shutting)
        return f"<answer>{_item_of(body, golds)['answer']}</answer>"

    out = tmp_path / "run"
    with ReplayServer(overloaded) as server:
        result = CliRunner().invoke(
            cli(),
            [*_args(mathv_root, out, server.url, 12, "--concurrency", "1", "--stop-after", "3")],
        )
        asked = len(server.requests)
    assert result.exit_code == 1, result.output
    assert "stopped early: 3 consecutive server failures" in result.output
    assert asked == 7  # 4 answered, 3 answered 503 (no retries here), then nothing more was tried
    printed = " ".join(result.output.split())
    assert "HTTP 503" in printed and "server is shutting down" in printed
    assert '{"error"' not in printed and "…" in printed  # the message, cut between words


def test_a_judge_that_never_answers_leaves_judged_numbers_not_produced_and_exit_1(tmp_path, fx):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    _charxiv(fx, tmp_path)
    with ReplayServer(lambda body: "<answer>3</answer>") as model:
        result = CliRunner().invoke(cli(), _judged_args(tmp_path, model.url, dead))
    assert result.exit_code == 1, result.output
    printed = " ".join(result.output.split())
    assert f"the judge at {dead} did not answer" in printed
    md = (tmp_path / "j" / "report.md").read_text()
    assert "3 of 3 samples were not judged: the judge did not answer" in md
    assert "rerun with --judge URL" not in md
