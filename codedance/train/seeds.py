"""The ablation over seeds (``codedance train --ablation --seeds N``) and its summary.

`run_seeds(config, seeds, log)`: for each seed k in 0..N-1, one SFT with ``sft.seed`` k (the
model's initialization and the data order) into ``sft-s<k>/`` (a pipeline folder of its own,
`pipeline.run_sft_stage`; the teacher's episodes, which do not depend on the seed, are copied from
seed 0), the first-turn push of every profile of ``ablation_profiles`` on that SFT policy's
rollouts (`codedance.train.probe`, ``sft-s<k>/pushes.json``), then GRPO from it under each
profile with ``grpo.seed`` k (the task order and the sampling) into
``sft-s<k>/grpo-<profile>-s<k>/``, held-out metrics in ``sft-s<k>/eval/``. Seed-major, so a
stopped run has the most profiles with several seeds. Every stage is skipped when its output is
on disk, so rerunning the command resumes; the wall and CPU seconds of each stage that ran are
appended to ``timings.jsonl``. The intervals therefore cover the SFT's randomness and RL's.

`write_summary(out_dir)` reads the held-out metrics (``sft-s<k>/eval/*.json``, or the one-SFT
layout ``eval/*.json``), the pushes and ``grpo-*-s*/metrics.jsonl`` and writes ``ablation.json``
(per stage and metric: the seeds' values, mean and 95 % Student-t interval), ``ablation.md`` (the
SFT seeds with their p_copy, the held-out table, the pushes before GRPO next to the Δp_direct
measured after, the paper's claims this testbed tests with a verdict each, timings) and
``curves.png`` (the Figure 4 / 9 quantities over GRPO steps, mean over seeds per profile). A
claim (`claims`) is decided on per-seed values: it holds only when its 95 % interval over seeds
is on the claimed side (so never with one seed). Accuracy claims count only the seeds whose SFT
learned to copy the printed count (p_copy/hard ≥ ``COPY_WORKS``): without the copy a call cannot
raise accuracy, so such a claim says nothing about the reward there.
Not handled: running seeds in parallel (one process, one stage after the other).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import replace
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


COPY_WORKS = 0.3  # p_copy/hard after SFT from which a seed's accuracy claims count
PROBE_BATCHES = 8  # GRPO batches of rollouts the pushes are measured on (8 × 6 × 8 = 384)


def grpo_name(profile: str, seed: int) -> str:
    return f"{profile}-s{seed}"


def seed_config(config: PipelineConfig, seed: int) -> PipelineConfig:
    """The pipeline of SFT seed `seed`: its own folder ``sft-s<seed>`` and ``sft.seed``."""
    return replace(
        config,
        out_dir=str(Path(config.out_dir) / f"sft-s{seed}"),
        sft=replace(config.sft, seed=seed),
    )


def run_seeds(
    config: PipelineConfig, seeds: int, log: Log = print, publish: str | Path | None = None
) -> dict[str, Any]:
    """Per seed: SFT, pushes, every profile's GRPO (see the module docstring); returns
    `write_summary`'s data, which is also copied into `publish` after every stage."""
    from codedance.train.pipeline import run_grpo_stage, run_sft_stage
    from codedance.train.probe import probe_pushes

    if seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {seeds}")
    out = Path(config.out_dir)
    timings = out / "timings.jsonl"
    stages: list[tuple[int, str, Path, Callable[[], Any]]] = []
    for seed in range(seeds):
        cfg = seed_config(config, seed)
        sub = Path(cfg.out_dir)

        def sft(cfg: PipelineConfig = cfg) -> None:
            share_teacher(out / "sft-s0" / "teacher", cfg)
            run_sft_stage(cfg, log)

        stages.append((seed, f"sft-s{seed}", sub / "eval" / "after-sft.json", sft))
        stages.append(
            (
                seed,
                f"pushes-s{seed}",
                sub / "pushes.json",
                lambda c=cfg, s=seed: probe_pushes(
                    c, config.ablation_profiles, batches=PROBE_BATCHES, seed=s, log=log
                ),
            )
        )
        for profile in config.ablation_profiles:
            name = grpo_name(profile, seed)
            stage = replace(config.grpo, profile=profile, profile_overrides=(), seed=seed)
            stages.append(
                (
                    seed,
                    name,
                    sub / "eval" / f"after-grpo-{name}.json",
                    lambda c=cfg, n=name, s=stage: run_grpo_stage(c, n, s, log),
                )
            )
    for seed, name, done, run in stages:
        if done.exists():
            continue
        started, cpu = time.monotonic(), _cpu_seconds()
        run()
        append_jsonl(
            timings,
            {
                "seed": seed,
                "stage": name,
                "seconds": round(time.monotonic() - started, 1),
                "cpu_seconds": round(_cpu_seconds() - cpu, 1),
            },
        )
        write_summary(out, publish)
    return write_summary(out, publish)


