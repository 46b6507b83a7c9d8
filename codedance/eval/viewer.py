"""The trajectory viewer: static HTML pages under ``out/view/`` for every scored sample.

``view/index.html`` lists the samples in benchmark and id order (benchmark, id, subject, level,
verdict, answer, gold, turns, calls, exec status of the calls, stop reason), filterable by typing
and by verdict; each sample's page shows its subject and level, the whole conversation the model saw
(system, question, images, every turn's text, code results and feedback images; the one renderer,
`codedance.runs.html`) and how it was scored. Images are linked from ``out/images/`` (not inlined),
so pages stay small; open them from the run folder. Built from ``trajectories.jsonl`` and
``scores.jsonl``, plus the optional ``labels`` (task id -> subject, level) the runner knows from the
data.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from codedance.records import ImageStore, read_jsonl, trajectory_from_json
from codedance.runs.html import STYLE, image_file, trajectory_html
from codedance.runs.rundir import split_episode_key

_STYLE = STYLE


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _verdict_word(score: dict | None) -> str:
    if score is None or score["correct"] is None:
        return "not scored"
    if score["correct"] is True or score["correct"] == 1:
        return "right"
    return "wrong" if not score["correct"] else f"partly ({score['correct']})"


def _verdict(score: dict | None) -> str:
    word = _verdict_word(score)
    css = {"right": "ok", "wrong": "bad"}.get(word, "na")
    return f'<span class="{css}">{html.escape(word)}</span>'


def _exec_status(record: dict) -> str:
    """The statuses of a sample's code calls, e.g. ``ok 2, error 1`` (``–`` without calls)."""
    counts: dict[str, int] = {}
    for t in record["turns"]:
        if t["result"] is not None:
            counts[t["result"]["status"]] = counts.get(t["result"]["status"], 0) + 1
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "–"


def _order(key: str) -> tuple:
    bench, _, rest = key.partition("/")
    index, sample = split_episode_key(rest)
    return (
        (bench, 0, int(index), index, sample) if index.isdigit() else (bench, 1, 0, index, sample)
    )


def page(record: dict, score: dict | None, labels: tuple[str, str], store: ImageStore) -> str:
    """One sample's page: the conversation through the one renderer (`codedance.runs.html`),
    images linked from the run's `store` (``<run>/images``, ``../../images/`` from the page)."""
    trajectory = trajectory_from_json(record, store)
    conversation = trajectory_html(trajectory, lambda image: image_file(image, "../../images/"))
    extras = dict(score["extras"]) if score else {}
    subject, level = labels
    head = (
        f"<p>subject <b>{html.escape(subject or '–')}</b>; "
        f"level <b>{html.escape(level or '–')}</b></p>"
        f"<p>{_verdict(score)}; answer <b>{html.escape(str(score and score['answer']))}</b> "
        f"(from {html.escape(str(score and score['source']))}); "
        f"gold <b>{html.escape(extras.get('gold', '?'))}</b>; "
        f"scorer {html.escape(str(score and score['scorer']))}; "
        f"stop reason <b>{record['stop_reason']}</b>; "
        f"{html.escape(json.dumps(extras))}</p>"
    )
    title = html.escape(record["key"])
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{_STYLE}</style></head>"
        f"<body><p><a href='../index.html'>all samples</a></p><h1>{title}</h1>"
        f"{head}{conversation}</body></html>"
    )


def write_viewer(out: str | Path, labels: dict[str, tuple[str, str]] | None = None) -> Path:
    """Write ``out/view/`` and return the index page's path. ``labels``: task id -> (subject,
    level)."""
    out = Path(out)
    scores = {r["key"]: r for r in read_jsonl(out / "scores.jsonl")}
    records = {r["key"]: r for r in read_jsonl(out / "trajectories.jsonl")}
    view = out / "view"
    store = ImageStore(out / "images")
    labels = labels or {}
    lines = []
    for key in sorted(records, key=_order):
        record = records[key]
        bench, _, rest = key.partition("/")
        folder = view / _safe(bench)
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{_safe(rest)}.html"
        score = scores.get(key)
        subject, level = labels.get(split_episode_key(key)[0], ("", ""))
        (folder / name).write_text(page(record, score, (subject, level), store), encoding="utf-8")
        calls = sum(1 for t in record["turns"] if t["result"] is not None)
        gold = dict(score["extras"]).get("gold", "") if score else ""
        lines.append(
            f"<tr data-verdict='{_verdict_word(score)}'><td>{html.escape(bench)}</td>"
            f"<td><a href='{_safe(bench)}/{name}'>{html.escape(rest)}</a></td>"
            f"<td>{html.escape(subject)}</td><td>{html.escape(level)}</td>"
            f"<td>{_verdict(score)}</td><td>{html.escape(str(score and score['answer']))}</td>"
            f"<td>{html.escape(gold)}</td><td>{len(record['turns'])}</td><td>{calls}</td>"
            f"<td>{html.escape(_exec_status(record))}</td><td>{record['stop_reason']}</td></tr>"
        )
    script = (
        "<script>function f(){const q=document.getElementById('q').value.toLowerCase(),"
        "v=document.getElementById('v').value;for(const r of document.querySelectorAll('tbody tr'))"
        "r.style.display=r.textContent.toLowerCase().includes(q)&&(!v||r.dataset.verdict===v)?'':'none'}</script>"
    )
    verdicts = "".join(f"<option>{v}</option>" for v in ("right", "wrong", "not scored"))
    index = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>samples</title>"
        f"<style>{_STYLE}</style>{script}"
        f"</head><body><h1>Samples</h1><p><a href='../report.html'>report</a> · filter: "
        f"<input id='q' oninput='f()'> verdict: <select id='v' onchange='f()'>"
        f"<option value=''>all</option>"
        f"{verdicts}</select></p><table><thead><tr><th>benchmark</th><th>id</th><th>subject</th>"
        f"<th>level</th><th>verdict</th><th>answer</th><th>gold</th><th>turns</th><th>calls</th>"
        f"<th>exec status</th><th>stop</th></tr></thead><tbody>{''.join(lines)}</tbody>"
        "</table></body></html>"
    )
    view.mkdir(parents=True, exist_ok=True)
    (view / "index.html").write_text(index, encoding="utf-8")
    return view / "index.html"
