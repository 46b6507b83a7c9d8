"""The report as one HTML page: the same notes and tables as ``report.md`` (the "how each number
was made" table included; wide tables scroll and long cells wrap), the plots inline (data URLs),
and a link to the trajectory viewer (``view/index.html``)."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from codedance.eval.report import EvalReport, tables
from codedance.eval.report import notes as report_notes

_STYLE = """body{font-family:system-ui,sans-serif;max-width:72rem;margin:1.5rem auto;padding:0 1rem}
table{border-collapse:collapse;margin:.5rem 0 1.5rem;display:block;max-width:100%;overflow-x:auto}
td,th{border:1px solid #ccc;padding:.25rem .6rem;overflow-wrap:anywhere;max-width:24rem}
th{background:#f3f3f3}img{max-width:100%}.note{background:#fff4e0;border-left:4px solid \
#e69500;padding:.4rem .8rem}"""


def html_page(report: EvalReport, plots: dict[str, Path], viewer: bool = True) -> str:
    parts = [f"<h1>Evaluation of {html.escape(report.model or '(model)')}</h1>"]
    parts += [f"<p class='note'>{html.escape(n)}</p>" for n in report_notes(report)]
    if viewer:
        parts.append("<p><a href='view/index.html'>Browse every trajectory</a></p>")
    for title, head, rows in tables(report):
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
        )
        parts.append(
            f"<h2>{html.escape(title)}</h2><table><tr>"
            + "".join(f"<th>{html.escape(h)}</th>" for h in head)
            + f"</tr>{body}</table>"
        )
    notes = [
        f"<li>{html.escape(r.title)}: {html.escape(n)}</li>"
        for r in report.results
        for n in r.not_produced
    ]
    if notes:
        parts.append("<h2>Not produced</h2><ul>" + "".join(notes) + "</ul>")
    for name, path in plots.items():
        data = base64.b64encode(Path(path).read_bytes()).decode()
        parts.append(
            f"<h3>{html.escape(report.result(name).title)}</h3>"
            f"<img src='data:image/png;base64,{data}'>"
        )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>codedance eval</title>"
        f"<style>{_STYLE}</style></head><body>{''.join(parts)}</body></html>"
    )
