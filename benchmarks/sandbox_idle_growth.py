"""What an honest idle trajectory shows as growth to the OOM arbiter (`Sandbox.memory_growth`).

    unshare --pid --fork --mount-proc \\
        .venv/bin/python benchmarks/sandbox_idle_growth.py [--rounds N]

The arbiter's floor for idle trajectories (``arbiter.IDLE_FLOOR_BYTES``) must sit above this.
Needs root and cgroup v1 or v2 memory groups. For several fresh trajectories it runs a sequence
of honest steps (numpy, PIL, matplotlib, the input image, 30 MiB of output; a step that fails,
one that times out, one over its own memory limit; a step keeping 100 MiB of state, one that
frees it, one keeping a million small objects) and reads the trajectory's growth since its last
committed answer right after creation (its first spare just forked) and at several moments after
each `run` returns (the step's new spare being forked, the old holder exiting, the idle freezer
stopping it). Prints every reading above 1 MiB and the largest (in MiB) per step and moment.
Measured on cgroup v1, 2 cores, 7 rounds: at most 2.6 MiB, a fresh spare's pages.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from PIL import Image

from codedance.sandbox import Limits, Sandbox, SandboxService

MOMENTS_S = (0.0, 0.005, 0.05, 0.3, 1.0)  # after `run` returns (the idle freezer acts at 20 ms)
STEPS = {
    "print": "print('hello')",
    "numpy": (
        "import numpy as np\na = np.random.rand(2000, 2000)\nb = a @ a.T\nprint(float(b.trace()))"
    ),
    "numpy big temp": (
        "import numpy as np\nt = np.ones(200 << 20, np.uint8)\ns = int(t.sum())\ndel t\nprint(s)"
    ),
    "PIL": (
        "from PIL import Image, ImageDraw, ImageFilter\n"
        "im = Image.new('RGB', (2048, 2048), 'white')\n"
        "d = ImageDraw.Draw(im)\n"
        "for i in range(200): d.line((0, i * 10, 2047, 2047 - i * 10), fill='red')\n"
        "im = im.filter(ImageFilter.GaussianBlur(3)).resize((1024, 1024)).rotate(30)\n"
        "im.crop((100, 100, 700, 700)).save('crop.png')\nprint(im.size)"
    ),
    "matplotlib": (
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt, numpy as np\n"
        "fig, ax = plt.subplots(figsize=(8, 6))\nax.plot(np.sin(np.linspace(0, 20, 10000)))\n"
        "ax.imshow(np.random.rand(512, 512))\nfig.savefig('plot.png', dpi=150)\nplt.close(fig)\n"
        "print('saved')"
    ),
    "error": "import numpy as np\nx = np.ones(50 << 20, np.uint8)\nraise ValueError('on purpose')",
    "keep 100 MiB": "import numpy as np\nkept = np.ones(100 << 20, np.uint8)\nprint(kept.size)",
    "free state": "del kept\nimport gc\ngc.collect()\nprint('freed')",
    "PIL again": "im2 = im.transpose(0).convert('L')\nim2.save('gray.png')\nprint(im2.size)",
    "1M objects": "objects = {i: str(i) for i in range(1_000_000)}\nprint(len(objects))",
    "after objects": "print(sum(len(v) for v in objects.values()))",
    "input image": "print(input_image.size, len(images))\ninput_image.rotate(90).save('r.png')",
    "big stdout": "print('y' * (30 << 20))",
    "timeout": "import numpy as np\nx = np.ones(50 << 20, np.uint8)\nimport time\ntime.sleep(60)",
    "own limit": "import numpy as np\nx = np.ones(600 << 20, np.uint8)",
}
FAILING = ("error", "timeout", "own limit")


def readings(sandbox: Sandbox) -> list[int]:
    """Growth (bytes) at each of MOMENTS_S, counted from now."""
    start, found = time.monotonic(), []
    for moment in MOMENTS_S:
        time.sleep(max(0.0, start + moment - time.monotonic()))
        found.append(sandbox.memory_growth() or 0)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=4, help="fresh trajectories, each running every step"
    )
    args = parser.parse_args()
    service = SandboxService(memory_total=4 << 30)
    if service.cgroup_layout is None:
        sys.exit("needs memory cgroups (run as root)")
    worst: dict[str, list[int]] = {}
    try:
        for round_ in range(args.rounds):
            image = Image.radial_gradient("L").resize((1024, 768)).convert("RGB")
            with Sandbox(
                [image], service=service, limits=Limits(memory=512 << 20), timeout_s=60
            ) as sandbox:
                seen = {"created": readings(sandbox)}
                for name, code in STEPS.items():
                    result = sandbox.run(code, timeout_s=2 if name == "timeout" else None)
                    assert result.ok != (name in FAILING), (name, result)
                    seen[name] = readings(sandbox)
            for name, values in seen.items():
                worst[name] = [
                    max(a, b) for a, b in zip(worst.get(name, values), values, strict=True)
                ]
                for moment, value in zip(MOMENTS_S, values, strict=True):
                    if value > 1 << 20:
                        print(
                            f"round {round_} {name:>15} +{moment * 1000:4.0f} ms: "
                            f"{value / (1 << 20):6.2f} MiB"
                        )
    finally:
        service.close()
    print("\nlargest growth (MiB) at", ", ".join(f"+{m * 1000:g} ms" for m in MOMENTS_S))
    for name, values in worst.items():
        print(f"{name:>15}: " + "  ".join(f"{v / (1 << 20):6.2f}" for v in values))
    print(f"overall largest: {max(max(v) for v in worst.values()) / (1 << 20):.2f} MiB")


if __name__ == "__main__":
    main()
