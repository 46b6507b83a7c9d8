"""What moving a process between two cgroup v1 memory groups costs, back to back and spaced out.

    sudo .venv/bin/python benchmarks/cgroup_move_cost.py

Why it exists: it shows why a trajectory's holder gets no memory group of its own, entered and
left around every step (paced steps took 6 ms instead of 4 that way). A move takes the cgroups'
thread-group lock for writing, which waits for an RCU grace period unless another move has just
done so: back to back a move is microseconds, spaced out (as steps between model turns are) it
is milliseconds. Prints the median and 90th percentile for each spacing. Needs root and cgroup
v1's memory hierarchy; it moves only a ``sleep`` it starts, between two groups it makes under
this process's own memory group, and removes them.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
import uuid

SPACINGS_S = (0.0, 0.005, 0.025)
MOVES = 60


def own_memory_group() -> str:
    with open("/proc/self/cgroup") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "memory" in controllers.split(","):
                return os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"))
    raise SystemExit("no cgroup v1 memory hierarchy here")


def write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def main() -> None:
    base = os.path.join(own_memory_group(), f"codedance-move-cost-{uuid.uuid4().hex[:8]}")
    groups = (base, os.path.join(base, "other"))
    os.mkdir(groups[0])
    os.mkdir(groups[1])
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        for spacing in SPACINGS_S:
            times = []
            for move in range(MOVES):
                time.sleep(spacing)
                started = time.perf_counter()
                write(os.path.join(groups[move % 2], "cgroup.procs"), str(sleeper.pid))
                times.append((time.perf_counter() - started) * 1000)
            times.sort()
            print(
                f"{spacing * 1000:4.0f} ms apart: median {statistics.median(times):.3f} ms, "
                f"90th percentile {times[int(0.9 * len(times))]:.3f} ms"
            )
    finally:
        sleeper.kill()
        sleeper.wait()
        os.rmdir(groups[1])
        os.rmdir(groups[0])


if __name__ == "__main__":
    main()
