"""Batch runs: concurrency, JSONL output with images by hash, resume, failures isolated."""

from __future__ import annotations

import json

import pytest
from PIL import Image as PILImage

from codedance.policy import OpenAIChatPolicy, RetrySettings
from codedance.policy.replay_server import ReplayServer
from codedance.records import append_jsonl, load_trajectories, read_jsonl
from codedance.runs.batch import arun_batch, finished_keys
from codedance.sandbox import Sandbox
from codedance.types import Image, StopReason, Task

pytestmark = pytest.mark.tier("integration")

PICTURE = Image.from_pil(PILImage.new("RGB", (64, 64), "green"), origin="input:0")


def reply(body: dict) -> str:
    if not any(m["role"] == "assistant" for m in body["messages"]):
        return (
            "<think>look</think><code>\n```python\ninput_image.crop((0, 0, 32, 32)).show()\n"
            "print('ok')\n```\n</code>"
        )
    return "<think>seen</think><answer>green</answer>"


def make_runner(images: tuple[Image, ...]) -> Sandbox:
    return Sandbox(images=images, timeout_s=10)


async def test_batch_writes_resumes_and_isolates_failures(tmp_path) -> None:  # type: ignore[no-untyped-def]
    broken = Task(
        id="broken",
        question="q",
        images=(Image(png=b"\x89PNG\r\n\x1a\n" + b"\0" * 20, width=1, height=1),),
        answer="",
    )
    tasks = [
        Task(id=f"t{i}", question="colour?", images=(PICTURE,), answer="green") for i in range(3)
    ] + [broken]
    with ReplayServer(reply) as server:
        policy = OpenAIChatPolicy(
            server.url, "scripted", retry=RetrySettings(max_retries=1, backoff_s=0.0)
        )
        first = await arun_batch(
            policy, tasks, make_runner, tmp_path, rollouts=2, concurrency=3, progress=False
        )
        requests_after_first = len(server.requests)
        again = await arun_batch(
            policy, tasks, make_runner, tmp_path, rollouts=2, concurrency=3, progress=False
        )
        await policy.aclose()
    assert (first.finished, first.skipped, len(first.failures)) == (6, 0, 2)
    assert all(
        key.startswith("broken#") and "cannot be decoded" in error for key, error in first.failures
    )
    assert (again.finished, again.skipped, len(again.failures)) == (0, 6, 2)
    assert len(server.requests) == requests_after_first  # nothing finished was redone
    assert finished_keys(tmp_path) == {f"t{i}#{k}" for i in range(3) for k in range(2)}
    assert len(read_jsonl(tmp_path / "failures.jsonl")) == 4

    loaded = load_trajectories(tmp_path)
    assert len(loaded) == 6
    _, trajectory = loaded[0]
    assert trajectory.stop_reason is StopReason.ANSWERED and trajectory.answer == "green"
    assert len(trajectory.turns[0].feedback_images) == 1
    # Every image (input + one crop per trajectory, identical across rollouts) is stored once.
    assert len(list((tmp_path / "images").glob("*.png"))) == 2
    line = (tmp_path / "trajectories.jsonl").read_text().splitlines()[0]
    assert "base64" not in line and json.loads(line)["schema"] == 1


async def test_saved_trajectory_loads_back_equal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    saved = []
    with ReplayServer(reply) as server:
        policy = OpenAIChatPolicy(server.url, "scripted")
        task = Task(id="one", question="colour?", images=(PICTURE,), answer="green")
        await arun_batch(
            policy,
            [task],
            make_runner,
            tmp_path,
            progress=False,
            on_trajectory=lambda k, t: saved.append(t),
        )
        await policy.aclose()
    assert load_trajectories(tmp_path)[0][1] == saved[0]


def test_a_torn_last_line_is_skipped_and_does_not_swallow_the_next(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x.jsonl"
    append_jsonl(path, {"key": "a"})
    with open(path, "a") as f:
        f.write('{"key": "tor')
    append_jsonl(path, {"key": "b"})
    assert [r["key"] for r in read_jsonl(path)] == ["a", "b"]
