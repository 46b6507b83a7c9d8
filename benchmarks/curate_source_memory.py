"""Peak memory of ``codedance curate`` over a table source: streamed vs loaded whole, two sizes.

    .venv/bin/python benchmarks/curate_source_memory.py [--rows 200] [--scale 4] [--side 256]

Writes two parquet tables in a Hugging Face layout (``question``, ``answer``, ``image`` as the
``{bytes, path}`` struct, row groups of 100 rows): ``--rows`` and ``--rows`` x ``--scale`` rows,
each with one ``--side`` x ``--side`` PNG of noise (incompressible: bytes on disk are bytes in
memory), every question distinct. Then, each in a fresh process, measured by that process's peak
resident set size (``VmHWM``) minus its size after importing the modules:

- ``curate``: ``run_curate`` with ``stages: [filter]``, ``k: 1``, against a zero-latency replay
  server in its own process (so its memory is not ours): the streamed pipeline end to end
  (source, dedup, messages, endpoints, records, export, report);
- ``load`` (the baseline, in the same run): `codedance.curate.sources.load_items`, every item of
  the same table in memory at once (what the pipeline did before it streamed), nothing sent.

Printed per size: both working peaks and their ratio; then how each grew from the small table
to the large one (flat: about 1x; loaded whole: about ``--scale`` x).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from data_import_memory import (  # the sibling benchmark's noise PNGs and VmHWM probe
    HWM,
    child,
    noise,
)

IMPORTS = (
    "import json, sys\nimport numpy, PIL.Image, pyarrow.parquet\nimport codedance.curate.pipeline\n"
)
CHILD_CURATE = (
    HWM
    + IMPORTS
    + """
from codedance.curate import parse_config, run_curate
base = hwm()
endpoint = {"url": sys.argv[2], "max_in_flight": 16, "max_retries": 0}
raw = {"out": sys.argv[3], "stages": ["filter"], "filter": {"k": 1, "judge": "never"},
       "sources": [{"kind": "table", "path": sys.argv[1], "answer_kind": "count"}],
       "endpoints": {"weak": {**endpoint, "model": "weak"},
                     "strong": {**endpoint, "model": "strong"}}}
result = run_curate(parse_config(raw), stream=None)
print(json.dumps({"peak_kb": hwm(), "base_kb": base, "items": result.items}))
"""
)
CHILD_LOAD = (
    HWM
    + IMPORTS
    + """
from pathlib import Path
from codedance.curate.sources import load_items
base = hwm()
items, _ = load_items([{"kind": "table", "path": sys.argv[1], "answer_kind": "count"}], Path("."))
print(json.dumps({"peak_kb": hwm(), "base_kb": base, "items": len(items)}))
"""
)
SERVER = """
import collections, sys
from codedance.policy.replay_server import ReplayServer
with ReplayServer(lambda body: "<think>t</think><answer>0</answer>", ("weak", "strong")) as s:
    s.requests = collections.deque(maxlen=0)  # keep no request bodies
    print(s.url, flush=True)
    sys.stdin.read()
"""


def make(path: Path, rows: int, side: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema([("question", pa.string()), ("answer", pa.string()), ("image", image)])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, 100):
            batch = [
                {
                    "question": f"How many dots are in picture {i}?",
                    "answer": str(i % 7),
                    "image": {"bytes": noise(side, i, "PNG"), "path": None},
                }
                for i in range(start, min(rows, start + 100))
            ]
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--scale", type=int, default=4)
    parser.add_argument("--side", type=int, default=256)
    args = parser.parse_args()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    mb = 1024
    working: dict[str, list[float]] = {"curate": [], "load": []}
    try:
        url = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            for rows in (args.rows, args.rows * args.scale):
                data = Path(tmp) / f"table-{rows}.parquet"
                make(data, rows, args.side)
                size_mb = data.stat().st_size / 1e6
                t = time.perf_counter()
                curate = child(CHILD_CURATE, str(data), url, str(Path(tmp) / f"run-{rows}"))
                seconds = time.perf_counter() - t
                load = child(CHILD_LOAD, str(data))
                assert curate["items"] == load["items"] == rows, (curate, load)
                c, b = ((r["peak_kb"] - r["base_kb"]) / mb for r in (curate, load))
                working["curate"].append(c)
                working["load"].append(b)
                print(
                    f"{rows} rows, {size_mb:.0f} MB: curate (streamed, filter stage, {seconds:.0f} "
                    f"s) working peak {c:.0f} MB; load everything {b:.0f} MB; ratio streamed / "
                    f"loaded {c / b:.2f}"
                )
    finally:
        server.stdin.close()
        server.wait(timeout=10)
    grow = {k: v[1] / v[0] for k, v in working.items()}
    print(
        f"from {args.rows} to {args.rows * args.scale} rows: streamed peak x{grow['curate']:.2f}, "
        f"loaded peak x{grow['load']:.2f} (flat is x1, proportional is x{args.scale})"
    )


if __name__ == "__main__":
    main()
