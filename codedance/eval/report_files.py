"""Every file of an eval report in the run folder: ``report.json``, ``report.md``, the plots,
the trajectory viewer (``view/``) and ``report.html``.

Kept apart from `codedance.eval.report` (the numbers and their tables) so that the HTML page,
which reads those tables, does not import back into the module that builds them.
"""

from __future__ import annotations

import json
from pathlib import Path

from codedance.eval.html import html_page
from codedance.eval.report import EvalReport, markdown, report_json
from codedance.eval.viewer import write_viewer


def write_report(
    report: EvalReport,
    out: str | Path,
    *,
    plots: bool = True,
    viewer: bool = True,
    labels: dict[str, tuple[str, str]] | None = None,
) -> None:
    """Write every report file; ``labels`` (task id -> subject, level) go to the sample list."""
    out = Path(out)
    (out / "report.json").write_text(json.dumps(report_json(report), indent=1), encoding="utf-8")
    (out / "report.md").write_text(markdown(report), encoding="utf-8")
    images = {}
    if plots:
        from codedance.eval.plots import write_plots  # matplotlib, only when plots are wanted

        images = write_plots(report, out / "plots")
    if viewer:
        write_viewer(out, labels)
    (out / "report.html").write_text(html_page(report, images, viewer=viewer), encoding="utf-8")
