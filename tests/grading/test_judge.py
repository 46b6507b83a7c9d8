"""The LLM judge against a real local HTTP server speaking OpenAI chat completions.

The server (stdlib ``http.server`` in a thread) answers with scripted verdicts: by default
"Judgement: 1" when the model answer (case-insensitively) contains the standard answer, else
"Judgement: 0"; ``replies`` overrides the reply for a given model answer.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from codedance.grading import (
    JUDGE_SERVER,
    JudgeCache,
    JudgeClient,
    JudgeError,
    JudgeItem,
    JudgeUnavailableError,
    JudgeVerdictError,
    grade_response,
)
from codedance.types import AnswerKind, Task

pytestmark = pytest.mark.tier("unit")


class FakeJudgeServer:
    def __init__(self) -> None:
        self.replies: dict[str, str] = {}
        self.bodies: list[dict] = []
        self.delay_s = 0.0
        self.fail_first: list[int] = []  # HTTP statuses to send before answering normally
        self.in_flight = 0
        self.max_in_flight = 0
        # the first `gate.parties` requests are held until that many are in flight at once (a
        # serial client leaves them waiting out the timeout, and max_in_flight stays 1)
        self.gate: threading.Barrier | None = None
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.bodies.append(body)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    status = server.fail_first.pop(0) if server.fail_first else 200
                    gated = server.gate is not None and len(server.bodies) <= server.gate.parties
                try:
                    if gated:
                        with contextlib.suppress(threading.BrokenBarrierError):
                            server.gate.wait()
                    time.sleep(server.delay_s)
                    if self.path != "/v1/chat/completions":
                        status = 404
                    if status != 200:
                        self._send(status, {"error": "scripted failure"})
                        return
                    prompt = body["messages"][-1]["content"]
                    gold = re.findall(r"\[Standard answer\]: (.*)", prompt)[-1]
                    pred = re.findall(r"\[Model answer\]: (.*)", prompt)[-1]
                    verdict = "1" if gold.lower() in pred.lower() else "0"
                    content = server.replies.get(pred, f"Judgement: {verdict}")
                    self._send(
                        200,
                        {
                            "choices": [
                                {"index": 0, "message": {"role": "assistant", "content": content}}
                            ]
                        },
                    )
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[FakeJudgeServer]:
    srv = FakeJudgeServer()
    yield srv
    srv.close()


def client_for(server: FakeJudgeServer, **kwargs: object) -> JudgeClient:
    return JudgeClient(
        replace(JUDGE_SERVER, url=server.url, model="judge", backoff_s=0.01, **kwargs)
    )  # type: ignore[arg-type]


def test_verdicts_and_deterministic_request(server: FakeJudgeServer) -> None:
    with client_for(server) as judge:
        assert judge.judge(question="Color?", gold="tan", prediction="It is tan") is True
        assert judge.judge(question="Color?", gold="tan", prediction="blue") is False
    body = server.bodies[0]
    assert body["model"] == "judge" and body["temperature"] == 0.0 and body["seed"] == 0
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][1]["content"].rstrip().endswith("[Model answer]: It is tan\nJudgement:")


def test_cache_avoids_repeat_requests_and_persists(server: FakeJudgeServer, tmp_path) -> None:
    path = tmp_path / "judge_cache.jsonl"
    with JudgeClient(
        replace(JUDGE_SERVER, url=server.url, model="judge"), JudgeCache(path)
    ) as judge:
        for _ in range(3):
            assert judge.judge(question="q", gold="4", prediction="4 apples")
        assert len(server.bodies) == 1
        judge.judge(question="q", gold="4", prediction="5 apples")  # other prediction: new key
        judge.judge(question="other q", gold="4", prediction="4 apples")  # other question: new key
        assert len(server.bodies) == 3
    # a fresh client with the same file asks nothing
    with JudgeClient(
        replace(JUDGE_SERVER, url=server.url, model="judge"), JudgeCache(path)
    ) as judge:
        assert judge.judge(question="q", gold="4", prediction="4 apples")
        assert judge.judge(question="q", gold="4", prediction="5 apples") is False
    assert len(server.bodies) == 3
    # another judge model is another key
    with JudgeClient(
        replace(JUDGE_SERVER, url=server.url, model="judge-2"), JudgeCache(path)
    ) as judge:
        judge.judge(question="q", gold="4", prediction="4 apples")
    assert len(server.bodies) == 4


@pytest.mark.parametrize("reply", ["Yes", "1 or 0", "Judgement: 2", "", "The answer is correct: 1"])
def test_strict_verdict_parsing_raises(server: FakeJudgeServer, reply: str) -> None:
    server.replies["odd"] = reply
    with client_for(server) as judge, pytest.raises(JudgeVerdictError):
        judge.judge(question="q", gold="x", prediction="odd")
    assert len(judge.cache) == 0  # errors are never cached


def test_concurrency_is_bounded_and_parallel(server: FakeJudgeServer) -> None:
    server.gate = threading.Barrier(4, timeout=10)
    server.delay_s = 0.05  # the later requests overlap too, and never exceed the bound
    items = [JudgeItem("q", "a", f"a{i}") for i in range(8)] + [JudgeItem("q", "a", "b")]
    with client_for(server, max_in_flight=4) as judge:
        verdicts = judge.judge_many(items + items[:2])  # duplicates are asked once
    assert verdicts == [True] * 8 + [False] + [True, True]
    assert len(server.bodies) == 9
    assert server.max_in_flight == 4


def test_retries_as_every_model_client_then_raises(server: FakeJudgeServer) -> None:
    server.fail_first = [503, 429, 408]  # the retried statuses of every served model's client
    with client_for(server, retries=3) as judge:
        assert judge.judge(question="q", gold="a", prediction="a")
    assert len(server.bodies) == 4
    server.fail_first = [500, 500, 500]
    with client_for(server, retries=2) as judge, pytest.raises(JudgeError, match="HTTP 500"):
        judge.judge(question="q", gold="a", prediction="again")
    server.fail_first = [400]
    with client_for(server) as judge, pytest.raises(JudgeError, match="HTTP 400"):
        judge.judge(question="q", gold="a", prediction="bad request")


def test_clear_error_when_server_is_down() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    config = replace(JUDGE_SERVER, url=f"http://127.0.0.1:{port}/v1", model="judge", timeout_s=2)
    with (
        JudgeClient(config) as judge,
        pytest.raises(JudgeUnavailableError, match="not reachable") as info,
    ):
        judge.judge(question="q", gold="a", prediction="a")
    assert f"127.0.0.1:{port}/v1/chat/completions" in str(info.value)
    assert "vllm serve judge" in str(info.value)


def test_grade_with_judge_fallback(server: FakeJudgeServer) -> None:
    task = Task(
        id="t",
        question="What is on the table?",
        images=(),
        answer="a red apple",
        kind=AnswerKind.TEXT,
    )
    server.replies["an apple that is red"] = "Judgement: 1"
    with client_for(server) as judge:
        rule = grade_response(response="<answer>an apple that is red</answer>", task=task)
        fallback = grade_response(
            response="<answer>an apple that is red</answer>",
            task=task,
            judge=judge,
            judge_policy="fallback",
        )
        exact = grade_response(
            response="<answer>A red apple.</answer>",
            task=task,
            judge=judge,
            judge_policy="fallback",
        )
    assert (rule.correct, rule.scorer) == (False, "rule:text")
    assert (fallback.correct, fallback.scorer) == (True, "judge")
    assert (exact.correct, exact.scorer) == (True, "rule:text")
    assert len(server.bodies) == 1  # the rule decided the exact match without the judge
