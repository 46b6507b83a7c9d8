"""The first-turn push probe on a saved policy: it samples GRPO batches of the config's own
tasks in the real sandbox, scores the same rollouts under every profile asked for, splits them
by difficulty, caches the result, and refuses a folder without a policy before any work."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from codedance.train.config import load_config
from codedance.train.probe import probe_pushes, pushes_table
from codedance.train.tiny import save_policy
from tests.train.helpers import corpus, tiny

pytestmark = pytest.mark.tier("torch")


def test_pushes_per_profile_and_difficulty_on_one_set_of_rollouts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = load_config(
        ["testbed"],
        [
            f"out_dir={tmp_path}",
            "grpo.prompts_per_step=4",
            "grpo.group_size=2",
            "rollout.max_tokens=8",
            "episode.max_turns=2",
            "device=cpu",
        ],
    )
    torch.manual_seed(0)
    model, processor = tiny(corpus())
    save_policy(tmp_path / "sft" / "final", model, processor)
    lines = []
    result = probe_pushes(config, ["paper", "outcome-only"], batches=2, log=lines.append)
    assert lines == ["probe: batch 1/2 sampled", "probe: batch 2/2 sampled"]
    assert set(result) == {"paper", "outcome-only"}
    for per in result.values():
        assert set(per) <= {"easy", "hard"} and sum(p["n"] for p in per.values()) == 2 * 4 * 2
    saved = json.dumps(result)  # NaN pushes where no first turn called (an untrained policy)
    assert json.dumps(json.loads((tmp_path / "pushes.json").read_text())) == saved
    cached = probe_pushes(config, ["paper"], log=lines.append)  # nothing sampled again
    assert json.dumps(cached) == saved
    assert len(lines) == 2 and "| paper |" in pushes_table(result)


def test_a_folder_without_a_policy_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = load_config(["testbed"], [f"out_dir={tmp_path}"])
    with pytest.raises(FileNotFoundError, match="run the SFT stage"):
        probe_pushes(config, ["paper"])
