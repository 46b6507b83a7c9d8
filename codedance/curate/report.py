"""The run's report: ``report.json`` and a self-contained ``report.html`` (images by relative path).

``report.json`` holds:
- ``sources``: items read and duplicates dropped per source; ``items``: items after dedup;
- ``stages``: per stage, ``{"done", "kept", "dropped": {reason: count}}``;
- ``difficulty``: per source, the histogram of easy / medium / hard from the filter stage;
- ``calls_per_difficulty``: model requests spent on items of each difficulty (filter + atomic +
  verify), with the item count, so the cost of an accepted medium or hard item can be read off;
- ``endpoints``: per role, requests, failures, prompt and completion tokens, seconds (this run);
- ``accepted``: records exported; ``wall_s``: this run's wall time;
- ``samples``: up to 4 accepted and 4 rejected items (question, gold, answer, reason, first image).
Not handled: plots (the HTML shows tables).
"""

from __future__ import annotations

import html
import json
import os
from collections import Counter
from typing import TYPE_CHECKING, Any

from codedance.records import ImageStore, read_jsonl

if TYPE_CHECKING:  # pragma: no cover
    from codedance.curate.config import CurateConfig
    from codedance.curate.endpoints import Endpoint
    from codedance.curate.sources import Item

STAGE_NAMES = ("inspect", "filter", "atomic", "verify")


def _stage_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    dropped = Counter(r["reason"] for r in records if r.get("reason"))
    return {
        "done": len(records),
        "kept": len(records) - sum(dropped.values()),
        "dropped": dict(sorted(dropped.items())),
    }


def _samples(
    config: CurateConfig,
    items: list[Item],
    records: dict[str, dict[str, dict[str, Any]]],
    store: ImageStore,
) -> list[dict[str, Any]]:
    """The rows of the sample `items` (a few accepted and rejected ones the run kept aside)."""
    accepted, rejected = [], []
    for item in items:
        verdict = next(
            (records[s][item.key] for s in reversed(STAGE_NAMES) if item.key in records[s]), None
        )
        if verdict is None:
            continue
        image = os.path.relpath(
            store.root / f"{store.put(item.task.images[0])['sha256']}.png", config.out
        )
        atomic = records["atomic"].get(item.key, {})
        answer = (atomic.get("trajectory") or {}).get("answer")
        row = {
            "key": item.key,
            "source": item.source,
            "question": item.task.question[:300],
            "gold": item.task.answer,
            "answer": answer,
            "stage": next(s for s in reversed(STAGE_NAMES) if item.key in records[s]),
            "reason": verdict.get("reason", ""),
            "detail": verdict.get("detail", ""),
            "image": image,
        }
        is_accepted = item.key in records["verify"] and not verdict.get("reason")
        bucket = accepted if is_accepted else rejected
        if len(bucket) < 4:
            bucket.append({**row, "accepted": is_accepted})
    return accepted + rejected


def build_report(
    config: CurateConfig,
    items: int,
    samples: list[Item],
    source_counts: dict[str, int],
    endpoints: dict[str, Endpoint],
    seconds: float,
    store: ImageStore,
) -> dict[str, Any]:
    """The report of the run in ``config.out`` (its stage records are read whole: text, no images);
    `items`: the number of items after dedup; `samples`: the items to show."""
    out = config.out
    raw = {s: read_jsonl(out / f"{s}.jsonl") for s in STAGE_NAMES}
    records = {s: {r["key"]: r for r in rs} for s, rs in raw.items()}
    difficulty: dict[str, Counter[str]] = {}
    calls: dict[str, dict[str, int]] = {}
    for r in raw["filter"]:
        level = r.get("difficulty") or "unknown"
        difficulty.setdefault(r["source"], Counter())[level] += 1
        spent = sum(
            records[s].get(r["key"], {}).get("calls", 0) for s in ("filter", "atomic", "verify")
        )
        entry = calls.setdefault(level, {"items": 0, "requests": 0})
        entry["items"] += 1
        entry["requests"] += spent
    sft = out / "sft.jsonl"
    accepted = len(sft.read_text(encoding="utf-8").splitlines()) if sft.exists() else 0
    return {
        "sources": source_counts,
        "items": items,
        "stages": {s: _stage_summary(raw[s]) for s in STAGE_NAMES},
        "difficulty": {s: dict(sorted(c.items())) for s, c in difficulty.items()},
        "calls_per_difficulty": calls,
        "endpoints": {
            role: {"model": e.config.model, **e.stats.as_dict()} for role, e in endpoints.items()
        },
        "accepted": accepted,
        "wall_s": round(seconds, 3),
        "samples": _samples(config, samples, records, store),
    }


def _table(rows: list[list[object]], head: list[str]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{cells}</tr>{body}</table>"


def render_html(report: dict[str, Any]) -> str:
    stages = _table(
        [
            [s, v["done"], v["kept"], ", ".join(f"{k} {n}" for k, n in v["dropped"].items())]
            for s, v in report["stages"].items()
        ],
        ["stage", "done", "kept", "dropped"],
    )
    levels = ("easy", "medium", "hard", "unknown")
    diff = _table(
        [[s, *(h.get(lv, 0) for lv in levels)] for s, h in report["difficulty"].items()],
        ["source", *levels],
    )
    calls = _table(
        [[lv, v["items"], v["requests"]] for lv, v in report["calls_per_difficulty"].items()],
        ["difficulty", "items", "requests"],
    )
    ends = _table(
        [
            [
                r,
                v["model"],
                v["requests"],
                v["failures"],
                v["prompt_tokens"],
                v["completion_tokens"],
                v["seconds"],
            ]
            for r, v in report["endpoints"].items()
        ],
        ["role", "model", "requests", "failures", "prompt tokens", "completion tokens", "seconds"],
    )
    samples = "".join(
        f"<div class='s {'ok' if s['accepted'] else 'no'}'><img src='{html.escape(s['image'])}'>"
        f"<p><b>{'accepted' if s['accepted'] else 'rejected at ' + html.escape(s['stage'])}</b> "
        f"{html.escape(s['reason'])} {html.escape(s['detail'][:200])}</p>"
        f"<p>{html.escape(s['question'])}</p><p>gold: {html.escape(str(s['gold']))} · answer: "
        f"{html.escape(str(s['answer']))}</p></div>"
        for s in report["samples"]
    )
    return (
        "<!doctype html><meta charset='utf-8'><title>codedance curate report</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:4px "
        "8px}.s{display:inline-block;width:300px;vertical-align:top;"
        "margin:8px;padding:8px;border:2px solid #ccc}.ok{border-color:#4a4}.no{border-color:#c44}"
        "img{max-width:280px}</style>"
        f"<h1>codedance curate</h1><p>{report['items']} items, {report['accepted']} accepted, "
        f"{report['wall_s']} s</p><h2>Stages</h2>{stages}<h2>Difficulty per source</h2>{diff}"
        f"<h2>Requests per difficulty</h2>{calls}<h2>Endpoints (this "
        f"run)</h2>{ends}<h2>Samples</h2>{samples}"
    )


def write_report(
    config: CurateConfig,
    items: int,
    samples: list[Item],
    source_counts: dict[str, int],
    endpoints: dict[str, Endpoint],
    seconds: float,
    store: ImageStore,
) -> dict[str, Any]:
    report = build_report(config, items, samples, source_counts, endpoints, seconds, store)
    (config.out / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (config.out / "report.html").write_text(render_html(report), encoding="utf-8")
    return report
