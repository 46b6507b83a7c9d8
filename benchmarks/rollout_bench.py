"""The loop's own overhead per turn, at 1, 64 and 256 concurrent trajectories.

    .venv/bin/python benchmarks/rollout_bench.py [--turns 6] [--episodes-per-level 256]

A zero-latency `ReplayServer` runs in a separate process (so its CPU time is not counted here)
and scripts code for ``turns - 1`` turns, then an answer. The runner returns a fixed
`ExecResult` at once, so the snippet's run time is zero by construction: what is measured is
parsing, feedback rendering, message building, JSON encoding and the HTTP client. Overhead per
turn = wall time of all episodes / turns completed (the server's time excluded by its own
process, but its HTTP latency counted). Goal: at most 5 ms per turn at 256.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time

from PIL import Image as PILImage

from codedance.policy import OpenAIChatPolicy
from codedance.policy.replay_server import ReplayServer
from codedance.rollout import EpisodeConfig, arun_episode
from codedance.types import ExecResult, ExecStatus, Image, Task

CODE = "<think>crop it</think>\n<code>\n```python\nprint(input_image.size)\n```\n</code>"
ANSWER = "<think>done</think>\n<answer>7</answer>"


def _reply(body: dict, turns: int) -> str:
    done = sum(1 for m in body["messages"] if m["role"] == "assistant")
    return ANSWER if done + 1 >= turns else CODE


def _serve(turns: int, queue: multiprocessing.Queue, stop: multiprocessing.Event) -> None:
    with ReplayServer(lambda body: _reply(body, turns)) as server:
        queue.put(server.url)
        stop.wait()


class InstantRunner:
    result = ExecResult(status=ExecStatus.OK, stdout="(308, 196)\n")

    def run(self, code: str) -> ExecResult:
        return self.result

    async def arun(self, code: str) -> ExecResult:
        return self.result


async def _level(
    url: str, concurrency: int, episodes: int, config: EpisodeConfig
) -> tuple[float, int]:
    policy = OpenAIChatPolicy(url, "scripted")
    image = Image.from_pil(PILImage.new("RGB", (300, 200), "white"), origin="input:0")
    tasks = [
        Task(id=str(i), question="How many?", images=(image,), answer="7") for i in range(episodes)
    ]
    semaphore = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> int:
        async with semaphore:
            return len((await arun_episode(policy, task, InstantRunner(), config)).turns)

    start = time.perf_counter()
    turns = sum(await asyncio.gather(*(one(t) for t in tasks)))
    elapsed = time.perf_counter() - start
    await policy.aclose()
    return elapsed, turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--episodes-per-level", type=int, default=256)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 64, 256])
    args = parser.parse_args()
    queue: multiprocessing.Queue = multiprocessing.Queue()
    stop = multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(args.turns, queue, stop), daemon=True)
    server.start()
    url = queue.get(timeout=30)
    config = EpisodeConfig(max_turns=args.turns)
    try:
        for level in args.levels:
            episodes = max(
                level, min(args.episodes_per_level, 16 if level == 1 else args.episodes_per_level)
            )
            elapsed, turns = asyncio.run(_level(url, level, episodes, config))
            print(
                f"concurrency {level:4d}: {episodes} episodes, {turns} turns, "
                f"{1000 * elapsed / turns:.2f} ms per turn"
            )
    finally:
        stop.set()
        server.join(timeout=5)


if __name__ == "__main__":
    main()
