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

from codedance.eval.agent_stats import AgentStats, agent_stats
from codedance.eval.metrics import Breakdown, benchmark_metrics
from codedance.eval.spec import BENCHMARKS, BenchmarkSpec, SampleScore
from codedance.types import Task, Trajectory

TABLE1 = ("countbench", "pixmocount", "vstar", "hrbench4k", "hrbench8k")
TABLE2 = ("chartqa", "charxiv", "mathvision", "mathvision_mini", "mathvista", "mathverse", "mathverse_all", "wemath")


@dataclass(frozen=True)
class BenchmarkResult:
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
    agent: AgentStats


@dataclass(frozen=True)
class EvalReport:
    out_dir: str
    model: str
    results: tuple[BenchmarkResult, ...]

    def result(self, name: str) -> BenchmarkResult:
        return next(r for r in self.results if r.name == name)


def build_report(out: Path, settings, tasks: Mapping[str, tuple[BenchmarkSpec, Task]],
                 scores: Mapping[str, SampleScore], records: Mapping[str, Trajectory],
                 failures: Sequence[tuple[str, str]], judge: str | None) -> EvalReport:
    results = []
    failed_keys = {k for k, _ in failures}
    for spec in settings.benchmarks:
        ids = [tid for tid, (s, _) in tasks.items() if s.name == spec.name]
        keys = [f"{tid}#0" for tid in ids]
        mine = [scores[k] for k in keys if k in scores]
        trajs = [records[k] for k in keys if k in records]
        metrics, breakdowns, not_produced = benchmark_metrics(spec, [tasks[i][1] for i in ids], mine)
        difficulty = {tid: dict(tasks[tid][1].metadata).get("difficulty", "all") for tid in ids}
        correct = {s.task_id: s.correct for s in mine}
        episode = settings.episode
        results.append(BenchmarkResult(
            name=spec.name, title=spec.title, split=spec.split,
            profile="no-tools" if settings.no_tools else episode.profile.name,
            max_turns=1 if settings.no_tools else episode.max_turns, no_tools=settings.no_tools, judge=judge,
            expected=len(ids), headline=metrics.get(spec.headline), metrics=tuple(metrics.items()),
            breakdowns=breakdowns, not_produced=not_produced,
            scorers=tuple(sorted(Counter(s.scorer for s in mine).items())),
            answer_sources=tuple(sorted(Counter(s.source for s in mine).items())),
            failed=len([k for k in keys if k in failed_keys and k not in records]),
            agent=agent_stats(trajs, difficulty, correct)))
    return EvalReport(str(out), settings.model, tuple(results))


def report_json(report: EvalReport) -> dict:
    return dataclasses.asdict(report)


def _pct(value: float | None) -> str:
    return "n/p" if value is None else f"{100 * value:.1f}"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [_row(head), _row(["---"] * len(head)), *(_row(r) for r in rows)]


def tables(report: EvalReport) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every table, shared by the Markdown and HTML reports."""
    by = {r.name: r for r in report.results}
    out = []
    for title, names in (("Table 1: perception and counting (accuracy, %)", TABLE1),
                         ("Table 2: charts and math (accuracy, %)", TABLE2)):
        present = [n for n in names if n in by]
        if present:
            out.append((title, ["model", *(by[n].title for n in present)],
                        [[report.model, *(_pct(by[n].headline) for n in present)]]))
    rows = [[r.title, f"{r.agent.avg_turns:.2f}" if r.agent.avg_turns is not None else "–",
             _pct(r.agent.exec_success_per_call), _pct(r.agent.exec_success_per_sample),
             _pct(r.agent.tool_use_share), str(r.agent.samples), str(r.failed)] for r in report.results]
    out.append(("Table 3: turns and execution success",
                ["benchmark", "avg turns", "exec success / call (%)", "exec success / sample, release (%)",
                 "samples using code (%)", "samples", "failed"], rows))
    for r in report.results:
        m = dict(r.metrics)
        if r.name.startswith("hrbench"):
            out.append((f"{r.title}: average over rotations (%)", ["all", "single", "cross"],
                        [[_pct(m.get("avg_all")), _pct(m.get("avg_single")), _pct(m.get("avg_cross"))]]))
        if r.name == "wemath":
            keys = ["score_strict", "score_loose", "IK", "IG", "CM_strict", "CM_loose", "RM_strict", "RM_loose",
                    "S1", "S2", "S3"]
            out.append(("WeMath: four dimensions and steps (%)", keys, [[_pct(m.get(k)) for k in keys]]))
        for field, groups in r.breakdowns:
            if field in ("split", "task", "category", "level", "problem_version"):
                out.append((f"{r.title} by {field} (%)", [g[0] for g in groups],
                            [[f"{_pct(g[1])} (n={g[2]})" for g in groups]]))
    return out


def markdown(report: EvalReport) -> str:
    lines = [f"# Evaluation of {report.model or '(model)'}", ""]
    for title, head, rows in tables(report):
        lines += [f"## {title}", "", *_table(head, rows), ""]
    lines += ["## How each number was made", ""]
    lines += _table(["benchmark", "split", "profile", "max turns", "judge", "scorers", "answer sources", "not produced"],
                    [[r.title, r.split, r.profile, str(r.max_turns), r.judge or "none",
                      ", ".join(f"{k}: {v}" for k, v in r.scorers), ", ".join(f"{k}: {v}" for k, v in r.answer_sources),
                      "; ".join(r.not_produced) or "–"] for r in report.results])
    lines.append("")
    return "\n".join(lines)


def write_report(report: EvalReport, out: str | Path, *, plots: bool = True, viewer: bool = True) -> None:
    from codedance.eval.html import html_page

    out = Path(out)
    (out / "report.json").write_text(json.dumps(report_json(report), indent=1), encoding="utf-8")
    (out / "report.md").write_text(markdown(report), encoding="utf-8")
    images = {}
    if plots:
        from codedance.eval.plots import write_plots

        images = write_plots(report, out / "plots")
    if viewer:
        from codedance.eval.viewer import write_viewer

        write_viewer(out)
    (out / "report.html").write_text(html_page(report, images, viewer=viewer), encoding="utf-8")


def load_report(path: str | Path) -> dict:
    """A ``report.json`` (``path`` may be the run folder)."""
    p = Path(path)
    p = p if p.suffix == ".json" else p / "report.json"
    if not p.is_file():
        raise FileNotFoundError(f"expected {p}: run `codedance eval ... --out {p.parent}` first")
    return json.loads(p.read_text(encoding="utf-8"))


def compare_markdown(reports: Sequence[dict], labels: Sequence[str]) -> str:
    """Headline accuracy, average turns and execution success of several runs, deltas vs the first."""
    names = [n for n in BENCHMARKS if any(r["name"] == n for rep in reports for r in rep["results"])]
    lines = ["| benchmark | metric | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
    for name in names:
        for metric, get, scale in (("accuracy", lambda r: r["headline"], 100),
                                   ("avg turns", lambda r: r["agent"]["avg_turns"], 1),
                                   ("exec success/call", lambda r: r["agent"]["exec_success_per_call"], 100)):
            values = []
            for rep in reports:
                hit = [r for r in rep["results"] if r["name"] == name]
                values.append(get(hit[0]) if hit else None)
            cells = []
            for k, v in enumerate(values):
                cell = "–" if v is None else f"{scale * v:.{1 if scale == 100 else 2}f}"
                if k and v is not None and values[0] is not None:
                    cell += f" ({scale * (v - values[0]):+.{1 if scale == 100 else 2}f})"
                cells.append(cell)
            lines.append(f"| {BENCHMARKS[name].title} | {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
