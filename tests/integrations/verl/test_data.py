"""Data preparation: verl's own RLHFDataset reads our parquet; the agent loop's task comes back."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")
pytest.importorskip("pandas")

from omegaconf import OmegaConf
from typer.testing import CliRunner

from codedance.cli.verl_cmd import app
from codedance.integrations.verl.tasks import TASK_KEY, images_from_prompt, task_from_fields
from codedance.world.base import task_set

pytestmark = pytest.mark.tier("verl")


def test_rlhf_dataset_reads_rows_and_task_round_trips(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    import tiny_qwen
    from verl.utils.dataset.rl_dataset import RLHFDataset

    result = CliRunner().invoke(
        app, ["prepare-data", "--out", str(tmp_path), "--n-train", "3", "--n-val", "2"]
    )
    assert result.exit_code == 0, result.output
    assert (
        "train by skill/difficulty: charts/easy 1, counting/medium 1, geometry/hard 1"
        in result.output
    )
    tokenizer, processor = tiny_qwen.build()
    config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "image_key": "images",
            "max_prompt_length": 100000,
            "filter_overlong_prompts": False,
            "return_raw_chat": True,
        }
    )
    dataset = RLHFDataset(str(tmp_path / "train.parquet"), tokenizer, config, processor=processor)
    assert len(dataset) == 3
    item = dataset[1]
    images = images_from_prompt(item["raw_prompt"])
    task, domain = task_from_fields(item["extra_info"][TASK_KEY], images)
    expected = task_set(3)[1]
    assert (task.id, task.question, task.answer, task.kind, domain) == (
        expected.id,
        expected.question,
        expected.answer,
        expected.kind,
        "general",
    )
    assert [i.to_pil().convert("RGB").tobytes() for i in task.images] == [
        i.to_pil().convert("RGB").tobytes() for i in expected.images
    ]
    assert item["agent_name"] == "codedance"


def test_prepare_data_is_on_the_one_loader(tmp_path):
    mine = tmp_path / "data.yaml"
    mine.write_text("n_val: 4\nskills: counting\n")
    result = CliRunner().invoke(
        app,
        [
            "prepare-data",
            "-c",
            str(mine),
            "n_train=5",
            "--seed",
            "3",
            "--out",
            "o",
            "--print-config",
        ],
    )
    assert result.exit_code == 0, result.output
    assert all(
        line in result.output
        for line in ("out: o", "n_train: 5", "n_val: 4", "seed: 3", "skills: counting")
    )
    for args, words in (
        (["--out", "o", "--n-train", "0"], "--n-train must be at least 1, got 0"),
        (["n_val=0", "out=o"], "n_val: must be at least 1, got 0"),
        ([], "give the output folder"),
    ):
        refused = CliRunner().invoke(app, ["prepare-data", *args])
        assert refused.exit_code == 2 and words in refused.output, refused.output
    assert not (tmp_path / "o").exists()
