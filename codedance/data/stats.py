"""Statistics of an import folder: tables and a histogram PNG (``codedance data stats DIR``).

Reads ``trajectories.jsonl`` (an SFT import) and/or ``tasks.jsonl`` (an RL import) one line at a
time; image sizes come from the records (width/height of each image reference, or the PNG
header for task images), so no image is decoded. Reported:

- SFT: rows per input file, imported/skipped (from ``rows.jsonl``), assistant turns and code
  calls per trajectory, code lines per call, code form (``<code>``, ``<tool_call>``, fence),
  whether it ends with an answer, input and feedback image sizes (megapixels);
- RL: rows per data source and split, answer kind × domain, input image sizes.

`collect` returns a `Stats`; `tables` renders it with rich; `histogram` writes one PNG with
the distributions (matplotlib, Agg). Not handled: folders of other kinds.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from codedance.data.ledger import iter_jsonl, summarize
from codedance.errors import DataError
from codedance.parsing import CodeForm, parse_message


@dataclass
class Stats:
    counts: dict[str, Counter] = field(default_factory=dict)
    series: dict[str, list[float]] = field(default_factory=dict)

    def count(self, table: str, key: str, n: int = 1) -> None:
        self.counts.setdefault(table, Counter())[key] += n

    def add(self, name: str, value: float) -> None:
        self.series.setdefault(name, []).append(value)


def _png_megapixels(path: Path) -> float | None:
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", head[16:24])
    return width * height / 1e6


def _sft(out: Path, stats: Stats) -> None:
    for record in iter_jsonl(out / "trajectories.jsonl"):
        stats.count("trajectories per file", record["key"].rsplit("#", 1)[0])
        turns = record["turns"]
        calls = [t for t in turns if t["code"] is not None]
        stats.add("assistant turns per trajectory", len(turns))
        stats.add("code calls per trajectory", len(calls))
        for turn in calls:
            stats.add("code lines per call", len(turn["code"].strip().splitlines()))
            form = parse_message(turn["text"]).code_form
            stats.count("code form", (form or CodeForm.FENCE).value)
        stats.count("ends with", "an answer" if record["answer"] is not None else "no answer")
        for message in record["prompt"]:
            for part in message["parts"]:
                if isinstance(part, dict):
                    ref = part["image"]
                    stats.add("input image megapixels", ref["width"] * ref["height"] / 1e6)
        for turn in turns:
            for ref in turn["feedback_images"]:
                stats.add("feedback image megapixels", ref["width"] * ref["height"] / 1e6)


def _rl(out: Path, stats: Stats) -> None:
    for record in iter_jsonl(out / "tasks.jsonl"):
        meta = dict(record["metadata"])
        stats.count("tasks per data source", meta.get("data_source") or record["source"])
        stats.count("tasks per split", record["split"])
        stats.count("answer kind × domain", f"{record['kind']} / {record['domain']}")
        for path in record["images"]:
            mp = _png_megapixels(out / path)
            if mp is not None:
                stats.add("input image megapixels", mp)


def collect(out: str | Path) -> Stats:
    """Statistics of the import folder `out` (module docstring)."""
    out = Path(out)
    has_sft, has_rl = (out / "trajectories.jsonl").exists(), (out / "tasks.jsonl").exists()
    if not (has_sft or has_rl):
        raise DataError(
            f"{out} holds neither trajectories.jsonl nor tasks.jsonl: "
            "pass the --out folder of `codedance data import`"
        )
    stats = Stats()
    if (out / "rows.jsonl").exists():
        summary = summarize(out / "rows.jsonl")
        stats.count("rows", "imported", summary["imported"])
        for reason, n in summary["skipped"].items():
            stats.count("rows", f"skipped: {reason}", n)
    if has_sft:
        _sft(out, stats)
    if has_rl:
        _rl(out, stats)
    return stats


def _quantiles(values: list[float]) -> tuple[float, float, float, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return sum(ordered) / len(ordered), at(0.5), at(0.9), ordered[-1]


def tables(stats: Stats) -> list:  # list[rich.table.Table]
    """One rich table per count and one for all distributions (mean, median, p90, max)."""
    from rich.table import Table

    out = []
    for name, counter in stats.counts.items():
        table = Table(title=name)
        table.add_column(name.split(" per ")[-1] if " per " in name else "value")
        table.add_column("count", justify="right")
        for key, n in counter.most_common():
            table.add_row(str(key), str(n))
        out.append(table)
    if stats.series:
        table = Table(title="distributions")
        for column in ("quantity", "n", "mean", "median", "p90", "max"):
            table.add_column(column, justify="left" if column == "quantity" else "right")
        for name, values in stats.series.items():
            mean, median, p90, top = _quantiles(values)
            table.add_row(
                name, str(len(values)), f"{mean:.3g}", f"{median:.3g}", f"{p90:.3g}", f"{top:.3g}"
            )
        out.append(table)
    return out


def histogram(stats: Stats, path: str | Path) -> Path | None:
    """One PNG with a histogram per distribution; None when there is nothing to plot."""
    if not stats.series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(stats.series)
    cols = min(3, len(names))
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        values = stats.series[name]
        integral = all(float(v).is_integer() for v in values)
        if integral and max(values) - min(values) < 60:  # one bar per integer, centred on it
            low, high = int(min(values)), int(max(values))
            ax.hist(
                values,
                bins=[x - 0.5 for x in range(low, high + 2)],
                color="#4c72b0",
                edgecolor="white",
            )
            ax.set_xticks(range(low, high + 1, max(1, (high - low) // 10 + 1)))
        else:
            ax.hist(values, bins=30, color="#4c72b0", edgecolor="white")
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("count")
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
