"""A trained policy's first-turn push per reward profile, before any GRPO step
(`probe_pushes`): does a profile push the call-or-answer decision up or down on each difficulty?

The policy in ``<out_dir>/sft/final`` samples ``batches`` GRPO batches (``grpo.prompts_per_step``
prompts × ``grpo.group_size`` rollouts, `GRPOTrainer.collect`, no update); every profile's rewards
and advantages are then computed on those same rollouts (`compute_batch_rewards`) and
`codedance.advantages.first_turn_pushes` splits the first turn's advantage by whether it calls.
A push > 0 means GRPO's first step raises the call probability under that label. Cached in
``<out_dir>/pushes.json``; ``--ablation --seeds N`` writes it for every SFT seed before its GRPO
runs, and ``benchmarks/probe_pushes.py --policy OUT_DIR`` prints it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from codedance.train.config import PipelineConfig

Log = Callable[[str], None]


def probe_pushes(
    config: PipelineConfig,
    profiles: Sequence[str],
    *,
    batches: int = 8,
    seed: int = 0,
    log: Log = print,
) -> dict[str, dict[str, dict[str, float]]]:
    """profile -> difficulty -> {n, p_call, delta, delta_seq, delta_turn, push} (see the module
    docstring); read from ``pushes.json`` when it is there."""
    out = Path(config.out_dir)
    cached = out / "pushes.json"
    if cached.exists():
        return json.loads(cached.read_text())
    final = out / "sft" / "final"
    if not (final / "config.json").exists():
        raise FileNotFoundError(f"{final} holds no policy; run the SFT stage into {out} first")
    from codedance.advantages import first_turn_pushes
    from codedance.rewards import compute_batch_rewards
    from codedance.train.device import place
    from codedance.train.grpo import GRPOTrainer
    from codedance.train.pipeline import stage_domains, stage_tasks, trainable
    from codedance.train.tiny import load_policy

    model, processor = load_policy(final)
    stage = replace(config.grpo, seed=seed, save_rollouts=False)
    trainer = GRPOTrainer(
        place(trainable(model, config), config.device),
        processor,
        stage,
        config.rollout,
        config.episode,
        stage_tasks(stage.tasks),
        out / "probe",
        profiles=config.profiles or None,
        domains=stage_domains(stage.tasks),
        threads=config.threads,
    )
    rollouts = []
    for b in range(batches):
        rollouts.append(trainer.collect(b))
        log(f"probe: batch {b + 1}/{batches} sampled")
    labels = [[dict(t.metadata).get("difficulty", "all") for t in ro.tasks] for ro in rollouts]
    result: dict[str, dict[str, dict[str, float]]] = {}
    for name in profiles:
        computed = [
            compute_batch_rewards(
                trajectories=ro.trajectories,
                correct=ro.correct,
                group_ids=[t.id for t in ro.tasks],
                domains=[trainer.domains.get(t.id, "general") for t in ro.tasks],
                profile=name,
            )
            for ro in rollouts
        ]
        result[name] = {
            label: {
                "n": p.n,
                "p_call": p.p_call,
                "delta": p.delta,
                "delta_seq": p.delta_seq,
                "delta_turn": p.delta_turn,
                "push": p.push,
            }
            for label, p in first_turn_pushes(computed, labels).items()
        }
    cached.write_text(json.dumps(result, indent=1))
    return result


def pushes_table(result: dict[str, dict[str, dict[str, Any]]]) -> str:
    """A markdown table of `probe_pushes`'s result: per label p_call, Δ (seq, turn) and push."""
    labels = list(dict.fromkeys(lab for per in result.values() for lab in per))
    lines = [
        "| profile | " + " | ".join(f"{lab}: p_call, Δ (seq, turn), push" for lab in labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for name, per in result.items():
        cells = [
            f"{per[lab]['p_call']:.2f}, {per[lab]['delta']:+.2f} ({per[lab]['delta_seq']:+.2f}, "
            f"{per[lab]['delta_turn']:+.2f}), **{per[lab]['push']:+.2f}**"
            if lab in per and per[lab]["delta"] == per[lab]["delta"]
            else "n/a (no call or no direct first turn)"
            for lab in labels
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
