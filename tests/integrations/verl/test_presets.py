"""The presets compose with verl's own Hydra config and hold the paper's numbers (Table 4, §4;
docs/verl.md); flash-attn features follow what is installed; the cpu-smoke preset is what the CPU
backend needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from codedance.errors import SettingsError

pytestmark = pytest.mark.tier("verl")

pytest.importorskip("verl")
hydra = pytest.importorskip("hydra")

PRESETS = Path(__file__).resolve().parents[3] / "codedance" / "presets" / "verl"


def compose(name: str, monkeypatch):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from codedance.integrations.verl.environment import register_resolvers

    register_resolvers()  # what importing the plugin does in every verl process
    monkeypatch.setenv("CODEDANCE_AGENT_LOOP_YAML", str(PRESETS / "agent_loop.yaml"))
    with initialize_config_dir(config_dir=str(PRESETS), version_base=None):
        cfg = hydra_compose(config_name=name)
    OmegaConf.resolve(cfg)
    return cfg


def test_paper_preset_matches_spec(monkeypatch):
    cfg = compose("paper_qwen25vl_7b", monkeypatch)
    a, r = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert (
        cfg.data.train_batch_size,
        r.n,
        a.optim.lr,
        a.use_kl_loss,
        cfg.algorithm.use_kl_in_reward,
    ) == (256, 8, 1e-6, False, False)
    assert (a.clip_ratio, a.clip_ratio_c, a.entropy_coeff) == (0.2, 3.0, 0)
    assert (r.prompt_length, r.response_length, r.temperature) == (10240, 10240, 1.0)
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node, cfg.trainer.v1.trainer_mode) == (
        2,
        8,
        "codedance_sync",
    )
    assert cfg.algorithm.adv_estimator == "codedance_paper"
    assert cfg.reward.custom_reward_function.path == "pkg://codedance.integrations.verl.reward"
    assert r.agent.default_agent_loop == "codedance"


def test_other_presets_and_agent_loop_yaml(monkeypatch):
    from omegaconf import OmegaConf

    one = compose("single_node_8gpu", monkeypatch)
    assert (one.trainer.nnodes, one.data.train_batch_size, one.actor_rollout_ref.rollout.n) == (
        1,
        256,
        8,
    )
    small = compose("small_1gpu", monkeypatch)
    assert (small.trainer.n_gpus_per_node, small.data.train_batch_size) == (1, 16)
    assert small.reward.custom_reward_function.reward_kwargs.judge_policy == "never"
    (loop,) = OmegaConf.load(PRESETS / "agent_loop.yaml")
    assert (loop.name, loop.max_turns, loop.exec_timeout_s) == ("codedance", 6, 15.0)


def test_flash_attn_features_follow_the_environment(monkeypatch):
    from codedance.integrations.verl import environment

    cfg = compose("paper_qwen25vl_7b", monkeypatch)
    model = cfg.actor_rollout_ref.model
    has = environment.flash_attn_available()
    assert model.use_remove_padding is has
    assert model.override_config.attn_implementation == ("flash_attention_2" if has else "sdpa")


def test_cpu_smoke_preset(monkeypatch):
    cfg = compose("cpu_smoke", monkeypatch)
    a, r = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert (cfg.trainer.device, a.strategy, r.name, r.mode) == ("cpu", "fsdp2", "hf", "async")
    assert cfg.actor_rollout_ref.model.use_remove_padding is False
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert (a.use_kl_loss, cfg.algorithm.use_kl_in_reward) == (
        False,
        False,
    )  # no reference model on CPU
    assert (cfg.algorithm.adv_estimator, cfg.trainer.v1.trainer_mode) == (
        "codedance_paper",
        "codedance_sync",
    )
    assert "file" in cfg.trainer.logger and cfg.trainer.total_training_steps == 1
    assert r.custom.hf_server.test_policy == "scripted-first"
    ray_init = cfg.ray_kwargs.ray_init
    assert (ray_init.address, ray_init.num_gpus) == ("local", cfg.trainer.n_gpus_per_node)


def test_trl_has_what_verls_model_patch_imports():
    """verl imports AutoModelForCausalLMWithValueHead whenever trl is installed
    (verl/models/transformers/monkey_patch.py:352-356); the pinned trl must have it."""
    from codedance.integrations.verl.environment import check_trl

    check_trl()


def test_trl_without_the_class_is_a_one_line_error(monkeypatch):
    import importlib.machinery
    import sys
    import types

    from codedance.integrations.verl.environment import check_trl

    fake = types.ModuleType("trl")
    fake.__version__ = "1.16.0"  # what trl>=0.20 resolved to: no AutoModelForCausalLMWithValueHead
    fake.__spec__ = importlib.machinery.ModuleSpec("trl", None)
    monkeypatch.setitem(sys.modules, "trl", fake)
    for name in ("trl.experimental", "trl.experimental.ppo"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(
        SettingsError, match=r"trl 1\.16\.0 has no AutoModelForCausalLMWithValueHead.*trl==0\.27\.0"
    ):
        check_trl()


def test_the_estimator_comment_names_every_estimator():
    import re

    from codedance.integrations.verl.advantage import ESTIMATORS

    text = (PRESETS / "codedance_base.yaml").read_text(encoding="utf-8")
    listed = set(re.findall(r"codedance_[a-z0-9_]+", text.split("adv_estimator:")[0]))
    assert listed - {"codedance_base"} == set(ESTIMATORS)
