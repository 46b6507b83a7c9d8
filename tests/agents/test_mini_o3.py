"""The ``mini-o3`` profile against Mini-o3's own tool and observation code
(``fixtures/mini_o3.jsonl``, recorded by ``scripts/record_agent_fixtures.py`` at the pinned commit).
Agreement per case: the input image pixel for pixel, the same number of model calls, and after each
call the same observation: the text its rollout appends (the closed assistant turn, the user turn,
the opened assistant turn, rendered here as Qwen's chat template renders the messages) and each
shown crop pixel for pixel."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from codedance.agents import get_agent
from codedance.agents.mini_o3 import crop_box, fit, read_call
from codedance.policy import ScriptedPolicy
from codedance.policy.wire import message_json
from codedance.rollout import EpisodeConfig, drive_episode
from codedance.types import Image, StopReason

pytestmark = pytest.mark.tier("unit")

_spec = importlib.util.spec_from_file_location(
    "fixture_cases", Path(__file__).parent / "fixture_cases.py"
)
fc = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(fc)  # type: ignore[union-attr]

CASES = fc.cases("mini_o3")
VISION = "<|vision_start|><|image_pad|><|vision_end|>"


def rendered(parts: list) -> tuple[str, list[str]]:
    """A user turn after a call as the rollout's token text: the assistant turn closed, the user
    turn, the next assistant turn opened; and its images' pixel keys."""
    text = "".join(VISION if isinstance(p, Image) else p for p in parts)
    keys = [fc.pixel_key(p.png) for p in parts if isinstance(p, Image)]
    return f"<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", keys


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_mini_o3_matches_its_tool_code(case):
    agent = get_agent("mini-o3")
    config = agent.episode_config(EpisodeConfig())
    task = fc.task_of(case)
    policy = ScriptedPolicy(case["replies"])
    episode = agent.start(task, config)
    drive_episode(episode, policy, agent.runner(agent.images_of(task, config)))
    theirs = case["mini-o3"]
    assert len(policy.seen) == theirs["calls"]
    first = fc.normal([message_json(m) for m in policy.seen[0]])[1]["parts"][0]
    assert first == {"image": theirs["input"]}
    for seen, turn in zip(policy.seen[1:], theirs["turns"], strict=True):
        assert seen[-2].role == "assistant" and seen[-1].role == "user"
        text, keys = rendered(list(seen[-1].parts))
        assert (text, keys) == (turn["message"], turn["images"])
    expected = StopReason.MAX_TURNS if theirs["end"] == "exceed" else None
    assert expected is None or episode.stop_reason is expected


def test_the_mini_o3_fixture_covers_its_branches():
    turns = [t for c in CASES for t in c["mini-o3"]["turns"]]
    assert len({k for t in turns for k in t["images"]}) >= 10  # crops compared pixel for pixel
    assert sum("ERROR occurs during grounding" in t["message"] for t in turns) >= 6
    assert {c["mini-o3"]["end"] for c in CASES} == {"answer", "exceed"}


def test_its_tool_rules():
    from PIL import Image as PILImage

    scene = PILImage.new("RGB", (448, 336))
    assert crop_box([0.8, 0.8, 1.2, 1.2], "original_image", [scene])[1] == [358, 268, 447, 335]
    with pytest.raises(ValueError, match="not valid in width"):
        crop_box([0.5, 0.1, 0.5, 0.4], "original_image", [scene])
    with pytest.raises(SyntaxError, match="never closed"):
        read_call('<grounding>{"bbox_2d": [0.1, "source": "original_image"}</grounding>')
    assert read_call(
        '<grounding>{"bbox_2d": [0, 0, 1, 1], "source": "observation_2"}</grounding>'
    ) == ([0, 0, 1, 1], "observation_2")
    assert fit(PILImage.new("RGB", (20, 12))).size == (258, 154)  # 40,000 pixels at least
