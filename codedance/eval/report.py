"""The evaluation report: typed results, ``report.json`` and ``report.md`` (paper Tables 1–3).

`build_report` turns scores and trajectories into an `EvalReport`; `write_report` writes
``report.json``, ``report.md``, ``report.html`` (``codedance.eval.html``), per-benchmark plots
and the trajectory viewer. Tables (values in %, one decimal): Table 1 perception and counting
(CountBench, PixmoCount, V*, HR-Bench 4K/8K), Table 2 charts and math (ChartQA, CharXiv,
MathVision, MathVista, MathVerse, WeMath), Table 3 average turns and execution success; then the
benchmark-specific tables (HR-Bench single/cross, ChartQA human/augmented, WeMath's four
dimensions and steps, MathVista by task). ``n/p`` marks a number not produced (it needs
``--judge``); every benchmark row records its scorers, split, profile and turn budget.
`compare_markdown` puts several runs side by side with deltas against the first.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from codedance.errors import DataError
from codedance.eval.agent_stats import AgentSummary, agent_stats, group_rows, tool_use_split
from codedance.eval.intervals import bootstrap, outside, pass_at_k, wilson
from codedance.eval.metrics import BREAKDOWNS, Breakdown, benchmark_metrics
from codedance.eval.spec import BENCHMARKS, BenchmarkSpec, SampleScore
from codedance.messages import shorten
from codedance.runs.rundir import episode_key
from codedance.types import Task, Trajectory

TABLE1 = ("countbench", "pixmocount", "vstar", "hrbench4k", "hrbench8k")
TABLE2 = (
    "chartqa",
    "charxiv",
    "mathvision",
    "mathvision_mini",
    "mathvista",
    "mathverse",
    "mathverse_all",
    "wemath",
)


@dataclass(frozen=True)
class BenchmarkResult:
    """One benchmark's numbers and how they were made.

    ``expected`` items, ``samples_per_item`` samples each; ``scored`` samples have a score
    (``complete`` when that is every one). ``headline`` is Avg@k over the samples (the plain
    number for k = 1); ``interval`` its 95 % interval on accuracy (``interval_kind`` binomial for
    k = 1, bootstrap over items for k > 1); ``pass_at_k`` for k > 1."""

    name: str
    title: str
    split: str
    profile: str
    max_turns: int
    no_tools: bool
    judge: str | None
    expected: int
    headline: float | None
    metrics: tuple[tuple[str, float | None], ...]
    breakdowns: tuple[Breakdown, ...]
    not_produced: tuple[str, ...]
    scorers: tuple[tuple[str, int], ...]
    answer_sources: tuple[tuple[str, int], ...]
    failed: int
    agent: AgentSummary
    scoring: str = "vlmevalkit"
    samples_per_item: int = 1
    scored: int = 0
    complete: bool = True
    interval: tuple[float, float] | None = None
    interval_kind: str = ""
    pass_at_k: float | None = None
    judge_failures: int = 0
    failure_reasons: tuple[tuple[str, int], ...] = ()
    groups: tuple[tuple[str, tuple[tuple[str, int, float | None, float, float], ...]], ...] = ()
    by_tool_use: tuple[tuple[str, int, float | None], ...] = ()


@dataclass(frozen=True)
class EvalReport:
    out_dir: str
    model: str
    results: tuple[BenchmarkResult, ...]
    scoring: str = "vlmevalkit"
    stopped: str = ""
    failures_file: str = ""

    def result(self, name: str) -> BenchmarkResult:
        return next(r for r in self.results if r.name == name)

    @property
    def failed(self) -> int:
        return sum(r.failed for r in self.results)

    def top_failure(self) -> tuple[str, int] | None:
        """The most common failure reason over all benchmarks and how often it occurred."""
        counts: Counter[str] = Counter()
        for r in self.results:
            counts.update(dict(r.failure_reasons))
        return counts.most_common(1)[0] if counts else None


def _reason(error: str) -> str:
    """A failure's reason without the per-sample parts (to count alike failures together)."""
    kind, _, message = error.partition(": ")
    if kind == "UnreadableImage":
        return "UnreadableImage: image is not a readable image"
    return f"{kind}: {shorten(message, 120)}"


