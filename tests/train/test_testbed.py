"""The CPU testbed's behavioural regression test (CI): ``--preset testbed`` as it is, one seed
(SFT, then 10 GRPO steps; minutes) must show R_BAT's effect — calls on easy items
fall below the SFT policy's while hard items keep their calls, and execution success does not
drop — and the same run with the R_seq sign flipped, or with the turn penalty's sign flipped, must
fail that same check. The broken variants are the reward code patched, as a bug would be.

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

from codedance.rewards import group, terms
from codedance.train.config import load_config
from codedance.train.pipeline import run_grpo_stage, run_sft_stage


def check(after_sft: dict, after_grpo: dict) -> list[str]:
    """What the short run must show; an empty list when it does."""
    problems = []
    if not after_grpo["calls/easy"] <= after_sft["calls/easy"] - 0.2:
        problems.append(f"calls on easy items did not fall: {after_sft['calls/easy']:.2f} → {after_grpo['calls/easy']:.2f}")
    if not after_grpo["calls/hard"] >= after_sft["calls/hard"] - 0.1:
        problems.append(f"calls on hard items fell: {after_sft['calls/hard']:.2f} → {after_grpo['calls/hard']:.2f}")
    if not after_grpo["exec_success"] >= after_sft["exec_success"] - 0.02:
        problems.append(f"execution success fell: {after_sft['exec_success']:.2f} → {after_grpo['exec_success']:.2f}")
    return problems


@pytest.fixture(scope="module")
def sft(tmp_path_factory):  # type: ignore[no-untyped-def]
    torch.set_num_threads(2)
    config = load_config("codedance/presets/train/testbed.yaml", [f"out_dir={tmp_path_factory.mktemp('testbed')}"])
    run_sft_stage(config, log=lambda _line: None)
    import json
    from pathlib import Path

    return config, json.loads((Path(config.out_dir) / "eval" / "after-sft.json").read_text())


def grpo(config, name):  # type: ignore[no-untyped-def]
    """GRPO ``paper``, seed 0, as the ablation's ``paper-s0`` run."""
    return run_grpo_stage(config, name, replace(config.grpo, profile="paper", seed=0), log=lambda _line: None)


def test_paper_reward_makes_tool_use_adaptive(sft) -> None:  # type: ignore[no-untyped-def]
    config, after_sft = sft
    assert 0.3 <= after_sft["calls/easy"] and 0.3 <= after_sft["calls/hard"]  # the SFT policy calls on both
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
