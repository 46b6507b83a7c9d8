"""The CPU testbed's behavioural regression test (CI): the `testbed` preset at the settings its
margins were measured on — the teacher's failing first program on 30 % of its tool episodes
(`sft.teacher.mistake_rate` 0.3; the preset now uses 0.1) and 10 GRPO steps (the preset: 30) —
one seed, must show R_BAT's effect: the policy answers easy items directly more often than after
SFT (R_seq's penalty on calls where the group is right) and writes the failing program less
often (R_turn's penalty); the same run with the R_seq sign flipped, or with the turn penalty's
sign flipped, must fail that same check. The broken variants are the reward code patched, as a
bug would be. Whether calls on easy items fall below calls on hard ones is the ablation's
question (`codedance train --preset testbed --ablation --seeds 3`), not this test's: it needs
30 steps and several seeds.

Real parts throughout: the world's `dots` tasks, the non-adaptive teacher in the real sandbox,
TRL SFT, the GRPO trainer with the real sandbox. Seeded and on CPU; the thresholds keep a margin
from the values measured (docs/train.md, "The testbed preset").
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
# one SFT (750 steps) and three GRPO runs: minutes on an idle 2-core machine, far more when shared
pytestmark = [pytest.mark.tier("torch"), pytest.mark.slow, pytest.mark.timeout(2400)]

from codedance.rewards import group, terms
from codedance.train.config import load_config
from codedance.train.pipeline import run_grpo_stage, run_sft_stage

# the settings the thresholds of `check` were measured at (one SFT and three GRPO runs of 10 steps
# stay within minutes of CPU); the preset's own values are the ablation's
MEASURED_AT = ("sft.teacher.mistake_rate=0.3", "grpo.steps=10")


def check(after_sft: dict, after_grpo: dict) -> list[str]:
    """What the run must show, on the exact first-turn probabilities (`codedance.train.branch`,
    no sampling noise); an empty list when it does. Measured on the preset from its own SFT at 2
    threads (docs/log/train-runs.md): paper seeds 0/1/2 raised p_direct/easy by 0.135/0.111/0.118
    and cut p_bug by 0.105/0.089/0.088; the flipped R_seq moved p_direct/easy by −0.060; the
    flipped turn returns raised p_bug by 0.152."""
    problems = []
    easy = after_grpo["p_direct/easy"] - after_sft["p_direct/easy"]
    if easy < 0.08:
        problems.append(
            f"direct answers on easy items did not become likelier: {easy:+.3f} (want ≥ +0.08)"
        )
    bug = after_grpo["p_bug"] - after_sft["p_bug"]
    if bug > -0.05:
        problems.append(
            f"the failing program did not become rarer: p_bug {bug:+.3f} (want ≤ −0.05)"
        )
    return problems


@pytest.fixture(scope="module")
def sft(tmp_path_factory):  # type: ignore[no-untyped-def]
    torch.set_num_threads(2)
    config = load_config(
        "codedance/presets/train/testbed.yaml",
        [
            f"out_dir={tmp_path_factory.mktemp('testbed')}",
            *MEASURED_AT,
        ],
    )
    run_sft_stage(config, log=lambda _line: None)
    import json
    from pathlib import Path

    return config, json.loads((Path(config.out_dir) / "eval" / "after-sft.json").read_text())


def grpo(config, name):  # type: ignore[no-untyped-def]
    """GRPO ``paper``, seed 0, as the ablation's ``paper-s0`` run."""
    return run_grpo_stage(
        config, name, replace(config.grpo, profile="paper", seed=0), log=lambda _line: None
    )


def test_paper_reward_makes_tool_use_adaptive(sft) -> None:  # type: ignore[no-untyped-def]
    config, after_sft = sft
    assert (
        0.2 <= after_sft["p_direct/easy"] <= 0.8 and 0.2 <= after_sft["p_direct/hard"] <= 0.8
    )  # both branches
    # the answer copies the printed count, in part (measured 0.41 here, 0.21 with 1 thread or
    # another model seed; 0.015, a guess, on the preset before the copy was learned)
    assert after_sft["p_copy/hard"] >= 0.1
    assert check(after_sft, grpo(config, "paper")) == []


def test_a_flipped_r_seq_sign_fails_the_check(sft, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config, after_sft = sft
    flipped = terms.sequence_tool_reward
    monkeypatch.setattr(terms, "sequence_tool_reward", lambda *a, **k: -flipped(*a, **k))
    assert check(after_sft, grpo(config, "broken-seq")) != []


def test_a_flipped_turn_penalty_fails_the_check(sft, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config, after_sft = sft
    returns = group.turn_returns
    monkeypatch.setattr(group, "turn_returns", lambda *a, **k: -np.asarray(returns(*a, **k)))
    assert check(after_sft, grpo(config, "broken-turn")) != []
