"""``codedance verl train``: argument errors are one-line messages with exit code 2, before any
work; the command line handed to verl carries the plugin to every Ray worker."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("verl")

from codedance.cli import app
from codedance.integrations.verl import launch

pytestmark = pytest.mark.tier("verl")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "paper"], "unknown preset 'paper'"),
        (["--preset", "cpu-smoke"], "out_dir=DIR is required"),
        (["--preset", "cpu-smoke", "out_dir=x", "steps=0"], "steps: must be at least 1, got 0"),
        (["out_dir=x", "steps=two"], "steps: expected a whole number"),
        (["--preset", "cpu-smoke", "out_dir=x", "oops"], "expected key=value"),
        (["-c", "missing.yaml", "out_dir=x"], "missing.yaml: no such file"),
    ],
)
def test_setting_errors(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["verl", "train", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert not Path("x").exists()


def test_command_passes_the_plugin_and_outputs(tmp_path):
    run = launch.VerlTrainConfig(out_dir=str(tmp_path), steps=3, hydra=("trainer.seed=5",))
    cmd, env = launch.command(
        launch.LOCAL_PRESETS["cpu-smoke"], run, tmp_path / "data", tmp_path / "model"
    )
    assert cmd[1:4] == ["-m", "verl.trainer.main_ppo", "--config-path"]
    assert "trainer.total_training_steps=3" in cmd and cmd[-1] == "trainer.seed=5"
    assert (
        env["VERL_PLATFORM"] == "cpu"
        and env["VERL_USE_EXTERNAL_MODULES"] == "codedance.integrations.verl"
    )
    assert env["VERL_FILE_LOGGER_PATH"] == str(tmp_path.resolve() / "metrics.jsonl")
    for key in (
        "VERL_PLATFORM",
        "VERL_USE_EXTERNAL_MODULES",
        "VERL_FILE_LOGGER_PATH",
        "CODEDANCE_AGENT_LOOP_YAML",
    ):
        assert any(
            c.startswith(f"+ray_kwargs.ray_init.runtime_env.env_vars.{key}=") for c in cmd
        ), key
    assert not any("CODEDANCE_PROFILES" in c for c in cmd)


def test_an_imported_prompt_profile_reaches_every_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CODEDANCE_PROMPT_PROFILE", "codedance-rl")
    monkeypatch.setenv(
        "CODEDANCE_PROFILES", "rl/profiles.yaml"
    )  # relative: made absolute for the workers
    run = launch.VerlTrainConfig(out_dir=str(tmp_path))
    cmd, _ = launch.command(
        launch.LOCAL_PRESETS["cpu-smoke"], run, tmp_path / "data", tmp_path / "model"
    )
    prefix = "+ray_kwargs.ray_init.runtime_env.env_vars."
    assert f"{prefix}CODEDANCE_PROMPT_PROFILE='codedance-rl'" in cmd
    assert f"{prefix}CODEDANCE_PROFILES='{tmp_path.resolve() / 'rl' / 'profiles.yaml'}'" in cmd


def test_extra_arguments_split_into_settings_and_hydra_overrides():
    assert launch.split_args(["out_dir=r", "steps=2", "trainer.seed=5", "+a.b=1", "~c"]) == (
        ["out_dir=r", "steps=2"],
        ["trainer.seed=5", "+a.b=1", "~c"],
    )


def test_print_config_shows_the_settings_with_a_files_hydra_list_first(tmp_path):
    (tmp_path / "run.yaml").write_text("out_dir: r\nhydra: [trainer.seed=1]\n")
    result = CliRunner().invoke(
        app,
        ["verl", "train", "-c", str(tmp_path / "run.yaml"), "steps=2", "trainer.seed=5"]
        + ["--print-config"],
    )
    assert result.exit_code == 0, result.output
    assert "steps: 2" in result.output and "out_dir: r" in result.output
    assert result.output.index("trainer.seed=1") < result.output.index("trainer.seed=5")
    assert not (tmp_path / "r").exists()


def test_step_summary_reads_verls_console_line():
    line = (
        "\x1b[36m(TaskRunnerV1 pid=7)\x1b[0m step:1 - actor/entropy:6.2 - actor/grad_norm:0.8"
        " - timing_s/step:13.1"
    )
    assert launch.step_summary(line) == "step:1 actor/grad_norm:0.8 timing_s/step:13.1"
