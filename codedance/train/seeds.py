"""The ablation over seeds (``codedance train --ablation --seeds N``) and its summary.

`run_seeds(config, seeds, log)`: SFT once (`pipeline.run_sft_stage`), then GRPO from it under each
profile of ``ablation_profiles`` for seeds 0..N-1 (``grpo.seed``: the task order and the
sampling), into ``grpo-<profile>-s<k>/`` with held-out metrics in
``eval/after-grpo-<profile>-s<k>.json`` (`pipeline.run_grpo_stage`). Seed-major: every profile's
seed 0, then every profile's seed 1, ..., so a stopped run has the most profiles with several
seeds. Every stage is skipped when its output is on disk, so rerunning the command resumes; the
wall time of each stage that ran is appended to ``timings.jsonl``. The intervals therefore cover
RL's randomness from one SFT checkpoint, not the SFT's (the CPU budget of one SFT per seed).

`write_summary(out_dir)` reads ``eval/*.json`` and ``grpo-*-s*/metrics.jsonl`` and writes
``ablation.json`` (per stage and metric: the seeds' values, mean and 95 % Student-t interval),
``ablation.md`` (the held-out table, the paper's claims this testbed tests with a verdict each,
wall times) and ``curves.png`` (the Figure 4 / 9 quantities over GRPO steps, mean over seeds per
profile). A claim (`claims`) is decided on per-seed values: it holds only when its 95 % interval
over seeds is on the claimed side (so never with one seed). Profiles with fewer seeds done
have fewer values (the table says how many).
Not handled: running seeds in parallel (one process, one stage after the other); SFT seeds.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from codedance.records import append_jsonl, read_jsonl
from codedance.train.config import PipelineConfig

Log = Callable[[str], None]
# two-sided 95 % Student-t quantiles by degrees of freedom (scipy is not a dependency)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
METRICS = (
    "accuracy",
    "accuracy/easy",
    "accuracy/hard",
    "accuracy_with_tool/hard",
    "calls",
    "calls/easy",
    "calls/hard",
    "exec_success",
    "p_direct/easy",
    "p_direct/hard",
    "p_bug",
    "p_copy/hard",
)
CURVES = (
    "calls/easy",
    "calls/hard",
    "accuracy/easy",
    "accuracy/hard",
    "exec_success",
    "reward/total",
)


def grpo_name(profile: str, seed: int) -> str:
    return f"{profile}-s{seed}"


def run_seeds(config: PipelineConfig, seeds: int, log: Log = print) -> dict[str, Any]:
    """SFT, then every (seed, profile) GRPO run (see the module docstring); returns `write_summary`'s data."""
    from codedance.train.pipeline import run_grpo_stage, run_sft_stage

    if seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {seeds}")
    out = Path(config.out_dir)
    timings = out / "timings.jsonl"
    stages: list[tuple[int, str, Path, Callable[[], Any]]] = [
        (0, "sft", out / "eval" / "after-sft.json", lambda: run_sft_stage(config, log))
    ]
    for seed in range(seeds):
        for profile in config.ablation_profiles:
            name = grpo_name(profile, seed)
            stage = replace(config.grpo, profile=profile, profile_overrides=(), seed=seed)
            stages.append(
                (
                    seed,
                    name,
                    out / "eval" / f"after-grpo-{name}.json",
                    lambda n=name, s=stage: run_grpo_stage(config, n, s, log),
                )
            )
    for seed, name, done, run in stages:
        if done.exists():
            continue
        started = time.monotonic()
        run()
        append_jsonl(
            timings, {"seed": seed, "stage": name, "seconds": round(time.monotonic() - started, 1)}
        )
        write_summary(out)
    return write_summary(out)


def interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95 % Student-t interval of the mean (NaN bounds for one value).

    >>> [round(x, 3) for x in interval([0.1, 0.2, 0.3])]
    [0.2, -0.048, 0.448]
    """
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = T975.get(len(values) - 1, 1.96) * sd / math.sqrt(len(values))
    return mean, mean - half, mean + half


def _evals(out: Path) -> dict[str, dict[int, dict[str, float]]]:
    """stage -> seed -> held-out metrics; ``after-grpo-<profile>-s<k>`` is stage
    ``after-grpo-<profile>`` seed k; the SFT stages count as seed 0 (one checkpoint)."""
    table: dict[str, dict[int, dict[str, float]]] = {}
    for path in sorted(out.glob("eval/*.json")):
        stage, _, seed = path.stem.rpartition("-s")
        if not (stage.startswith("after-grpo-") and seed.isdigit()):
            stage, seed = path.stem, "0"
        table.setdefault(stage, {})[int(seed)] = json.loads(path.read_text())
    return table


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and value is not None else math.nan


def _above_zero(mean: float, low: float, high: float) -> bool:
    return low > 0


@dataclass(frozen=True)
class Claim:
    """A claim of the paper, tested on per-seed differences ``a − b`` of held-out metrics, each
    a (stage, metric) pair; ``holds`` decides on (mean, low, high) of the 95 % interval."""

    text: str
    paper: str
    measured: str
    a: tuple[str, str]
    b: tuple[str, str]
    holds: Callable[[float, float, float], bool] = _above_zero


PAPER, OUTCOME, SFT = "after-grpo-paper", "after-grpo-outcome-only", "after-sft"
CLAIMS = (
    Claim(
        "R_BAT: calls on easy items fall well below calls on hard items",
        "R_BAT penalizes redundant calls and rewards selective, high-impact ones (§4.4, Table 4)",
        "p_direct/easy − p_direct/hard after GRPO paper (≥ 0.1, interval above 0)",
        (PAPER, "p_direct/easy"),
        (PAPER, "p_direct/hard"),
        lambda m, lo, hi: m >= 0.1 and lo > 0,
    ),
    Claim(
        "R_BAT: calls on easy items fall from the SFT policy's",
        "suppresses unnecessary calls when the group already performs well (§3.1)",
        "p_direct/easy after GRPO paper − after SFT (interval above 0)",
        (PAPER, "p_direct/easy"),
        (SFT, "p_direct/easy"),
    ),
    Claim(
        "R_BAT: hard accuracy holds",
        "keeps accuracy high while restraining unnecessary tool usage (Fig. 9)",
        "accuracy/hard after GRPO paper − after SFT (mean ≥ −0.05)",
        (PAPER, "accuracy/hard"),
        (SFT, "accuracy/hard"),
        lambda m, lo, hi: m >= -0.05,
    ),
    Claim(
        "outcome-only: calls on easy items stay near the SFT policy's",
        "the issue's expectation; the paper: outcome-only GRPO under-utilizes tools (§4.4)",
        "p_direct/easy after GRPO outcome-only − after SFT (|mean| ≤ 0.05)",
        (OUTCOME, "p_direct/easy"),
        (SFT, "p_direct/easy"),
        lambda m, lo, hi: abs(m) <= 0.05,
    ),
    Claim(
        "outcome-only leaves more calls on easy items than R_BAT",
        "R_BAT avoids unnecessary tool use; outcome-only has no term for it (§4.4)",
        "p_direct/easy paper − outcome-only (interval above 0)",
        (PAPER, "p_direct/easy"),
        (OUTCOME, "p_direct/easy"),
    ),
    Claim(
        "w/o R_turn: execution success is lower",
        "removing the turn-level reward severely degrades the execution success rate (§4.4)",
        "exec_success (sampled) paper − paper-no-turn (interval above 0)",
        (PAPER, "exec_success"),
        ("after-grpo-paper-no-turn", "exec_success"),
    ),
    Claim(
        "w/o R_turn: the failing program stays likelier",
        "(the mechanism behind the line above: R_turn penalizes the failing turn)",
        "p_bug paper-no-turn − paper (interval above 0)",
        ("after-grpo-paper-no-turn", "p_bug"),
        (PAPER, "p_bug"),
    ),
    Claim(
        "δ = 0: more tool calls than δ = 0.2",
        "δ = 0 removes suppression ... substantially more tool calls with similar accuracy (Fig. 9)",
        "p_direct paper − paper-delta0 (interval above 0)",
        (PAPER, "p_direct"),
        ("after-grpo-paper-delta0", "p_direct"),
    ),
    Claim(
        "deepeyes: more calls on easy items than R_BAT",
        "tool overuse on trivial problems, more turns without accuracy gains (§4.4)",
        "p_direct/easy paper − deepeyes (interval above 0)",
        (PAPER, "p_direct/easy"),
        ("after-grpo-deepeyes", "p_direct/easy"),
    ),
)


def claims(evals: dict[str, dict[int, dict[str, float]]]) -> list[dict[str, Any]]:
    """The paper's claims this testbed can test (`CLAIMS`), each on per-seed differences of
    held-out metrics: (claim, paper's words, difference measured, its mean and 95 % interval,
    verdict)."""

    def diff(stage_a: str, key_a: str, stage_b: str, key_b: str) -> list[float]:
        """Per seed: a − b; a stage with one value (the SFT) is compared with every seed."""
        a, b = evals.get(stage_a, {}), evals.get(stage_b, {})
        if len(b) == 1 and stage_b in ("after-sft", "before-sft"):
            b = {s: next(iter(b.values())) for s in a}
        vals = [_num(a[s].get(key_a)) - _num(b[s].get(key_b)) for s in sorted(set(a) & set(b))]
        return [v for v in vals if not math.isnan(v)]

    rows = []
    for claim in CLAIMS:
        values = diff(*claim.a, *claim.b)
        row = {"claim": claim.text, "paper": claim.paper, "measured": claim.measured}
        if not values:
            rows.append({**row, "n": 0, "verdict": "not run"})
            continue
        mean, low, high = interval(values)
        ok = len(values) >= 2 and claim.holds(mean, low, high)
        verdict = "holds" if ok else "does not hold"
        rows.append(
            {**row, "n": len(values), "mean": mean, "low": low, "high": high, "verdict": verdict}
        )
    return rows


def _fmt(mean: float, low: float, high: float) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:.2f}" if math.isnan(low) else f"{mean:.2f} [{low:.2f}, {high:.2f}]"


def write_summary(out_dir: str | Path) -> dict[str, Any]:
    """Write ``ablation.json``, ``ablation.md`` and ``curves.png`` (see the module docstring)."""
    out = Path(out_dir)
    evals = _evals(out)
    order = ["before-sft", "after-sft"] + sorted(s for s in evals if s.startswith("after-grpo-"))
    stages = {}
    for stage in [s for s in order if s in evals]:
        per_seed = evals[stage]
        stages[stage] = {
            "seeds": sorted(per_seed),
            **{
                key: dict(zip(("mean", "low", "high"), interval(vals), strict=True), values=vals)
                for key in METRICS
                if (
                    vals := [
                        v
                        for s in sorted(per_seed)
                        if not math.isnan(v := _num(per_seed[s].get(key)))
                    ]
                )
            },
        }
    checked = claims(evals)
    timings = read_jsonl(out / "timings.jsonl")
    data = {"stages": stages, "claims": checked, "timings": timings}
    (out / "ablation.json").write_text(json.dumps(data, indent=1))
    lines = ["| stage | seeds | " + " | ".join(METRICS) + " |", "|" + " --- |" * (len(METRICS) + 2)]
    for stage, row in stages.items():
        cells = [
            _fmt(row[k]["mean"], row[k]["low"], row[k]["high"]) if k in row else "–"
            for k in METRICS
        ]
        lines.append(f"| {stage} | {len(row['seeds'])} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| claim | paper | measured | seeds | mean [95 % interval] | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in checked:
        value = _fmt(c["mean"], c["low"], c["high"]) if c["n"] else "–"
        lines.append(
            f"| {c['claim']} | {c['paper']} | {c['measured']} | {c['n']} | {value} | **{c['verdict']}** |"
        )
    if timings:
        lines += ["", "| seed | stage | wall (s) |", "| --- | --- | --- |"]
        lines += [f"| {t['seed']} | {t['stage']} | {t['seconds']:.0f} |" for t in timings]
    (out / "ablation.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _curves(out)
    return data


def _curves(out: Path) -> None:
    """``curves.png``: each CURVES quantity over GRPO steps, the mean over seeds per profile."""
    runs: dict[str, list[list[dict]]] = {}
    for path in sorted(out.glob("grpo-*-s*/metrics.jsonl")):
        runs.setdefault(path.parent.name.removeprefix("grpo-").rpartition("-s")[0], []).append(
            read_jsonl(path)
        )
    if not runs:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), squeeze=False)
    for ax, key in zip(axes.flat, CURVES, strict=True):
        for name, seeds in sorted(runs.items()):
            by_step: dict[int, list[float]] = {}
            for rows in seeds:
                for r in rows:
                    if not math.isnan(v := _num(r.get(key))):
                        by_step.setdefault(int(r["step"]), []).append(v)
            steps = sorted(by_step)
            ax.plot(
                steps,
                [sum(by_step[s]) / len(by_step[s]) for s in steps],
                label=f"{name} ({len(seeds)})",
            )
        ax.set_title(f"{key} (training batch, mean over seeds)", fontsize=9)
        ax.set_xlabel("GRPO step")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=80)
    plt.close(fig)
