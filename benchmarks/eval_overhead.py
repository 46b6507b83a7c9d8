"""Harness overhead of ``codedance eval`` per sample, against a zero-latency model server.

    .venv/bin/python benchmarks/eval_overhead.py [--samples 512] [--concurrency 64]

A replay server in its own process answers every request at once (``<answer>3</answer>``), so
what is measured is our side: loading the TSV, decoding and resizing images, building requests,
HTTP, parsing, writing trajectories, scoring (``--scoring vlmevalkit``), the report and the
sample viewer. No-tools mode (one turn, no sandbox; the sandbox's own cost is
``benchmarks/sandbox_bench.py``'s). Printed:

- end-to-end samples/s of ``run_eval`` at the given concurrency;
- the per-sample part: the same ``run_eval`` again on the finished folder (it resumes: data
  loading, scoring lookups, the report, plots and viewer, no episodes) is subtracted, leaving the
  episodes' cost; our process's CPU seconds per sample there and the capacity that implies
  (1 / CPU per sample: samples/s our code sustains on one core when the model costs nothing);
  goal >= 200; the fixed part (report, plots, viewer) is printed beside; a warm-up run of 8
  samples first takes the one-off imports out of both;
- the share of the episodes' wall time spent in our process (CPU / wall) and in the server;
- the baseline measured in the same run: bare async httpx requests of the same body size to the
  same server at the same concurrency, and the ratio of the harness's rate to it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import csv
import dataclasses
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = """
import sys
from codedance.policy.replay_server import ReplayServer
server = ReplayServer(lambda body: "<think>count</think><answer>3</answer>")
print(server.url, flush=True)
sys.stdin.read()
"""


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tsv(path: Path, n: int) -> None:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (120, 40, 200)).save(buffer, format="PNG")
    image = base64.b64encode(buffer.getvalue()).decode()
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["index", "image", "question", "answer"])
        for i in range(n):
            writer.writerow([i, image, f"How many objects are there? ({i})", "3"])


async def _baseline(url: str, body: dict, n: int, concurrency: int) -> float:
    import httpx

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        gate = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with gate:
                (await client.post(f"{url}/chat/completions", json=body)).raise_for_status()

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()

    from codedance.eval.options import EvalConfig
    from codedance.eval.runner import run_eval
    from codedance.policy import OpenAIChatPolicy, RetrySettings
    from codedance.policy.server_config import ServerConfig

    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        url = server.stdout.readline().strip()  # type: ignore[union-attr]
        with tempfile.TemporaryDirectory() as tmp:
            _tsv(Path(tmp) / "CountBenchQA.tsv", args.samples)
            policy = OpenAIChatPolicy(url, "scripted", retry=RetrySettings(max_retries=0))
            config = EvalConfig(
                benchmarks="countbench",
                server=ServerConfig(url=url, model="scripted"),
                out=tmp,
                no_tools=True,
                concurrency=args.concurrency,
                lmu_data=tmp,
            )
            settings = config.run_settings(progress=False)
            warm_up = dataclasses.replace(config, limit=8).run_settings(progress=False)
            run_eval(policy, warm_up, Path(tmp) / "warm-up")  # imports, pools
            server_cpu0, cpu0, wall0 = (
                _cpu_seconds(server.pid),
                time.process_time(),
                time.perf_counter(),
            )
            report = run_eval(policy, settings, Path(tmp) / "run")
            wall = time.perf_counter() - wall0
            cpu, server_cpu = time.process_time() - cpu0, _cpu_seconds(server.pid) - server_cpu0
            cpu1, wall1 = time.process_time(), time.perf_counter()
            run_eval(policy, settings, Path(tmp) / "run")  # resumes: everything but the episodes
            fixed_wall, fixed_cpu = time.perf_counter() - wall1, time.process_time() - cpu1
            if report.failed:
                raise SystemExit(f"{report.failed} samples failed: {report.top_failure()}")
            from codedance.eval.loaders import load_benchmark
            from codedance.eval.runner import no_tools_config
            from codedance.rollout import Episode, EpisodeConfig

            task = load_benchmark(settings.benchmarks[0], lmu_dir=tmp, limit=1)[0]
            body = policy.request_body(Episode(task, no_tools_config(EpisodeConfig())).messages)
            baseline = asyncio.run(_baseline(url, body, args.samples, args.concurrency))
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(timeout=10)
    rate = args.samples / wall
    episode_cpu, episode_wall = cpu - fixed_cpu, wall - fixed_wall
    capacity = args.samples / episode_cpu
    print(
        f"samples: {args.samples}, concurrency {args.concurrency}, "
        "zero-latency replay server (own process)"
    )
    print(
        f"codedance eval end to end:      {rate:8.1f} samples/s ({wall:.2f} s, of which "
        f"{fixed_wall:.2f} s fixed: loading, report, plots, viewer; {fixed_cpu:.2f} s CPU)"
    )
    print(
        f"episodes: our CPU per sample    {1000 * episode_cpu / args.samples:8.2f} ms -> capacity "
        f"{capacity:.0f} samples/s on one core (goal >= 200: "
        f"{'met' if capacity >= 200 else 'NOT met'})"
    )
    print(
        f"episodes: share of wall time    {episode_cpu / episode_wall:8.0%} in our code, "
        f"{server_cpu / episode_wall:.0%} in the server"
    )
    print(
        f"baseline, bare httpx requests:  {baseline:8.1f} requests/s; episodes / baseline = "
        f"{args.samples / episode_wall / baseline:.2f}"
    )


if __name__ == "__main__":
    main()
