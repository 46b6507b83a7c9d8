"""The demo's HTML report: the summary table, turns against difficulty (the paper's Figure 10) and
a trajectory viewer (each turn's think, code, output and images, with the reward breakdown).

Images are linked from the run's ``images/`` store (written by `codedance.records`), so the page
works from disk with no server. Not handled: very large runs (every trajectory is on one page).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from codedance.demo_summary import ORDER, DemoRow, Scored
from codedance.types import Image

STYLE = """body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,td:nth-child(2){text-align:left}
tr.all{font-weight:bold;background:#f4f4f4}pre{background:#f7f7f7;padding:6px;white-space:pre-wrap;
max-height:320px;overflow:auto}details{margin:6px 0;border:1px solid #ddd;padding:4px 8px}
.ok{color:#070}.bad{color:#a00}img.thumb{max-width:360px;border:1px solid #aaa;margin:4px}"""


def _img(image: Image) -> str:
    return f'<img class="thumb" src="images/{image.sha256}.png" alt="{html.escape(image.origin)}">'


def _table(rows: Sequence[DemoRow]) -> str:
    head = ("skill", "difficulty", "n", "accuracy", "avg turns", "exec success", "tool use",
            "R_acc", "R_format", "R_seq", "reward")
    out = ['<table id="summary"><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for r in rows:
        es = "–" if r.exec_success is None else f"{r.exec_success:.0%}"
        cells = (r.skill, r.difficulty, r.n, f"{r.accuracy:.0%}", f"{r.avg_turns:.2f}", es,
                 f"{r.tool_share:.0%}", f"{r.r_acc:.2f}", f"{r.r_format:.2f}", f"{r.r_seq:+.3f}",
                 f"{r.r_total:.3f}")
        cls = ' class="all"' if r.skill == "all" else ""
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return "\n".join(out + ["</table>"])


def turns_plot(scored: Sequence[Scored], path: Path) -> None:
    """Mean assistant turns per difficulty, one line per skill and one for all (PNG at `path`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    diffs = sorted({s.difficulty for s in scored}, key=lambda d: ORDER.get(d, 9))
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    for skill in sorted({s.skill for s in scored}) + ["all"]:
        ys = []
        for d in diffs:
            items = [s for s in scored if s.difficulty == d and skill in ("all", s.skill)]
            ys.append(sum(len(s.trajectory.turns) for s in items) / len(items) if items else float("nan"))
        ax.plot(diffs, ys, marker="o", linewidth=3 if skill == "all" else 1.2, label=skill)
    ax.set_xlabel("difficulty")
    ax.set_ylabel("mean assistant turns")
    ax.set_title("Reasoning depth against difficulty")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _trajectory(s: Scored) -> str:
    r = s.reward
    verdict = '<span class="ok">correct</span>' if s.correct else '<span class="bad">wrong</span>'
    parts = [(f'<details class="trajectory"><summary>{html.escape(s.key)} · {verdict} · '
             f"{len(s.trajectory.turns)} turns · reward {r.total:.3f} (acc {r.accuracy:.2f}, "
             f"format {r.format:.2f}, R_seq {r.sequence_tool:+.3f}) · advantage {s.advantage:+.3f}"
             "</summary>"), (f"<p><b>Q:</b> {html.escape(s.task.question)} <b>gold:</b> "
             f"{html.escape(s.task.answer)} <b>answer:</b> {html.escape(str(s.trajectory.answer))}</p>")]
    for m in s.trajectory.prompt:
        parts += [_img(i) for i in m.images]
    for i, t in enumerate(s.trajectory.turns):
        ret = r.turn_returns[i] if i < len(r.turn_returns) else 0.0
        parts.append(f"<h4>turn {i + 1} (R_turn {ret:+.2f})</h4><p>{html.escape(t.think or '')}</p>")
        if t.code:
            parts.append(f"<pre class='code'>{html.escape(t.code)}</pre>")
        if t.result is not None:
            body = t.result.stdout + (f"\n{t.result.error.type}: {t.result.error.message}" if t.result.error else "")
            parts.append(f"<p>status: {t.result.status.value}</p><pre>{html.escape(body)}</pre>")
            parts += [_img(im) for im in t.feedback_images]
        if t.answer is not None:
            parts.append(f"<p><b>answer:</b> {html.escape(t.answer)}</p>")
    return "\n".join(parts + ["</details>"])


def write_report(out: Path, rows: Sequence[DemoRow], scored: Sequence[Scored]) -> Path:
    """Write ``report.html`` (and ``turns.png``) into the run directory `out`; returns its path."""
    if scored:
        turns_plot(scored, out / "turns.png")
    body = ["<h1>codedance demo</h1>", "<h2>Summary per skill and difficulty</h2>", _table(rows),
            "<h2>Turns against difficulty</h2>",
            '<img id="turns" src="turns.png" alt="turns against difficulty">' if scored else "",
            f"<h2>Trajectories ({len(scored)})</h2>"]
    body += [_trajectory(s) for s in scored]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>codedance demo</title>"
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>")
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
