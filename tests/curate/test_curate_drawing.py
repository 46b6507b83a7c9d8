"""Open-ended visual operations (recipe ``draw``): strict parsing, rule checks, and trajectories
whose every measurement is the real sandbox's output; then the recipe through the pipeline over
real HTTP (replay servers playing the models' choices)."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from codedance.curate import parse_config, run_curate
from codedance.curate.config import AtomicConfig
from codedance.curate.drawing import Op, OpsUnparseable, draw_trajectory, op_problems, parse_ops
from codedance.curate.verification import structural_problem
from codedance.policy.base import Completion
from codedance.policy.replay_server import ReplayServer
from codedance.rollout import Episode, EpisodeConfig
from codedance.sandbox import SandboxPool
from codedance.types import Message, StopReason
from codedance.world import generate

pytestmark = pytest.mark.tier("integration")

QUESTION = "How long is the red line between the two tags, and what does the left tag say?"


def _ops(*entries: dict) -> str:
    return "```json\n" + json.dumps(list(entries)) + "\n```"


def test_ops_parse_strictly_and_implausible_ones_are_dropped_with_a_reason() -> None:
    reply = _ops(
        {"op": "point", "label": "left tag", "point_2d": [10, 20]},
        {"op": "line", "label": "red line", "line_2d": [10, 20, 110, 20]},
        {"op": "zoom", "label": "left tag", "bbox_2d": [0, 0, 40, 40], "factor": 3},
    )
    ops = parse_ops(reply)
    assert [o.op for o in ops] == ["point", "line", "zoom"] and ops[1].at == (10, 20, 110, 20)
    assert ops[2].factor == 3.0 and ops[2].as_dict()["bbox_2d"] == [0, 0, 40, 40]
    for bad in (
        "a line from the tag to the edge",
        _ops({"op": "circle", "label": "tag", "bbox_2d": [0, 0, 9, 9]}),
        _ops({"op": "line", "label": "red line", "line_2d": [1, 2, 3]}),
        _ops({"op": "zoom", "label": "tag", "bbox_2d": [0, 0, 40, 40], "factor": "big"}),
    ):
        with pytest.raises(OpsUnparseable):
            parse_ops(bad)
    rules = AtomicConfig(min_box_side=8, max_box_area=0.9)
    size = (400, 300)
    cases = [
        Op("point", "left tag", (401, 10)),
        Op("line", "red line", (10, 10, 14, 12)),
        Op("mask", "left tag", (0, 0, 400, 300)),
        Op("zoom", "left tag", (0, 0, 40, 40), 9.0),
        Op("box", "sky", (0, 0, 40, 40)),
        Op("box", "left tag", (0, 0, 40, 40)),
        Op("box", "left tag", (0, 0, 40, 40)),
        Op("zoom", "left tag", (0, 0, 40, 40), 2.0),
    ]
    assert op_problems(cases, size, QUESTION, rules) == [
        "outside",
        "degenerate",
        "whole_image",
        "bad_zoom",
        "label_mismatch",
        None,
        "duplicate",
        None,
    ]


class _Strong:
    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.seen: list[tuple[Message, ...]] = []

    async def ask(
        self, messages: tuple[Message, ...], temperature: float | None = None
    ) -> Completion:
        self.seen.append(messages)
        return Completion(self.reply)


def test_draw_trajectories_run_every_operation_in_the_sandbox() -> None:
    task = generate("search", "medium", 0)
    episode = EpisodeConfig(max_turns=8)
    ops = [
        Op("point", "left tag", (100, 100)),
        Op("line", "red line", (100, 100, 400, 500)),
        Op("mask", "left tag", (50, 50, 250, 250)),
        Op("zoom", "left tag", (50, 50, 250, 250), 3.0),
    ]
    answer = f"<think>Measured.</think>\n<answer>{task.answer}</answer>"

    async def main():
        async with SandboxPool(max_running=2) as pool:

            async def run(difficulty: str, strong: _Strong):
                sandbox = await pool.asandbox(images=Episode(task, episode).images)
                try:
                    return await draw_trajectory(
                        task, ops, difficulty, strong, sandbox, episode, AtomicConfig(max_boxes=4)
                    )
                finally:
                    sandbox.close()

            hard_strong = _Strong(answer)
            return await run("medium", _Strong(answer)), await run("hard", hard_strong), hard_strong

    medium, hard, hard_strong = asyncio.run(main())
    length = round(math.dist((100, 100), (400, 500)), 1)
    assert len(medium.turns) == 2 and medium.turns[0].result.status.value == "ok"
    out = medium.turns[0].result.stdout
    assert f"red line length: {length} px" in out and "left tag at (100, 100)" in out
    assert "left tag zoomed 3.0x: (600, 600)" in out and len(medium.turns[0].result.images) == 2
    assert len(hard.turns) == 5 and hard.stop_reason is StopReason.ANSWERED
    outputs = [t.result.stdout for t in hard.turns[:4]]
    assert outputs[1] == f"red line length: {length} px\n"
    width, height = Episode(task, episode).images[0].size
    assert outputs[2] == f"left tag kept: {round(200 * 200 / (width * height), 3)} of the image\n"
    assert [len(t.result.images) for t in hard.turns[:4]] == [1, 1, 1, 1]
    assert hard.turns[3].result.images[0].size == (600, 600)
    assert structural_problem(hard) is None and structural_problem(medium) is None
    assert sum(m.role == "assistant" for m in hard_strong.seen[0]) == 4  # the answer saw every turn


def test_draw_recipe_through_the_pipeline(tmp_path: Path) -> None:
    task = generate("search", "hard", 3)
    size = Episode(task, EpisodeConfig()).images[0].size
    proposal = _ops(
        {"op": "box", "label": "tag", "bbox_2d": [20, 20, 220, 180]},
        {"op": "line", "label": "tag", "line_2d": [0, 0, size[0] + 10, 5]},
        {"op": "zoom", "label": "tag", "bbox_2d": [20, 20, 220, 180], "factor": 2},
    )

    def weak(body: dict) -> str:
        return "<think>t</think><answer>nothing</answer>"

    def strong(body: dict) -> str:
        first = body["messages"][0]["content"]
        text = "".join(p.get("text", "") for p in first) if isinstance(first, list) else first
        if "Choose the visual operations" in text:
            return proposal
        if any(m["role"] == "assistant" for m in body["messages"]):
            return f"<think>The zoom shows it.</think>\n<answer>{task.answer}</answer>"
        return "<think>t</think><answer>nothing</answer>"

    with ReplayServer(weak, ("weak",)) as w, ReplayServer(strong, ("strong",)) as s:
        raw = {
            "out": str(tmp_path / "run"),
            "sandboxes": 1,
            "sources": [
                {
                    "kind": "world",
                    "skills": ["search"],
                    "difficulties": ["hard"],
                    "n": 1,
                    "seed": 3,
                    "recipe": "draw",
                }
            ],
            "filter": {"k": 2, "judge": "never"},
            "verify": {"judge": False},
            "endpoints": {
                "weak": {"url": w.url, "model": "weak"},
                "strong": {"url": s.url, "model": "strong"},
            },
        }
        result = run_curate(parse_config(raw), stream=None)
    atomic = json.loads((tmp_path / "run" / "atomic.jsonl").read_text().splitlines()[0])
    assert atomic["kind"] == "draw" and [o["problem"] for o in atomic["ops"]] == ["", "outside", ""]
    turns = atomic["trajectory"]["turns"]
    assert len(turns) == 3 and "zoomed 2.0x: (400, 320)" in turns[1]["result"]["stdout"]
    assert result.accepted == 1
