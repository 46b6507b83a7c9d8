"""Benchmark-level numbers from per-sample scores: accuracy and each benchmark's own metrics.

`benchmark_metrics(spec, tasks, scores)` returns ``(metrics, breakdowns, not_produced)``:

- ``accuracy``: mean verdict; None when any sample's verdict needs a judge that was not given
  (``not_produced`` then says which and how many), with ``accuracy_rule_only`` beside it.
- HR-Bench: per-rotation (``cycle_category``) accuracy of all / single / cross, then their
  average over rotations, as VLMEvalKit's ``report_acc_hrbench``; the headline is the average.
- ChartQA: accuracy per ``split`` (human, augmented) and overall.
- MathVista: by task and by skill; MathVision: by subject and level; MathVerse: by problem
  version and subject; CharXiv: by reasoning category.
- WeMath: the four dimensions over the composite problems (IK, IG, CM, RM; CM and RM strict and
  loose), Score = (N − 0.5·IG − RM − IK)/N with N the composite problems present (525 in the
  full file, VLMEvalKit's constant), and per-step accuracy S1/S2/S3.
All values are fractions in [0, 1]. Only groups complete in the data are counted for WeMath.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence

from codedance.eval.spec import JUDGE_UNREACHABLE, BenchmarkSpec, SampleScore
from codedance.types import Task

Breakdown = tuple[str, tuple[tuple[str, float | None, int], ...]]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _by(
    tasks: dict[str, Task], scores: Sequence[SampleScore], field: str, multi: bool = False
) -> Breakdown:
    groups: dict[str, list[float | None]] = defaultdict(list)
    for s in scores:
        value = dict(tasks[s.task_id].metadata).get(field, "")
        labels = [value]
        if multi and value.startswith("["):
            try:
                labels = [str(x) for x in json.loads(value.replace("'", '"'))]
            except json.JSONDecodeError:
                labels = [value]
        for label in labels:
            groups[label or "(none)"].append(s.value)
    rows = []
    for label in sorted(groups):
        verdicts = groups[label]
        value = (
            None
            if any(v is None for v in verdicts)
            else _mean([v for v in verdicts if v is not None])
        )
        rows.append((label, value, len(verdicts)))
    return field, tuple(rows)


def hrbench_metrics(
    tasks: dict[str, Task], scores: Sequence[SampleScore]
) -> tuple[dict[str, float | None], Breakdown]:
    cycles: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in scores:
        m = dict(tasks[s.task_id].metadata)
        hit = s.value or 0.0
        cycles[m.get("cycle", "")]["all"].append(hit)
        cycles[m.get("cycle", "")][m.get("category", "")].append(hit)
    rows, sums = [], defaultdict(list)
    for cycle in sorted(cycles):
        for kind, hits in sorted(cycles[cycle].items()):
            acc = sum(hits) / len(hits)
            rows.append((f"{cycle}:{kind}", acc, len(hits)))
            sums[kind].append(acc)
    averages = {f"avg_{kind}": sum(v) / len(v) for kind, v in sums.items()}
    return averages, ("cycle", tuple(rows))


def wemath_metrics(
    tasks: dict[str, Task], scores: Sequence[SampleScore]
) -> dict[str, float | None]:
    joker: dict[tuple[str, str], bool] = {}
    for s in scores:
        m = dict(tasks[s.task_id].metadata)
        joker[(m.get("ID", ""), m.get("key", ""))] = bool(s.correct)
    ids = {i for i, _ in joker}
    counts = defaultdict(int)
    singles, multi = [], {2: [], 3: []}
    n = 0
    for steps in (2, 3):
        for i in sorted(ids):
            parts = [joker.get((i, f"{steps}steps_{k}")) for k in range(1, steps + 1)]
            whole = joker.get((i, f"{steps}steps_multi"))
            if whole is None or any(p is None for p in parts):
                continue
            n += 1
            singles += [float(p) for p in parts]
            multi[steps].append(float(whole))
            all_right, any_right = all(parts), any(parts)
            counts["IG"] += all_right and not whole
            counts["IK"] += (not all_right) and not whole
            counts["CM_strict"] += all_right and whole
            counts["CM_loose"] += any_right and whole
            counts["RM_strict"] += (not all_right) and whole
            counts["RM_loose"] += (not any_right) and whole
    if n == 0:
        return {"composite_problems": 0.0}
    out: dict[str, float | None] = {"composite_problems": float(n)}
    for mode in ("strict", "loose"):
        out[f"score_{mode}"] = (n - 0.5 * counts["IG"] - counts[f"RM_{mode}"] - counts["IK"]) / n
        cm_rm = counts[f"CM_{mode}"] + counts[f"RM_{mode}"]
        out[f"CM_{mode}"] = counts[f"CM_{mode}"] / n
        out[f"RM_{mode}"] = counts[f"RM_{mode}"] / cm_rm if cm_rm else None
    out["IK"] = counts["IK"] / n
    out["IG"] = counts["IG"] / n
    out["S1"], out["S2"], out["S3"] = _mean(singles), _mean(multi[2]), _mean(multi[3])
    return out


BREAKDOWNS = {
    "chartqa": (("split", False),),
    "mathvista": (("task", False), ("skills", True)),
    "mathvision": (("category", False), ("level", False)),
    "mcq": (("category", False),),
    "mathverse": (("problem_version", False), ("subject", False)),
    "charxiv": (("category", False),),
    "tasks": (("data_source", False),),
}


def benchmark_metrics(
    spec: BenchmarkSpec, tasks: Sequence[Task], scores: Sequence[SampleScore]
) -> tuple[dict[str, float | None], tuple[Breakdown, ...], tuple[str, ...]]:
    """(metrics, breakdowns, not_produced) of one benchmark; see the module docstring."""
    by_id = {t.id: t for t in tasks}
    pending = [s for s in scores if s.correct is None]
    metrics: dict[str, float | None] = {
        "samples": float(len(scores)),
        "accuracy": None if pending else _mean([s.value or 0.0 for s in scores]),
        "accuracy_rule_only": _mean([float(s.rule_correct) for s in scores]),
    }
    not_produced = ()
    if pending:
        unjudged = [s for s in pending if s.pending.startswith(JUDGE_UNREACHABLE)]
        steps = sorted({s.pending for s in pending if s not in unjudged})
        parts = []
        if unjudged:  # --judge was given: telling the user to pass it would mislead
            parts.append(
                f"accuracy: {len(unjudged)} of {len(scores)} samples were not judged: "
                "the judge did not answer "
                f"({unjudged[0].pending.removeprefix(JUDGE_UNREACHABLE).strip(' ()')}); "
                "start it and rerun the same command"
            )
        if steps:
            parts.append(
                f"accuracy: {len(pending) - len(unjudged)} of {len(scores)} samples need a judge "
                f"({', '.join(steps)}); rerun with --judge URL"
            )
        not_produced = tuple(parts)
    breakdowns = [
        _by(by_id, scores, field, multi) for field, multi in BREAKDOWNS.get(spec.scorer, ())
    ]
    if spec.scorer == "hrbench":
        averages, cycle_rows = hrbench_metrics(by_id, scores)
        metrics.update(averages)
        metrics["accuracy"] = averages.get("avg_all")
        breakdowns.append(cycle_rows)
    if spec.scorer == "wemath":
        metrics.update(wemath_metrics(by_id, scores))
    if spec.scorer == "countbench":
        strict = [s for s in scores if s.answer is not None]
        metrics["accuracy_strict_count"] = _mean(
            [float(dict(s.extras).get("strict_count") == "True") for s in strict]
            + [0.0] * (len(scores) - len(strict))
        )
    return metrics, tuple(breakdowns), not_produced