def _group_fields(spec: BenchmarkSpec) -> tuple[str, ...]:
    return tuple(field for field, _ in BREAKDOWNS.get(spec.scorer, ()) if field != "skills")


def _aggregate(spec: BenchmarkSpec, items: list[Task], by_index: list[list[SampleScore]]):
    """(metrics, breakdowns, not_produced) with each metric averaged over the k sample indexes."""
    runs = [benchmark_metrics(spec, items, scores) for scores in by_index if scores]
    if not runs:
        return benchmark_metrics(spec, items, [])
    pooled = benchmark_metrics(spec, items, [s for scores in by_index for s in scores])
    metrics: dict[str, float | None] = {}
    for key in runs[0][0]:
        values = [m.get(key) for m, _, _ in runs]
        metrics[key] = None if any(v is None for v in values) else sum(values) / len(values)  # type: ignore[arg-type]
    metrics["samples"] = float(sum(len(s) for s in by_index))
    return metrics, pooled[1], tuple(dict.fromkeys(n for _, _, np in runs for n in np))


def build_report(
    out: Path,
    settings,
    tasks: Mapping[str, tuple[BenchmarkSpec, Task]],
    scores: Mapping[str, SampleScore],
    records: Mapping[str, Trajectory],
    failures: Mapping[str, str],
    judge: str | None,
    stopped: str = "",
) -> EvalReport:
    """The report of a run folder: ``failures`` maps each failed, unfinished key to its error."""
    results = []
    k = settings.samples
    for spec in settings.benchmarks:
        ids = [tid for tid, (s, _) in tasks.items() if s.name == spec.name]
        items = [tasks[i][1] for i in ids]
        by_index = [
            [scores[key] for tid in ids if (key := episode_key(tid, j)) in scores] for j in range(k)
        ]
        mine = [s for scores_j in by_index for s in scores_j]
        keys = [episode_key(tid, j) for tid in ids for j in range(k)]
        trajs = [records[key] for key in keys if key in records]
        values = {id(records[s.key]): s.value for s in mine if s.key in records}
        metrics, breakdowns, not_produced = _aggregate(spec, items, by_index)
        per_item = [
            [
                v
                for j in range(k)
                if (s := scores.get(episode_key(tid, j))) is not None and (v := s.value) is not None
            ]
            for tid in ids
        ]
        per_item = [v for v in per_item if v]
        interval, kind, passed = None, "", None
        if per_item and not any(s.correct is None for s in mine):
            if k == 1:
                mean = sum(v[0] for v in per_item) / len(per_item)
                interval, kind = wilson(mean, len(per_item)), "binomial"
            else:
                _, low, high = bootstrap(per_item)
                interval, kind, passed = (low, high), "bootstrap over items", pass_at_k(per_item)
        difficulty = {tid: dict(tasks[tid][1].metadata).get("difficulty", "all") for tid in ids}
        correct = {s.task_id: s.correct for s in by_index[0]}
        failed = [failures[key] for key in keys if key in failures and key not in records]
        groups = tuple(
            (
                field,
                group_rows(trajs, {t.id: dict(t.metadata).get(field, "") for t in items}, values),
            )
            for field in _group_fields(spec)
        )
        episode = settings.episode
        results.append(
            BenchmarkResult(
                name=spec.name,
                title=spec.title,
                split=spec.split,
                profile=settings.protocol,
                max_turns=1 if settings.no_tools else episode.max_turns,
                no_tools=settings.no_tools,
                judge=judge,
                expected=len(ids),
                headline=metrics.get(spec.headline),
                metrics=tuple(metrics.items()),
                breakdowns=breakdowns,
                not_produced=not_produced,
                scorers=tuple(sorted(Counter(s.scorer for s in mine).items())),
                answer_sources=tuple(sorted(Counter(s.source for s in mine).items())),
                failed=len(failed),
                agent=agent_stats(trajs, difficulty, correct),
                scoring=settings.scoring,
                samples_per_item=k,
                scored=len(mine),
                complete=len(mine) >= len(keys),
                interval=interval,
                interval_kind=kind,
                pass_at_k=passed,
                judge_failures=sum(1 for s in mine if s.judge_failure),
                failure_reasons=tuple(Counter(_reason(e) for e in failed).most_common(5)),
                groups=groups,
                by_tool_use=tool_use_split(trajs, values),
            )
        )
    return EvalReport(
        str(out),
        settings.model,
        tuple(results),
        settings.scoring,
        stopped,
        str(Path(out) / "failures.jsonl"),
    )


