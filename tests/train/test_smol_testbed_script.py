"""The GPU script's settings (`scripts/smol_testbed.py`): they load as a train config, the
SmolLM2 backbone trains its top blocks only (so `freeze_lower` freezes the vision tower), the
device follows the machine, and ``--size tiny`` shrinks every stage onto the CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from codedance.train.config import load_config

pytestmark = pytest.mark.tier("unit")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "smol_testbed.py"


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("smol_testbed", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_settings_freeze_the_tower_and_follow_the_machine() -> None:
    config = load_config(["testbed"], _script().settings("gpu", []))
    assert config.init == "smollm2" and 0 < config.model.train_layers < 30
    assert config.device == "auto" and config.grpo.profile == "paper"
    assert config.sft.teacher.call_rate == 0.5  # the teacher stays non-adaptive


def test_tiny_size_is_small_on_the_cpu_and_overrides_win() -> None:
    config = load_config(["testbed"], _script().settings("tiny", ["grpo.steps=3"]))
    assert config.device == "cpu" and config.sft.max_steps == 2 and config.eval.tasks.n == 4
    assert config.grpo.steps == 3
