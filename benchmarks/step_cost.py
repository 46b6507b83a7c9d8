"""What one back-to-back trivial step costs the machine: page faults, and CPU in the jail and in
the controller.

    sudo unshare --pid --fork --mount-proc .venv/bin/python benchmarks/step_cost.py [CODE]

Why it exists: on two cores a back-to-back step is bounded by CPU, not by waiting, and most of
the jail's share is copy-on-write faults. Each step process is a fork of a process holding the
~50 MB the preloaded libraries leave, and every page Python writes first (a reference count
is enough) is copied. CPython's after-fork work cost ~230 of them per step; steps
are forked without it (`runtime._fork_continuation`). Wall time is too noisy on a shared machine to
show a change of that size; these counts are not.

Prints the p50 step latency, the jail's CPU per step (a cgroup v1 cpuacct group over the
service's processes, as `sandbox_bench.CpuMeter`), the controller's CPU per step, and the faults
per step that the trajectory's memory group counts (``memory.stat`` ``pgfault``). Needs root and
cgroup v1.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from benchmarks.sandbox_bench import CpuMeter
from codedance.sandbox import Sandbox, SandboxService

WARM_UP, STEPS = 30, 400


def faults(memory_dir: str) -> int:
    with open(os.path.join(memory_dir, "memory.stat")) as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("pgfault "))


def main() -> None:
    code = sys.argv[1] if len(sys.argv) > 1 else "x = 1"
    service = SandboxService()
    meter = CpuMeter("step-cost")
    meter.add(service._process.pid)
    sandbox = Sandbox([], service=service)
    try:
        memory_dir = next(d for d in sandbox._cgroup.directories() if "/memory/" in d)
        for _ in range(WARM_UP):
            sandbox.run(code)
        faults_before, jail_before, controller_before = (
            faults(memory_dir),
            meter.seconds(),
            time.process_time(),
        )
        latencies = []
        for _ in range(STEPS):
            started = time.perf_counter()
            sandbox.run(code)
            latencies.append(time.perf_counter() - started)
        jail = (meter.seconds() - jail_before) / STEPS * 1000
        controller = (time.process_time() - controller_before) / STEPS * 1000
        print(
            f"p50 {statistics.median(latencies) * 1000:.2f} ms, jail CPU {jail:.2f} ms/step, "
            f"controller CPU {controller:.2f} ms/step, "
            f"{(faults(memory_dir) - faults_before) / STEPS:.0f} faults/step"
        )
    finally:
        sandbox.close()
        service.close()
        meter.close()


if __name__ == "__main__":
    main()
