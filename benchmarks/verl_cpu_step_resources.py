"""Wall time and peak memory of the CPU verl GRPO step.

The command: ``codedance verl train --preset cpu-smoke``.

    .venv/bin/python benchmarks/verl_cpu_step_resources.py [OUT_DIR] [steps=N]

Runs the command and samples its whole process tree (the launcher, verl's driver, Ray's raylet
and GCS, every Ray worker) twice a second: the peak of the summed PSS (shared pages counted
once, split between the processes that map them) and of the summed RSS (an upper bound). Prints
the wall time, verl's own ``timing_s/step`` from ``metrics.jsonl``, and the peaks. A measurement,
not a speed goal: there is no baseline to compare with. Sampling misses spikes shorter than 0.5 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def tree_memory(root: psutil.Process) -> tuple[int, int]:
    pss = rss = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        pss += getattr(info, "pss", info.rss)
        rss += info.rss
    return pss, rss


def main(argv: list[str]) -> int:
    out = (
        Path(argv[0]) if argv and "=" not in argv[0] else Path(tempfile.mkdtemp(prefix="verl-cpu-"))
    )
    extra = [a for a in argv if "=" in a]
    cmd = [
        sys.executable,
        "-c",
        "from codedance.cli import main; main()",
        "verl",
        "train",
        "--preset",
        "cpu-smoke",
        f"out_dir={out}",
        *extra,
    ]
    started = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = psutil.Process(process.pid)
    peak_pss = peak_rss = 0
    while process.poll() is None:
        pss, rss = tree_memory(root)
        peak_pss, peak_rss = max(peak_pss, pss), max(peak_rss, rss)
        time.sleep(0.5)
    wall = time.perf_counter() - started
    steps = (
        [
            json.loads(line)["data"].get("timing_s/step")
            for line in (out / "metrics.jsonl").read_text().splitlines()
        ]
        if (out / "metrics.jsonl").exists()
        else []
    )
    print(
        f"exit {process.returncode}; wall {wall:.1f} s; verl timing_s/step {steps}; "
        f"peak PSS {peak_pss / 2**30:.2f} GiB; peak RSS {peak_rss / 2**30:.2f} GiB; out {out}"
    )
    return process.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