def report_json(report: EvalReport) -> dict:
    """``report.json``: the dataclasses, with ``metrics`` as a dict for easy loading."""
    data = dataclasses.asdict(report)
    for r in data["results"]:
        r["metrics"] = dict(r["metrics"])
    return data


def _pct(value: float | None) -> str:
    return "n/p" if value is None else f"{100 * value:.1f}"


def headline_cell(value: float | None, complete: bool, scored: int, expected: int) -> str:
    """``83.9``, or ``83.9* (50/304)`` for a benchmark with fewer scored samples than expected."""
    cell = _pct(value)
    return cell if complete else f"{cell}* ({scored}/{expected})"


def _headline(r: BenchmarkResult) -> str:
    """The headline cell; a number not produced shows its rule-only lower bound beside."""
    cell = headline_cell(r.headline, r.complete, r.scored, r.expected * r.samples_per_item)
    bound = dict(r.metrics).get("accuracy_rule_only")
    lower_bound = (
        BENCHMARKS[r.name].scorer in ("mathvista", "mathvision", "mathverse")
        if r.name in BENCHMARKS
        else False
    )
    if r.headline is None and bound is not None and r.scorers and lower_bound:
        cell += f" (rule-only ≥ {_pct(bound)})"
    return cell


def _interval(r: BenchmarkResult) -> str:
    return "–" if r.interval is None else f"[{_pct(r.interval[0])}, {_pct(r.interval[1])}]"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [_row(head), _row(["---"] * len(head)), *(_row(r) for r in rows)]


def provenance(r: BenchmarkResult) -> str:
    """The one-line label every number carries: scoring mode, judge, turn budget and the
    protocol (agent and prompt profile)."""
    k = f", Avg@{r.samples_per_item}" if r.samples_per_item > 1 else ""
    return (
        f"scoring {r.scoring}, judge {r.judge or 'none'}, {r.max_turns} turns{k}, "
        f"profile {r.profile}"
    )