def share_teacher(teacher: Path, config: PipelineConfig) -> None:
    """Copy the teacher's episodes (`teacher`, which no seed changes) into ``config.out_dir``
    unless it has its own, claiming that folder for `config`'s run first (a folder holding
    anything must be a run's, `pipeline.claim_run`)."""
    import shutil

    from codedance.train.pipeline import claim_run

    target = Path(config.out_dir) / "teacher"
    if teacher.exists() and not target.exists() and teacher != target:
        claim_run(config)
        shutil.copytree(teacher, target)


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its waited-for children (the sandbox's)."""
    import os

    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


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
    ``after-grpo-<profile>`` seed k; the SFT stages are seed k in ``sft-s<k>/`` (seed 0 in the
    one-SFT layout, ``eval/`` directly under `out`)."""
    table: dict[str, dict[int, dict[str, float]]] = {}
    for path in sorted(out.glob("eval/*.json")) + sorted(out.glob("sft-s*/eval/*.json")):
        stage, _, seed = path.stem.rpartition("-s")
        if not (stage.startswith("after-grpo-") and seed.isdigit()):
            folder = path.parent.parent
            stage, seed = path.stem, "0" if folder == out else folder.name.removeprefix("sft-s")
        table.setdefault(stage, {})[int(seed)] = json.loads(path.read_text())
    return table


def _pushes(out: Path) -> dict[int, dict[str, dict[str, dict[str, float]]]]:
    """SFT seed -> `codedance.train.probe.probe_pushes`'s result."""
    return {
        int(path.parent.name.removeprefix("sft-s")): json.loads(path.read_text())
        for path in sorted(out.glob("sft-s*/pushes.json"))
        if path.parent.name.removeprefix("sft-s").isdigit()
    }


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and value is not None else math.nan


def claims(evals: dict[str, dict[int, dict[str, float]]]) -> list[dict[str, Any]]:
    """The paper's claims this testbed can test, each on per-seed differences of held-out
    metrics: (claim, paper's words, difference measured, its mean and 95 % interval, verdict)."""

    sft_runs = evals.get("after-sft", {})
    copying: set[int] | None = {
        s for s, m in sft_runs.items() if _num(m.get("p_copy/hard")) >= COPY_WORKS
    }
    if len(sft_runs) == 1 and copying:  # the one-SFT layout: its copy serves every GRPO seed
        copying = None

    def diff(
        stage_a: str, key_a: str, stage_b: str, key_b: str, only: set[int] | None = None
    ) -> list[float]:
        """Per seed (of `only`, when given): a − b; a stage with one value (the one-SFT layout)
        is compared with every seed."""
        a, b = evals.get(stage_a, {}), evals.get(stage_b, {})
        if len(b) == 1 and stage_b in ("after-sft", "before-sft"):
            b = {s: next(iter(b.values())) for s in a}
        if len(a) == 1 and stage_a in ("after-sft", "before-sft"):
            a = {s: next(iter(a.values())) for s in b}
        seeds = sorted(set(a) & set(b) & (set(a) if only is None else only))
        vals = [_num(a[s].get(key_a)) - _num(b[s].get(key_b)) for s in seeds]
        return [v for v in vals if not math.isnan(v)]

    def gap(stage: str) -> dict[int, float]:
        return {
            s: _num(m.get("p_direct/easy")) - _num(m.get("p_direct/hard"))
            for s, m in evals.get(stage, {}).items()
        }

    rows = []

    def claim(
        text: str,
        paper: str,
        what: str,
        values: list[float],
        holds: Callable[[float, float, float], bool],
        untested: str = "not run",
    ) -> None:
        if not values:
            rows.append(
                {"claim": text, "paper": paper, "measured": what, "n": 0, "verdict": untested}
            )
            return
        mean, low, high = interval(values)
        ok = len(values) >= 2 and holds(mean, low, high)
        rows.append(
            {
                "claim": text,
                "paper": paper,
                "measured": what,
                "n": len(values),
                "mean": mean,
                "low": low,
                "high": high,
                "verdict": "holds" if ok else "does not hold",
            }
        )

    p, o, sft = "after-grpo-paper", "after-grpo-outcome-only", "after-sft"
    claim(
        "R_BAT: calls on easy items fall well below calls on hard items",
        "R_BAT penalizes redundant calls and rewards selective, high-impact ones (§4.4, Table 4)",
        "p_direct/easy − p_direct/hard after GRPO paper (≥ 0.15, interval above 0)",
        diff(p, "p_direct/easy", p, "p_direct/hard"),
        lambda m, lo, hi: m >= 0.15 and lo > 0,
    )
    paper_gap, outcome_gap = gap(p), gap(o)
    claim(
        "R_BAT: the easy − hard call gap is wider than outcome-only's",
        "the gap comes from R_BAT's terms, not from GRPO on the outcome alone (§4.4)",
        "(p_direct/easy − p_direct/hard) paper − outcome-only (interval above 0)",
        [paper_gap[s] - outcome_gap[s] for s in sorted(set(paper_gap) & set(outcome_gap))],
        lambda m, lo, hi: lo > 0,
    )
    claim(
        "R_BAT: calls on hard items do not fall",
        "rewards selective, high-impact calls; μ-dependent scaling d(μ) (§3.1)",
        "p_direct/hard after GRPO paper − after SFT (mean ≤ +0.05)",
        diff(p, "p_direct/hard", sft, "p_direct/hard"),
        lambda m, lo, hi: m <= 0.05,
    )
    claim(
        "R_BAT: calls on easy items fall from the SFT policy's",
        "suppresses unnecessary calls when the group already performs well (§3.1)",
        "p_direct/easy after GRPO paper − after SFT (interval above 0)",
        diff(p, "p_direct/easy", sft, "p_direct/easy"),
        lambda m, lo, hi: lo > 0,
    )
    claim(
        "R_BAT: hard accuracy holds",
        "keeps accuracy high while restraining unnecessary tool usage (Fig. 9)",
        "accuracy/hard after GRPO paper − after SFT (mean ≥ −0.05; seeds whose SFT copies "
        f"the count, p_copy/hard ≥ {COPY_WORKS})",
        diff(p, "accuracy/hard", sft, "accuracy/hard", only=copying),
        lambda m, lo, hi: m >= -0.05,
        untested="not tested (no seed's SFT copies the count)"
        if evals.get(p) and copying is not None
        else "not run",
    )
    claim(
        "outcome-only: calls on easy items stay near the SFT policy's",
        "the issue's expectation; the paper: outcome-only GRPO under-utilizes tools (§4.4)",
        "p_direct/easy after GRPO outcome-only − after SFT (|mean| ≤ 0.05)",
        diff(o, "p_direct/easy", sft, "p_direct/easy"),
        lambda m, lo, hi: abs(m) <= 0.05,
    )
    claim(
        "outcome-only leaves more calls on easy items than R_BAT",
        "R_BAT avoids unnecessary tool use; outcome-only has no term for it (§4.4)",
        "p_direct/easy paper − outcome-only (interval above 0)",
        diff(p, "p_direct/easy", o, "p_direct/easy"),
        lambda m, lo, hi: lo > 0,
    )
    claim(
        "w/o R_turn: execution success is lower",
        "removing the turn-level reward severely degrades the execution success rate (§4.4)",
        "exec_success (sampled) paper − paper-no-turn (interval above 0)",
        diff(p, "exec_success", "after-grpo-paper-no-turn", "exec_success"),
        lambda m, lo, hi: lo > 0,
    )
    claim(
        "w/o R_turn: the failing program stays likelier",
        "(the mechanism behind the line above: R_turn penalizes the failing turn)",
        "p_bug paper-no-turn − paper (interval above 0)",
        diff("after-grpo-paper-no-turn", "p_bug", p, "p_bug"),
        lambda m, lo, hi: lo > 0,
    )
    claim(
        "δ = 0: more tool calls than δ = 0.2",
        "δ = 0 removes suppression ... substantially more tool calls with similar accuracy (Fig. 9)",
        "p_direct paper − paper-delta0 (interval above 0)",
        diff(p, "p_direct", "after-grpo-paper-delta0", "p_direct"),
        lambda m, lo, hi: lo > 0,
    )
    claim(
        "deepeyes: more calls on easy items than R_BAT",
        "tool overuse on trivial problems, more turns without accuracy gains (§4.4)",
        "p_direct/easy paper − deepeyes (interval above 0)",
        diff(p, "p_direct/easy", "after-grpo-deepeyes", "p_direct/easy"),
        lambda m, lo, hi: lo > 0,
    )
    return rows


def _fmt(mean: float, low: float, high: float) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:.2f}" if math.isnan(low) else f"{mean:.2f} [{low:.2f}, {high:.2f}]"


