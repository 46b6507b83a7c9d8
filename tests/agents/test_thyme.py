"""The ``thyme`` profile against Thyme's own loop and sandbox (``fixtures/thyme.jsonl``, recorded by
``scripts/record_agent_fixtures.py`` running its VLMEvalKit model code at the pinned commit on
scripted replies). Each case runs here in codedance's real sandbox. Agreement per case: every
rendering request equal (the messages with adjacent texts joined, as the chat template joins
them; images pixel for pixel; whether the last message is continued), every snippet rewritten as
its sandbox executed it, and the same answer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from codedance.agents import get_agent
from codedance.agents.thyme import final_answer, question_of
from codedance.agents.thyme_code import NEW_ATTEMPT, clamp_box, is_refused, prepare
from codedance.policy import ScriptedPolicy
from codedance.policy.wire import message_json
from codedance.rollout import EpisodeConfig, drive_episode
from codedance.sandbox.pool import SandboxPool

pytestmark = pytest.mark.tier("integration")

_spec = importlib.util.spec_from_file_location(
    "fixture_cases", Path(__file__).parent / "fixture_cases.py"
)
fc = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(fc)  # type: ignore[union-attr]

CASES = fc.cases("thyme")


class Recording:
    """The profile's runner, keeping every action it is given."""

    def __init__(self, runner) -> None:
        self.runner, self.actions = runner, []

    def run(self, action: str):
        self.actions.append(action)
        return self.runner.run(action)

    async def arun(self, action: str):
        return self.run(action)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(timeout_s=15) as pool:
        yield pool


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_thyme_matches_its_eval_loop(case, pool):
    agent = get_agent("thyme")
    config = agent.episode_config(EpisodeConfig())
    task = fc.task_of(case)
    policy = ScriptedPolicy(case["replies"])
    episode = agent.start(task, config)
    images = agent.images_of(task, config)
    runner = Recording(agent.runner(images, sandbox=lambda imgs: pool.sandbox(images=imgs)))
    drive_episode(episode, policy, runner)
    theirs = case["thyme"]
    ours = [
        {
            "messages": fc.joined(fc.normal([message_json(m) for m in seen])),
            "continue": seen[-1].continued,
        }
        for seen in policy.seen
    ]
    assert ours == [
        {"messages": fc.joined(r["messages"]), "continue": r["continue"]}
        for r in theirs["requests"]
    ]
    size = (images[0].width, images[0].height)
    codes = [a.removeprefix(NEW_ATTEMPT) for a in runner.actions]
    assert [prepare(c, size) for c in codes if not is_refused(c)] == theirs["executed"]
    assert episode.answer == theirs["answer"] and theirs["status"] == "success"


def test_the_thyme_fixture_covers_its_branches():
    requests = [r for c in CASES for r in c["thyme"]["requests"]]
    shown = {
        p["image"] for r in requests for m in r["messages"][2:] for p in m["parts"] if "image" in p
    }
    assert len(shown) >= 8  # tool outputs compared pixel for pixel
    assert any(r["continue"] and r["messages"][-1]["role"] == "user" for r in requests)
    assert max(len(c["thyme"]["requests"]) for c in CASES) == 6  # an attempt's 5 calls, then more
    assert any(
        c["thyme"]["requests"][-1]["messages"][0]["parts"][0]["text"]
        == "You are a helpful assistant."
        for c in CASES
    )


def test_rules_read_from_its_code():
    assert clamp_box(100, 100, 110, 108, 448, 336) == [100.0, 100.0, 164.0, 164.0]
    assert clamp_box(10, 10, 5, 5, 40, 30) == [0.0, 0.0, 40.0, 30.0]  # smaller than 64: all
    assert is_refused("import os\nos.remove('x')") and not is_refused("os.path.exists('x')")
    assert final_answer("<answer>\\boxed{\\frac{1}{2}}</answer>") == "\\frac{1}{2}"
    task = fc.task_of({**CASES[0], "options": []})
    assert question_of(task).endswith("short words or phrases if possible.")
