"""The demo's HTML report: the summary table, turns against difficulty (the paper's Figure 10) and
a trajectory viewer (each trajectory's conversation through the one renderer,
`codedance.runs.html`, with the reward breakdown and R_turn per turn).

Images are linked from the run's ``images/`` store (written by `codedance.records`), so the page
works from disk with no server. Not handled: very large runs (every trajectory is on one page).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from codedance.demo.summary import ORDER, DemoRow, Scored
from codedance.runs.html import STYLE, image_file, trajectory_html

DEMO_STYLE = """td,th{text-align:right}td:first-child,td:nth-child(2){text-align:left}
tr.all{font-weight:bold;background:#f4f4f4}.msg pre{max-height:320px;overflow:auto}"""


def _table(rows: Sequence[DemoRow]) -> str:
    head = (
        "skill",
        "difficulty",
        "n",
        "accuracy",
        "avg turns",
        "exec success",
        "tool use",
        "R_acc",
        "R_format",
        "R_seq",
        "reward",
    )
    out = ['<table id="summary"><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for r in rows:
        es = "–" if r.exec_success is None else f"{r.exec_success:.0%}"
        cells = (
            r.skill,
            r.difficulty,
            r.n,
            f"{r.accuracy:.0%}",
            f"{r.avg_turns:.2f}",
            es,
            f"{r.tool_share:.0%}",
            f"{r.r_acc:.2f}",
            f"{r.r_format:.2f}",
            f"{r.r_seq:+.3f}",
            f"{r.r_total:.3f}",
        )
        cls = ' class="all"' if r.skill == "all" else ""
        out.append(
            f"<tr{cls}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>"
        )
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
            ys.append(
                sum(len(s.trajectory.turns) for s in items) / len(items) if items else float("nan")
            )
        ax.plot(diffs, ys, marker="o", linewidth=3 if skill == "all" else 1.2, label=skill)
    ax.set_xlabel("difficulty")
    ax.set_ylabel("mean assistant turns")
    ax.set_title("Reasoning depth against difficulty")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _trajectory(s: Scored) -> str:
    """One collapsible trajectory: the verdict and reward breakdown as its summary, then the
    conversation through the one renderer (`codedance.runs.html`), R_turn on each turn."""
    r = s.reward
    verdict = '<span class="ok">correct</span>' if s.correct else '<span class="bad">wrong</span>'
    head = (
        f'<details class="trajectory"><summary>{html.escape(s.key)} · {verdict} · '
        f"{len(s.trajectory.turns)} turns · reward {r.total:.3f} (acc {r.accuracy:.2f}, "
        f"format {r.format:.2f}, R_seq {r.sequence_tool:+.3f}) · advantage {s.advantage:+.3f}"
        "</summary>"
        f"<p><b>Q:</b> {html.escape(s.task.question)} <b>gold:</b> "
        f"{html.escape(s.task.answer)} <b>answer:</b> {html.escape(str(s.trajectory.answer))}</p>"
    )
    notes = [
        f"R_turn {r.turn_returns[i] if i < len(r.turn_returns) else 0.0:+.2f}"
        for i in range(len(s.trajectory.turns))
    ]
    return head + trajectory_html(s.trajectory, image_file, notes) + "</details>"


def write_report(out: Path, rows: Sequence[DemoRow], scored: Sequence[Scored]) -> Path:
    """Write ``report.html`` (and ``turns.png``) into the run directory `out`; returns its path."""
    if scored:
        turns_plot(scored, out / "turns.png")
    body = [
        "<h1>codedance demo</h1>",
        "<h2>Summary per skill and difficulty</h2>",
        _table(rows),
        "<h2>Turns against difficulty</h2>",
        '<img id="turns" src="turns.png" alt="turns against difficulty">' if scored else "",
        f"<h2>Trajectories ({len(scored)})</h2>",
    ]
    body += [_trajectory(s) for s in scored]
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>codedance demo</title>"
        f"<style>{STYLE}{DEMO_STYLE}</style></head><body>{''.join(body)}</body></html>"
    )
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
