"""The presets compose with verl's own Hydra config and hold the paper's numbers (Table 4, §4; docs/verl.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl")
hydra = pytest.importorskip("hydra")

PRESETS = Path(__file__).resolve().parents[3] / "codedance" / "presets" / "verl"


def compose(name: str, monkeypatch):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    monkeypatch.setenv("CODEDANCE_AGENT_LOOP_YAML", str(PRESETS / "agent_loop.yaml"))
    with initialize_config_dir(config_dir=str(PRESETS), version_base=None):
        cfg = hydra_compose(config_name=name)
    OmegaConf.resolve(cfg)
    return cfg


def test_paper_preset_matches_spec(monkeypatch):
    cfg = compose("paper_qwen25vl_7b", monkeypatch)
    a, r = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert (cfg.data.train_batch_size, r.n, a.optim.lr, a.use_kl_loss, cfg.algorithm.use_kl_in_reward) == (
        256, 8, 1e-6, False, False)
    assert (a.clip_ratio, a.clip_ratio_c, a.entropy_coeff) == (0.2, 3.0, 0)
    assert (r.prompt_length, r.response_length, r.temperature) == (10240, 10240, 1.0)
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node, cfg.trainer.v1.trainer_mode) == (2, 8, "codedance_sync")
    assert cfg.algorithm.adv_estimator == "codedance_paper"
    assert cfg.reward.custom_reward_function.path == "pkg://codedance.integrations.verl.reward"
    assert r.agent.default_agent_loop == "codedance"


def test_other_presets_and_agent_loop_yaml(monkeypatch):
    from omegaconf import OmegaConf

    one = compose("single_node_8gpu", monkeypatch)
    assert (one.trainer.nnodes, one.data.train_batch_size, one.actor_rollout_ref.rollout.n) == (1, 256, 8)
    small = compose("small_1gpu", monkeypatch)
    assert (small.trainer.n_gpus_per_node, small.data.train_batch_size) == (1, 16)
    assert small.reward.custom_reward_function.reward_kwargs.judge_policy == "never"
    (loop,) = OmegaConf.load(PRESETS / "agent_loop.yaml")
    assert (loop.name, loop.max_turns, loop.exec_timeout_s) == ("codedance", 6, 15.0)