def tables(report: EvalReport) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every table, shared by the Markdown and HTML reports."""
    by = {r.name: r for r in report.results}
    out = []
    for title, names in (
        ("Table 1: perception and counting (accuracy, %)", TABLE1),
        ("Table 2: charts and math (accuracy, %)", TABLE2),
    ):
        present = [n for n in names if n in by]
        if present:
            out.append(
                (
                    f"{title}; {'; '.join(sorted({provenance(by[n]) for n in present}))}",
                    ["model", *(by[n].title for n in present)],
                    [[report.model, *(_headline(by[n]) for n in present)]],
                )
            )
    out.append(
        (
            "Uncertainty (95 % intervals on accuracy; * = incomplete)",
            [
                "benchmark",
                "value",
                "95 % interval",
                "interval",
                "pass@k",
                "samples/item",
                "scored / expected",
            ],
            [
                [
                    r.title,
                    _headline(r),
                    _interval(r),
                    r.interval_kind or "–",
                    _pct(r.pass_at_k) if r.pass_at_k is not None else "–",
                    str(r.samples_per_item),
                    f"{r.scored}/{r.expected * r.samples_per_item}",
                ]
                for r in report.results
            ],
        )
    )
    rows = [
        [
            r.title,
            f"{r.agent.avg_turns:.2f}" if r.agent.avg_turns is not None else "–",
            _pct(r.agent.exec_success_per_call),
            _pct(r.agent.exec_success_per_sample),
            _pct(r.agent.tool_use_share),
            str(r.agent.samples),
            str(r.failed),
        ]
        for r in report.results
    ]
    out.append(
        (
            "Table 3: turns and execution success",
            [
                "benchmark",
                "avg turns",
                "exec success / call (%)",
                "exec success / sample, release (%)",
                "samples using code (%)",
                "samples",
                "failed",
            ],
            rows,
        )
    )
    out.append(
        (
            "Accuracy by code use (%)",
            ["benchmark", "ran code: n", "ran code: accuracy", "no code: n", "no code: accuracy"],
            [
                [r.title, *(c for _, n, acc in r.by_tool_use for c in (str(n), _pct(acc)))]
                for r in report.results
                if r.by_tool_use
            ],
        )
    )
    for r in report.results:
        m = dict(r.metrics)
        if r.name.startswith("hrbench"):
            out.append(
                (
                    f"{r.title}: average over rotations (%)",
                    ["all", "single", "cross"],
                    [[_pct(m.get("avg_all")), _pct(m.get("avg_single")), _pct(m.get("avg_cross"))]],
                )
            )
        if r.name == "wemath":
            keys = [
                "score_strict",
                "score_loose",
                "IK",
                "IG",
                "CM_strict",
                "CM_loose",
                "RM_strict",
                "RM_loose",
                "S1",
                "S2",
                "S3",
            ]
            out.append(
                (
                    "WeMath: four dimensions and steps (%)",
                    ["metric", "value"],
                    [[k, _pct(m.get(k))] for k in keys],
                )
            )
        for field, groups in r.groups:
            out.append(
                (
                    f"{r.title} by {field}",
                    [field, "samples", "accuracy (%)", "avg turns", "using code (%)"],
                    [
                        [g, str(n), _pct(acc), f"{turns:.2f}", _pct(tool)]
                        for g, n, acc, turns, tool in groups
                    ],
                )
            )
    out.append(
        (
            "How each number was made",
            [
                "benchmark",
                "split",
                "scoring",
                "judge",
                "profile",
                "max turns",
                "samples/item",
                "scorers",
                "answer sources",
                "judge failures",
                "not produced",
            ],
            [
                [
                    r.title,
                    r.split,
                    r.scoring,
                    r.judge or "none",
                    r.profile,
                    str(r.max_turns),
                    str(r.samples_per_item),
                    ", ".join(f"{k}: {v}" for k, v in r.scorers),
                    ", ".join(f"{k}: {v}" for k, v in r.answer_sources),
                    str(r.judge_failures),
                    "; ".join(r.not_produced) or "–",
                ]
                for r in report.results
            ],
        )
    )
    return out


def notes(report: EvalReport) -> list[str]:
    """Plain-text warnings that belong above the tables (incomplete benchmarks, early stop)."""
    lines = []
    if report.stopped:
        lines.append(f"The run stopped early: {report.stopped}. Rerun the same command to resume.")
    incomplete = [r for r in report.results if not r.complete]
    if incomplete:
        lines.append(
            "Incomplete (marked *): "
            + ", ".join(
                f"{r.title} {r.scored}/{r.expected * r.samples_per_item}" for r in incomplete
            )
            + f"; failures in {report.failures_file}."
        )
    top = report.top_failure()
    if top:
        lines.append(f"Most common failure ({top[1]}x): {top[0]}")
    judge_failures = sum(r.judge_failures for r in report.results)
    if judge_failures:
        lines.append(
            f"{judge_failures} sample(s) scored 0 because the judge's replies gave no verdict "
            f"(judge_failure in scores.jsonl)."
        )
    return lines


def markdown(report: EvalReport) -> str:
    lines = [f"# Evaluation of {report.model or '(model)'}", ""]
    lines += [f"> {n}" for n in notes(report)] + ([""] if notes(report) else [])
    for title, head, rows in tables(report):
        lines += [f"## {title}", "", *_table(head, rows), ""]
    return "\n".join(lines)


def load_report(path: str | Path) -> dict:
    """A ``report.json`` (``path`` may be the run folder); a missing or unreadable one is a
    `DataError` naming the file."""
    p = Path(path)
    p = p if p.suffix == ".json" else p / "report.json"
    if not p.is_file():
        raise DataError(f"expected {p}: run `codedance eval ... --out {p.parent}` first")
    try:
        report = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{p}: not a readable report ({exc})") from None
    if not isinstance(report, dict):
        raise DataError(f"{p}: not a report (a JSON object is expected)")
    return report


def compare_markdown(
    reports: Sequence[dict], labels: Sequence[str], allow_incomplete: bool = False
) -> str:
    """Headline (with its interval), turns and execution success of several runs, deltas vs the
    first. A delta between an incomplete and a complete number is refused (``n/c``) unless
    ``allow_incomplete``; ``outside`` says whether the two 95 % intervals do not overlap."""
    names = [
        n for n in BENCHMARKS if any(r["name"] == n for rep in reports for r in rep["results"])
    ]
    lines = [
        "| benchmark | metric | " + " | ".join(labels) + " |",
        "|---|---|" + "---|" * len(labels),
    ]
    refused = False
    for name in names:
        hits = [next((r for r in rep["results"] if r["name"] == name), None) for rep in reports]
        for metric, get, scale in (
            ("accuracy", lambda r: r["headline"], 100),
            ("avg turns", lambda r: r["agent"]["avg_turns"], 1),
            ("exec success/call", lambda r: r["agent"]["exec_success_per_call"], 100),
        ):
            values = [get(h) if h else None for h in hits]
            cells = []
            for k, (h, v) in enumerate(zip(hits, values, strict=True)):
                digits = 1 if scale == 100 else 2
                if h is None or v is None:
                    cells.append("–" if h is None else "n/p")
                    continue
                cell = f"{scale * v:.{digits}f}"
                if metric == "accuracy":
                    expected = h["expected"] * h.get("samples_per_item", 1)
                    cell = headline_cell(
                        v, h.get("complete", True), h.get("scored", expected), expected
                    )
                    if h.get("interval"):
                        cell += f" [{_pct(h['interval'][0])}, {_pct(h['interval'][1])}]"
                base, first = values[0], hits[0]
                if k and base is not None and first is not None:
                    mixed = metric == "accuracy" and first.get("complete", True) != h.get(
                        "complete", True
                    )
                    if mixed and not allow_incomplete:
                        cell += " (Δ n/c)"
                        refused = True
                    else:
                        cell += f" ({scale * (v - base):+.{digits}f}"
                        if metric == "accuracy":
                            out = outside(first.get("interval"), h.get("interval"))
                            cell += (
                                "" if out is None else (", outside CIs" if out else ", within CIs")
                            )
                        cell += ")"
                cells.append(cell)
            lines.append(f"| {BENCHMARKS[name].title} | {metric} | " + " | ".join(cells) + " |")
    provenance_rows = []
    for label, rep in zip(labels, reports, strict=True):
        kinds = sorted(
            {
                f"scoring {r.get('scoring', '?')}, judge {r.get('judge') or 'none'}, "
                f"{r['max_turns']} turns, k={r.get('samples_per_item', 1)}, "
                f"profile {r.get('profile', '?')}"
                for r in rep["results"]
            }
        )
        provenance_rows.append(f"- {label}: {'; '.join(kinds)}")
    lines += ["", *provenance_rows]
    if refused:
        lines += [
            "",
            (
                "n/c: no delta between an incomplete (*) and a complete number; rerun the "
                "incomplete run to finish it, or pass --allow-incomplete."
            ),
        ]
    return "\n".join(lines) + "\n"
