"""Each agent profile against its peer's own evaluation loop (``fixtures/<agent>.jsonl``, recorded
by ``scripts/record_agent_fixtures.py`` running the peer's file at its pinned commit on scripted
replies). Agreement per case: the same number of model calls, every request's messages equal
(text parts exactly, images pixel for pixel), the same extracted answer, and an error exactly
when the peer's loop recorded one."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from codedance.agents import get_agent
from codedance.agents.deepeyesv2 import PRELUDE
from codedance.policy import ScriptedPolicy, ScriptExhaustedError
from codedance.policy.wire import message_json
from codedance.prompts import image_from_bytes
from codedance.rollout import EpisodeConfig, drive_episode
from codedance.types import ExecResult, ExecStatus

pytestmark = pytest.mark.tier("unit")

_spec = importlib.util.spec_from_file_location(
    "fixture_cases", Path(__file__).parent / "fixture_cases.py"
)
fc = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(fc)  # type: ignore[union-attr]


def replay(agent_name: str, case: dict) -> dict:
    """What the profile does with the case's replies, in the recorder's form."""
    agent = get_agent(agent_name)
    config = agent.episode_config(EpisodeConfig())
    task = fc.task_of(case)
    policy = ScriptedPolicy(case["replies"])
    episode = agent.start(task, config)
    runner = agent.runner(agent.images_of(task, config))
    failed = False
    try:
        drive_episode(episode, policy, runner)
    except ScriptExhaustedError:  # asked for a reply the peer's loop also asked for and did not get
        failed = True
    requests = [fc.normal([message_json(m) for m in seen]) for seen in policy.seen]
    failed = failed or any(key == "error" for key, _ in episode.trajectory().metadata)
    return {
        "requests": fc.deltas(requests),
        "answer": episode.answer,
        "status": "error" if failed else "success",
    }


@pytest.mark.parametrize("case", fc.cases("deepeyes"), ids=lambda c: c["id"])
def test_deepeyes_matches_its_eval_loop(case):
    ours, theirs = replay("deepeyes", case), case["deepeyes"]
    assert len(ours["requests"]) == len(theirs["requests"])
    assert ours["requests"] == theirs["requests"]
    assert ours["answer"] == theirs["answer"]
    assert ours["status"] == theirs["status"]


def test_the_deepeyes_fixture_covers_every_kind_of_reply():
    recorded = fc.cases("deepeyes")
    statuses = {c["deepeyes"]["status"] for c in recorded}
    crops = {
        p["image"]
        for c in recorded
        for request in c["deepeyes"]["requests"][1:]
        for m in request
        for p in m["parts"]
        if "image" in p
    }
    assert statuses == {"success", "error"} and len(crops) >= 10
    assert max(len(c["deepeyes"]["requests"]) for c in recorded) == 11  # its turn limit is reached


class ScriptedTool:
    """The session server's results of a recorded case (its stdout, stderr and images); keeps
    every code it is given. A test double for the tool's outputs only: the code is not run."""

    def __init__(self, results: list[dict]) -> None:
        self.results, self.codes = results, []

    def run(self, code: str) -> ExecResult:
        self.codes.append(code)
        if len(self.codes) == 1:  # the prelude
            return ExecResult(ExecStatus.OK)
        result = self.results[len(self.codes) - 2]
        images = tuple(
            image_from_bytes((fc.FIXTURES / "images" / name).read_bytes())
            for name in result["images"]
        )
        return ExecResult(
            ExecStatus.OK, stdout=result["stdout"], stderr=result["stderr"], images=images
        )

    async def arun(self, code: str) -> ExecResult:
        return self.run(code)


@pytest.mark.parametrize("case", fc.cases("deepeyesv2"), ids=lambda c: c["id"])
def test_deepeyesv2_matches_its_eval_loop(case):
    agent = get_agent("deepeyesv2")
    config = agent.episode_config(EpisodeConfig())
    task = dataclasses.replace(fc.task_of(case), question=case["question"])
    policy, tool = ScriptedPolicy(case["replies"]), ScriptedTool(case["tool"])
    episode = agent.start(task, config)
    drive_episode(
        episode, policy, agent.runner(agent.images_of(task, config), sandbox=lambda images: tool)
    )
    theirs = case["deepeyesv2"]
    requests = fc.deltas([fc.normal([message_json(m) for m in seen]) for seen in policy.seen])
    assert requests == theirs["requests"]
    # the image_1 prelude runs before the first snippet (the source runs it before the first reply)
    assert tool.codes == ([PRELUDE, *theirs["codes"]] if theirs["codes"] else [])
    assert episode.answer == theirs["answer"] and theirs["status"] == "success"
