"""The filter stage's judge over real HTTP (replay servers playing the models' choices): rules
first, the judge only for what the rules cannot decide, one request per distinct answer, every
verdict recorded, a non-verdict left out of the rate."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from codedance.curate.config import ENDPOINT, FilterConfig
from codedance.curate.endpoints import Endpoint
from codedance.curate.filtering import classify
from codedance.curate.sources import Item, item_key
from codedance.policy.replay_server import ReplayServer
from codedance.types import AnswerKind
from codedance.world import generate

pytestmark = pytest.mark.tier("integration")


def _item(kind: AnswerKind) -> Item:
    task = replace(generate("search", "medium", 0), kind=kind, answer="7")
    return Item(item_key(task), task, "world", "crop")


def test_filter_asks_the_judge_only_about_answers_the_rules_cannot_decide() -> None:
    weak_said = iter(["7", "seven", "seven", "8"] * 3)
    strong_said = iter(["7", "7", "the number 7", "no idea"] * 3)

    def weak(body: dict) -> str:
        return f"<think>look</think><answer>{next(weak_said)}</answer>"

    def strong(body: dict) -> str:
        return f"<think>look</think><answer>{next(strong_said)}</answer>"

    verdicts = {
        "seven": "Judgement: 1",
        "8": "Judgement: 0",
        "the number 7": "Judgement: 1",
        "no idea": "perhaps",
    }

    def judge(body: dict) -> str:
        content = body["messages"][0]["content"]
        text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
        prediction = text.rsplit("[Model answer]: ", 1)[1].split("\n")[0]
        return verdicts[prediction]

    async def main(kind: AnswerKind, mode: str, servers: dict) -> tuple[dict, int]:
        endpoints = {
            r: Endpoint(r, replace(ENDPOINT, url=s.url, model="m", retries=0))
            for r, s in servers.items()
        }
        before = len(servers["judge"].requests)
        try:
            record = await classify(
                _item(kind),
                endpoints["weak"],
                endpoints["strong"],
                FilterConfig(k=4, easy_threshold=0.9, judge=mode),
                judge=endpoints["judge"],
            )
        finally:
            for e in endpoints.values():
                await e.aclose()
        return record, len(servers["judge"].requests) - before

    with (
        ReplayServer(weak, ("m",)) as w,
        ReplayServer(strong, ("m",)) as s,
        ReplayServer(judge, ("m",)) as j,
    ):
        servers = {"weak": w, "strong": s, "judge": j}
        text, text_asked = asyncio.run(main(AnswerKind.TEXT, "undecided", servers))
        count, count_asked = asyncio.run(main(AnswerKind.COUNT, "undecided", servers))
        never, never_asked = asyncio.run(main(AnswerKind.TEXT, "never", servers))
    # text: "seven" (twice: one request) and "8" go to the judge; weak 3/4 -> not easy at 0.9
    by_answer = {x["answer"]: x for x in text["weak"]}
    assert by_answer["7"]["graded_by"] == "rule" and by_answer["seven"]["graded_by"] == "judge"
    assert by_answer["seven"]["judge"] == {"verdict": True, "reply": "Judgement: 1"}
    assert by_answer["8"]["correct"] is False and text["weak_rate"] == 0.75
    # strong: a judge reply that is no verdict leaves the sample out of the rate (3 of 3 counted)
    unsure = next(x for x in text["strong"] if x["answer"] == "no idea")
    assert unsure["correct"] is None and unsure["judge"]["problem"] == "judge_unparseable"
    assert text["strong_rate"] == 1.0 and text["difficulty"] == "medium"
    assert text_asked == 4  # seven, 8, the number 7, no idea: one request each
    # a count's rule is decisive ("seven" is 7 by the count rule; "8" is wrong): no judge
    assert count_asked == 0 and all(x["graded_by"] == "rule" for x in count["weak"])
    assert never_asked == 0 and never["weak_rate"] == 0.25
