"""Per-benchmark plots (matplotlib, Agg backend, PNG files): reasoning depth versus difficulty
(average turns and accuracy per difficulty label, as the paper's Figure 10) and the stop
reasons. `write_plots(report, folder)` returns benchmark name -> PNG path. Not handled: plots
across runs (compare runs with ``codedance report A B``).
"""

from __future__ import annotations

from pathlib import Path


def write_plots(report, folder: str | Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for r in report.results:
        rows = r.agent.by_difficulty
        if not rows:
            continue
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
        labels = [row[0] for row in rows]
        left.bar(labels, [row[2] for row in rows], color="#4c72b0")
        left.set_ylabel("average turns")
        left.set_xlabel("difficulty")
        acc = [(k, row[3]) for k, row in enumerate(rows) if row[3] is not None]
        if acc:
            twin = left.twinx()
            twin.plot([k for k, _ in acc], [100 * v for _, v in acc], "o-", color="#dd8452")
            twin.set_ylabel("accuracy (%)")
            twin.set_ylim(0, 100)
        left.set_title(f"{r.title}: turns and accuracy by difficulty", fontsize=9)
        reasons = r.agent.stop_reasons
        right.bar([k for k, _ in reasons], [v for _, v in reasons], color="#55a868")
        right.set_title("stop reasons", fontsize=9)
        right.tick_params(axis="x", labelrotation=20, labelsize=8)
        fig.tight_layout()
        path = folder / f"{r.name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths[r.name] = path
    return paths