def write_summary(out_dir: str | Path, publish: str | Path | None = None) -> dict[str, Any]:
    """Write ``ablation.json``, ``ablation.md`` and ``curves.png`` (see the module docstring),
    and copy them into `publish` when given."""
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
    moves = push_and_move(evals, _pushes(out))
    data = {"stages": stages, "claims": checked, "pushes": moves, "timings": timings}
    (out / "ablation.json").write_text(json.dumps(data, indent=1))
    lines = _sft_seed_lines(evals.get("after-sft", {}))
    lines += [
        "| stage | seeds | " + " | ".join(METRICS) + " |",
        "|" + " --- |" * (len(METRICS) + 2),
    ]
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
    if moves:
        lines += [
            "",
            (
                "First-turn push on the call logit before GRPO (`codedance.train.probe`; > 0: calls "
                "rise) and the change of p_direct measured after GRPO (after − the seed's SFT; > 0: "
                "calls fell), mean [95 % interval] over seeds:"
            ),
            "",
            "| profile | push easy | push hard | Δp_direct easy | Δp_direct hard |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name, row in moves.items():
            cells = [
                _fmt(*interval(row[k])) if row[k] else "–"
                for k in ("push/easy", "push/hard", "dp_direct/easy", "dp_direct/hard")
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if timings:
        lines += ["", "| seed | stage | wall (s) | CPU (s) |", "| --- | --- | --- | --- |"]
        lines += [
            f"| {t['seed']} | {t['stage']} | {t['seconds']:.0f} | {t['cpu_seconds']:.0f} |"
            if "cpu_seconds" in t
            else f"| {t['seed']} | {t['stage']} | {t['seconds']:.0f} | – |"
            for t in timings
        ]
    (out / "ablation.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _curves(out)
    if publish is not None:
        import shutil

        Path(publish).mkdir(parents=True, exist_ok=True)
        for name in ("ablation.md", "ablation.json", "curves.png"):
            if (out / name).exists():
                shutil.copyfile(out / name, Path(publish) / name)
    return data


def push_and_move(
    evals: dict[str, dict[int, dict[str, float]]],
    pushes: dict[int, dict[str, dict[str, dict[str, float]]]],
) -> dict[str, dict[str, list[float]]]:
    """profile -> ``push/<label>`` (per SFT seed, before GRPO) and ``dp_direct/<label>`` (per
    seed: after that profile's GRPO − after the seed's SFT)."""
    sft = evals.get("after-sft", {})
    names = list(dict.fromkeys([n for per in pushes.values() for n in per]))
    names += sorted(
        s.removeprefix("after-grpo-")
        for s in evals
        if s.startswith("after-grpo-") and s.removeprefix("after-grpo-") not in names
    )
    out: dict[str, dict[str, list[float]]] = {}
    for name in names:
        row: dict[str, list[float]] = {}
        after = evals.get(f"after-grpo-{name}", {})
        for label in ("easy", "hard"):
            row[f"push/{label}"] = [
                v
                for seed in sorted(pushes)
                if not math.isnan(v := _num(pushes[seed].get(name, {}).get(label, {}).get("push")))
            ]
            key = f"p_direct/{label}"
            base = (lambda s: sft[s]) if len(sft) > 1 else (lambda s: next(iter(sft.values())))
            row[f"dp_direct/{label}"] = [
                v
                for seed in sorted(after)
                if (seed in sft or len(sft) == 1)
                and not math.isnan(v := _num(after[seed].get(key)) - _num(base(seed).get(key)))
            ]
        out[name] = row
    return out


def _sft_seed_lines(sft: dict[int, dict[str, float]]) -> list[str]:
    """The SFT seeds with the first-turn probabilities and whether the copy was learned."""
    if not sft:
        return []
    lines = [
        (
            "| SFT seed | p_copy/hard | copy learned (≥ "
            f"{COPY_WORKS}) | p_direct/easy | p_direct/hard | p_bug | accuracy/hard |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for seed, m in sorted(sft.items()):
        copy = _num(m.get("p_copy/hard"))
        cells = [f"{_num(m.get(k)):.2f}" for k in ("p_direct/easy", "p_direct/hard", "p_bug")]
        lines.append(
            f"| {seed} | {copy:.3f} | {'yes' if copy >= COPY_WORKS else 'no'} | "
            + " | ".join(cells)
            + f" | {_num(m.get('accuracy/hard')):.2f} |"
        )
    return lines + [""]


def _curves(out: Path) -> None:
    """``curves.png``: each CURVES quantity over GRPO steps, the mean over seeds per profile."""
    runs: dict[str, list[list[dict]]] = {}
    for path in sorted(out.glob("grpo-*-s*/metrics.jsonl")) + sorted(
        out.glob("sft-s*/grpo-*-s*/metrics.jsonl")
    ):
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
