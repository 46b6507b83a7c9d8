"""Every number a long command takes is range-checked by the one loader: its field declares the
range (`codedance.config.bounded` / ``not_resumed(..., at_least=...)``), so a value no run can use
is refused at load with one line naming the key (or the flag typed), before any work."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

import pytest

from codedance.config import load
from codedance.errors import SettingsError

pytestmark = pytest.mark.tier("unit")

FREE = {"seed"}  # any whole number is a seed


def configs() -> dict[str, Any]:
    from codedance.cli.solve_cmd import SolveConfig
    from codedance.curate.config import ENDPOINT, CurateConfig
    from codedance.data.options import RlImportConfig, SftImportConfig, VerifyConfig
    from codedance.demo import DemoConfig
    from codedance.eval.options import EvalConfig
    from codedance.synth import SynthConfig
    from codedance.teacher.accuracy import AccuracyConfig
    from codedance.train.config import PipelineConfig

    return {
        "train/sft": PipelineConfig(),
        "eval": EvalConfig(),
        "demo": DemoConfig(),
        "synth": SynthConfig(),
        "curate": CurateConfig(),
        "curate endpoints": ENDPOINT,
        "solve": SolveConfig(),
        "data verify": VerifyConfig(),
        "data import codedance-sft": SftImportConfig(),
        "data import codedance-rl": RlImportConfig(),
        "world accuracy": AccuracyConfig(),
    }


def unbounded(config: Any, prefix: str = "") -> list[str]:
    found = []
    for f in fields(config):
        value = getattr(config, f.name)
        if is_dataclass(value):
            found += unbounded(value, f"{prefix}{f.name}.")
        elif (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and f.name not in FREE
            and not f.metadata.get("bounds")
        ):
            found.append(prefix + f.name)
    return found


def test_every_number_of_every_long_command_declares_its_range():
    missing = {name: unbounded(config) for name, config in configs().items()}
    assert {name: keys for name, keys in missing.items() if keys} == {}


@pytest.mark.parametrize(
    ("command", "specs", "words"),
    [
        ("eval", ["server.retries=-1"], "server.retries: must be at least 0, got -1"),
        ("eval", ["stop_after=0"], "stop_after: must be at least 1, got 0"),
        ("eval", ["episode.exec_timeout_s=0"], "episode.exec_timeout_s: must be above 0"),
        (
            "demo",
            ["teacher.mistake_rate=2"],
            "teacher.mistake_rate: must be at least 0 and at most 1",
        ),
        ("demo", ["rollouts=0"], "rollouts: must be at least 1, got 0"),
        ("synth", ["concurrency=0"], "concurrency: must be at least 1, got 0"),
        ("synth", ["max_tasks=-1"], "max_tasks: must be at least 0, got -1"),
        ("solve", ["top_p=0"], "top_p: must be above 0 and at most 1, got 0.0"),
        ("train/sft", ["sft.tasks.n=0"], "sft.tasks.n: must be at least 1, got 0"),
    ],
)
def test_the_loader_refuses_a_number_out_of_range_naming_its_key(command, specs, words):
    config = configs()[command]
    with pytest.raises(SettingsError) as info:
        load(config, specs)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_config_built_in_code_is_held_to_the_same_ranges():
    from codedance.demo import DemoConfig
    from codedance.policy.server_config import ServerConfig
    from codedance.rollout import EpisodeSettings

    with pytest.raises(SettingsError, match="concurrency: must be at least 1, got 0"):
        DemoConfig(concurrency=0)
    with pytest.raises(SettingsError, match="timeout_s: must be above 0, got 0"):
        ServerConfig(timeout_s=0)
    with pytest.raises(SettingsError, match="max_turns: must be at least 1, got 0"):
        EpisodeSettings(max_turns=0)
