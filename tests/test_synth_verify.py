"""Verification of teacher trajectories: each check can reject, through the real sandbox."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from codedance.policy.scripted import ScriptedPolicy
from codedance.rollout import Episode, EpisodeConfig, arun_episode
from codedance.sandbox import SandboxPool
from codedance.synth.boxes import Box, box_problem, instrument, parse_boxes, prelude
from codedance.synth.verify import averify
from codedance.teacher import ExpertTeacher, TeacherConfig
from codedance.types import Task, Trajectory
from codedance.world import generate

pytestmark = pytest.mark.tier("integration")

CONFIG = EpisodeConfig(max_turns=6)


def _code(body: str) -> str:
    return (
        "<think>look</think>\n<code>\n```python\nimport numpy as np\n"
        f"a = np.asarray(input_image)\n{body}\n```\n</code>"
    )


async def _episode(pool: SandboxPool, task: Task, policy) -> Trajectory:  # type: ignore[no-untyped-def]
    sandbox = await pool.asandbox(images=Episode(task, CONFIG).images)
    try:
        return await arun_episode(policy, task, sandbox, CONFIG)
    finally:
        sandbox.close()


def test_teacher_trajectory_passes_and_each_tampering_is_rejected() -> None:
    task = generate("search", "hard", 14)  # locates the tag, crops it, reads it
    w, h = Episode(task, CONFIG).images[0].size
    answer = f"<think>read</think>\n<answer>{task.answer}</answer>"

    async def main() -> dict[str, object]:
        async with SandboxPool(max_running=2) as pool:
            good = await _episode(pool, task, ExpertTeacher(TeacherConfig(0.0)).policy(task))
            code_turn = next(i for i, t in enumerate(good.turns) if t.result is not None)
            turns = list(good.turns)
            shown = turns[code_turn].result
            turns[code_turn] = replace(
                turns[code_turn], result=replace(shown, stdout=shown.stdout + "9\n")
            )
            lied = replace(good, turns=tuple(turns))
            wrong = replace(good, answer="ZZZZ")
            outside = await _episode(
                pool, task, ScriptedPolicy([_code("print(a[-4:30, 0:20].shape)"), answer])
            )
            past = await _episode(
                pool,
                task,
                ScriptedPolicy(
                    [_code(f"print(input_image.crop((10, 10, {w + 5}, 40)).size)"), answer]
                ),
            )
            thin = await _episode(
                pool, task, ScriptedPolicy([_code("print(a[5:6, 0:40].mean())"), answer])
            )
            looping = await _episode(pool, task, ScriptedPolicy([_code("print(1)")] * 6))
            return {
                name: await averify(task, t, pool, CONFIG)
                for name, t in [
                    ("good", good),
                    ("lied", lied),
                    ("wrong", wrong),
                    ("outside", outside),
                    ("past", past),
                    ("thin", thin),
                    ("looping", looping),
                ]
            }

    v = asyncio.run(main())
    assert v["good"].accepted and v["good"].crops >= 1, v["good"]
    assert v["lied"].reason == "output_mismatch" and "stdout" in v["lied"].detail
    assert v["wrong"].reason == "wrong_answer"
    assert (
        v["outside"].reason == "box_outside"
        and f"(0, -4, 20, 30) in a {w}x{h}" in v["outside"].detail
    )
    assert v["past"].reason == "box_outside" and f"(10, 10, {w + 5}, 40)" in v["past"].detail
    assert v["thin"].reason == "box_degenerate" and "(0, 5, 40, 6)" in v["thin"].detail
    assert v["looping"].reason == "not_answered" and "max_turns" in v["looping"].detail


def test_instrumented_code_computes_the_same_and_records_only_image_sized_crops() -> None:
    task = generate("charts", "medium", 1)
    size = Episode(task, CONFIG).images[0].size
    code = (
        "import numpy as np\nimg = np.asarray(input_image.convert('RGB'))\nsmall = img[::2, ::2]\n"
        "print(img[3:50, 7:90].sum(), small[1:4, 2:5].sum(), img[2:9, 4:8, 0].sum(), "
        "img[:, 5:].shape)\n"
        "class K:\n    __x = 1\n    def f(self):\n        return img[0:2, 0:3].shape\n"
        "print(K().f())\n"
    )

    async def main() -> tuple[str, str, str]:
        async with SandboxPool(max_running=1) as pool:
            images = Episode(task, CONFIG).images
            plain = await pool.asandbox(images=images)
            traced = await pool.asandbox(images=images)
            try:
                original = (await plain.arun(code)).stdout
                assert (await traced.arun(prelude((size,)))).ok
                result = await traced.arun(instrument(code))
                return original, result.stdout, result.stderr
            finally:
                plain.close()
                traced.close()

    original, stdout, stderr = asyncio.run(main())
    assert stdout == original and original
    w, h = size
    assert sorted(parse_boxes(stderr), key=lambda b: (b.x0, b.y0)) == [
        Box(0, 0, 3, 2, w, h),
        Box(4, 2, 8, 9, w, h),
        Box(5, 0, w, h, w, h),
        Box(7, 3, 90, 50, w, h),
    ]


def test_box_rules() -> None:
    assert box_problem(Box(0, 0, 10, 10, 10, 10)) is None
    assert box_problem(Box(0, 0, 11, 10, 10, 10))[0] == "box_outside"
    assert box_problem(Box(3, 3, 3, 8, 10, 10))[0] == "box_degenerate"
    assert box_problem(Box(6, 3, 4, 8, 10, 10))[0] == "box_degenerate"
    assert instrument("def broken(:") == "def broken(:"
