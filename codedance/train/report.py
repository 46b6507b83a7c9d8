"""The training report: per-step curves (the paper's Figures 4 and 9 at our scale) and the
held-out table of every stage, as ``report.html`` with PNGs beside it.

Reads only files: ``sft/sft_log.jsonl`` (TRL's log lines: loss, token accuracy),
``grpo-*/metrics.jsonl`` (one line per step) and ``eval/*.json``. The SFT figure: training loss
and mean token accuracy over steps. Figure 4: accuracy, tool calls per trajectory, turns, execution
success, entropy over steps. Figure 9: calls per trajectory on easy vs hard tasks, mean d and
reward terms, one line per run (profile). The held-out table is in run order (`stage_order`:
before SFT, after SFT, then each GRPO run as it finished) and links each stage's trajectories.
Not handled: confidence intervals (one seed per run).
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from codedance.records import read_jsonl
from codedance.runs.html import STYLE

SFT = ("loss", "mean_token_accuracy")
FIG4 = ("accuracy", "calls", "turns", "exec_success", "entropy", "loss")
FIG9 = (
    "calls/easy",
    "calls/hard",
    "accuracy/easy",
    "accuracy/hard",
    "d",
    "reward/total",
    "reward/tool",
)
TABLE = (
    "accuracy",
    "accuracy/easy",
    "accuracy/medium",
    "accuracy/hard",
    "calls",
    "calls/easy",
    "calls/medium",
    "calls/hard",
    "exec_success",
    "turns",
    "answered",
)


def _plot(runs: dict[str, list[dict]], keys: tuple[str, ...], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 3
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        for name, rows_ in runs.items():
            xs = [
                r["step"]
                for r in rows_
                if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])
            ]
            ys = [
                r[key]
                for r in rows_
                if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])
            ]
            ax.plot(xs, ys, marker=".", label=name)
        ax.set_title(key)
        ax.set_xlabel("step")
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def stage_order(out: Path) -> list[Path]:
    """``eval/*.json`` in run order: before-sft, after-sft, then the rest by the time written."""
    fixed = {"before-sft": 0, "after-sft": 1}
    return sorted(
        (out / "eval").glob("*.json"),
        key=lambda p: (fixed.get(p.stem, 2), p.stat().st_mtime_ns, p.stem),
    )


def write_report(out_dir: str | Path) -> dict[str, dict[str, float]]:
    """Write ``report.html``, ``sft.png``, ``figure4.png``, ``figure9.png``; return the held-out
    table in run order."""
    out = Path(out_dir)
    runs = {
        p.parent.name.removeprefix("grpo-"): read_jsonl(p)
        for p in sorted(out.glob("grpo-*/metrics.jsonl"))
    }
    evals = {p.stem: json.loads(p.read_text()) for p in stage_order(out)}
    sft_log = read_jsonl(out / "sft" / "sft_log.jsonl")
    if sft_log:
        _plot({"sft": sft_log}, SFT, out / "sft.png", "SFT on the teacher's trajectories")
    if runs:
        _plot(runs, FIG4, out / "figure4.png", "Training dynamics (paper Figure 4, tiny scale)")
        _plot(runs, FIG9, out / "figure9.png", "Reward designs (paper Figure 9, tiny scale)")
    cell = lambda v: "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"
    head = "".join(f"<th>{html.escape(k)}</th>" for k in TABLE)
    body = "".join(
        f"<tr><td>{_stage_link(out, n)}</td>"
        + "".join(f"<td>{cell(m.get(k))}</td>" for k in TABLE)
        + "</tr>"
        for n, m in evals.items()
    )
    figures = (
        ("sft.png", "SFT"),
        ("figure4.png", "GRPO per step"),
        ("figure9.png", "Reward designs"),
    )
    imgs = "".join(f'<h3>{t}</h3><p><img src="{f}"></p>' for f, t in figures if (out / f).exists())
    (out / "report.html").write_text(
        f"<!doctype html><html><head><meta charset=utf-8><title>codedance training report</title>"
        f"<style>{STYLE}</style></head><body>"
        f"<h1>Training report: {html.escape(str(out))}</h1><h2>Held-out tasks (in run order)</h2>"
        f"<table><tr><th>stage</th>{head}</tr>{body}</table>"
        f"<h2>Curves</h2>{imgs}</body></html>",
        encoding="utf-8",
    )
    return evals


def _stage_link(out: Path, name: str) -> str:
    """The stage's name, linked to its held-out trajectories when they were kept."""
    records = out / "eval" / f"{name}.jsonl"
    if records.exists():
        return f'<a href="eval/{html.escape(records.name)}">{html.escape(name)}</a>'
    return html.escape(name)
