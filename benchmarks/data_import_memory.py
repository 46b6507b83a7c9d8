"""Peak memory and speed of ``codedance data import codedance-sft`` on a scaled-down CodeDance-SFT.

    .venv/bin/python benchmarks/data_import_memory.py [--rows 600] [--side 400] [--jpeg-share 0.5]

Writes a parquet file in the dataset's schema (``messages``, ``images``: list of binary) shaped
like the release (12.3 GB / 33,816 rows ≈ 365 kB per row; HF writes image datasets in row groups
of 100 rows): ``--rows`` two-turn trajectories, each with one input image and one output image of
``--side`` × ``--side`` noise (incompressible, so bytes on disk are bytes in memory); a share of
the inputs are JPEG (decoded and stored as PNG by the import, as a JPEG release would be).

Then, each in a fresh process, measured by the peak resident set size of that process (``VmHWM``):

- the import (`codedance.data.sft_import.import_sft`), streaming record batches;
- the baseline in the same run: ``pyarrow.parquet.read_table`` of the file, then ``to_pylist`` (how
  a script that loads the dataset in one go would start), before any conversion.

Printed: input size, peak RSS of each, their ratio, rows/s of the import, and the peak RSS
minus the same interpreter's RSS after importing the modules (the import's own working memory).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# VmHWM (this process image's peak RSS), not ru_maxrss: Linux carries ru_maxrss over fork and exec
HWM = (
    "def hwm():\n"
    "    status = open('/proc/self/status')\n"
    "    return int(next(l for l in status if l.startswith('VmHWM')).split()[1])\n"
)
CHILD_IMPORT = (
    HWM
    + """
import json, sys, time
import numpy, PIL.Image, pyarrow.parquet
from codedance.data.sft_import import import_sft
base = hwm()
t = time.perf_counter()
r = import_sft([sys.argv[1]], sys.argv[2])
print(json.dumps({"peak_kb": hwm(), "base_kb": base,
                  "seconds": time.perf_counter() - t, "imported": r.imported, "rows": r.rows}))
"""
)
CHILD_BASELINE = (
    HWM
    + """
import json, sys
import numpy, PIL.Image, pyarrow.parquet as pq
base = hwm()
rows = pq.read_table(sys.argv[1]).to_pylist()
print(json.dumps({"peak_kb": hwm(), "base_kb": base,
                  "rows": len(rows)}))
"""
)


def noise(side: int, seed: int, fmt: str) -> bytes:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(
        buffer, format=fmt, **({"quality": 95} if fmt == "JPEG" else {"compress_level": 1})
    )
    return buffer.getvalue()


def make(path: Path, rows: int, side: int, jpeg_share: float) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("images", pa.list_(pa.binary())),
        ]
    )
    code = "<think>crop</think>\n<code>\n```python\ninput_image.crop((0, 0, 50, 50))\n```\n</code>"
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, 100):
            batch = []
            for i in range(start, min(rows, start + 100)):
                fmt = "JPEG" if i < jpeg_share * rows else "PNG"
                batch.append(
                    {
                        "messages": [
                            {"role": "user", "content": f"<image>Question {i}?"},
                            {"role": "assistant", "content": code},
                            {
                                "role": "user",
                                "content": (
                                    "<tool_response>\nOutput image:\n<image>\n</tool_response>"
                                ),
                            },
                            {
                                "role": "assistant",
                                "content": "<think>seen</think>\n<answer>3</answer>",
                            },
                        ],
                        "images": [noise(side, 2 * i, fmt), noise(side, 2 * i + 1, "PNG")],
                    }
                )
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))


def child(code: str, *args: str) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--side", type=int, default=400)
    parser.add_argument("--jpeg-share", type=float, default=0.5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train-00000-of-00001.parquet"
        t = time.perf_counter()
        make(data, args.rows, args.side, args.jpeg_share)
        size_mb = os.path.getsize(data) / 1e6
        print(
            f"input: {data.name}, {size_mb:.0f} MB, {args.rows} rows (made in "
            f"{time.perf_counter() - t:.0f} s)"
        )
        ours = child(CHILD_IMPORT, str(data), str(Path(tmp) / "out"))
        base = child(CHILD_BASELINE, str(data))
    mb = 1024
    print(
        f"import:   peak RSS {ours['peak_kb'] / mb:.0f} MB "
        f"(interpreter and modules {ours['base_kb'] / mb:.0f} MB, "
        f"working {(ours['peak_kb'] - ours['base_kb']) / mb:.0f} MB); "
        f"{ours['imported']}/{ours['rows']} rows "
        f"in {ours['seconds']:.1f} s = {ours['rows'] / ours['seconds']:.1f} rows/s"
    )
    print(f"baseline: read_table + to_pylist peak RSS {base['peak_kb'] / mb:.0f} MB")
    print(
        f"ratio import / baseline peak: {ours['peak_kb'] / base['peak_kb']:.2f}; "
        f"import peak / input size: {ours['peak_kb'] / mb / size_mb:.2f}"
    )


if __name__ == "__main__":
    main()
