"""The eval's judge steps over a real HTTP server (a scripted OpenAI-compatible one)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from codedance.eval.judge_steps import (
    TEXT_MAX_TOKENS,
    charxiv_score,
    extract_answer_with_judge,
    mathverse_consistent,
)
from codedance.grading import JUDGE_SERVER, JudgeClient, JudgeVerdictError
from codedance.policy.replay_server import ReplayServer

pytestmark = pytest.mark.tier("unit")


def script(body: dict) -> str:
    prompt = body["messages"][-1]["content"]
    if prompt.endswith("Extracted answer:"):
        return "Extracted answer: 14" if "answer is fourteen" in prompt else "null"
    if prompt.endswith("Judgement:"):
        return "Judgement: 1" if "[Model answer]: 14\n" in prompt else "Judgement: 0"
    return "not json" if "BROKEN" in prompt else json.dumps({"extracted_answer": "3.5", "score": 1})


@pytest.fixture
def served():
    with (
        ReplayServer(script) as server,
        JudgeClient(replace(JUDGE_SERVER, url=server.url, model="scripted", retries=0)) as judge,
    ):
        yield server, judge


def test_one_client_asks_verdicts_short_and_extractions_long(served):
    server, judge = served
    assert extract_answer_with_judge(judge, "Q?", "So the answer is fourteen.") == "14"
    assert extract_answer_with_judge(judge, "Q?", "I cannot tell.") == ""
    assert mathverse_consistent(judge, "Q?", "14.0", "14") is True
    assert mathverse_consistent(judge, "Q?", "14.0", "15") is False
    assert mathverse_consistent(judge, "Q?", "C", "C") is True  # exact match: not asked
    assert [r["max_tokens"] for r in server.requests] == [TEXT_MAX_TOKENS, TEXT_MAX_TOKENS, 16, 16]


def test_charxiv_reads_the_json_and_retries_a_broken_reply(served):
    server, judge = served
    assert charxiv_score(judge, "Grade {PREDICTION}.", "3.5") == (1.0, "3.5")
    with pytest.raises(JudgeVerdictError, match="after 2 tries"):
        charxiv_score(judge, "BROKEN {PREDICTION}", "3.5", retries=2)
    assert (
        len(server.requests) == 3 and server.requests[0]["messages"][0]["content"] == "Grade 3.5."
    )
