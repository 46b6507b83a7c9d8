"""CodeDance-RL import: fixture parquet in the card's schema → Tasks (kind and domain inferred,
image from ``images`` or tools_kwargs, every skip counted), Task JSONL, the release's prompt as a
profile, and the verl parquet that verl's own RLHFDataset reads back into the same tasks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from codedance.cli import app
from codedance.data.ledger import iter_jsonl
from codedance.data.rl_import import import_rl, in_val
from codedance.prompts import load_profiles, prompt_messages
from codedance.prompts.profiles import RELEASE_INSTRUCTION
from codedance.task_records import load_tasks
from tests.data.fixtures import RL_SCHEMA, RL_SYSTEM, picture, rl_rows, write

pytestmark = pytest.mark.tier("integration")

FILE = "rl-00000.parquet"


@pytest.fixture
def rl_out(tmp_path: Path) -> Path:
    rows, _ = rl_rows()
    write(rows, RL_SCHEMA, tmp_path / FILE)
    result = CliRunner().invoke(
        app,
        [
            "data",
            "import",
            "codedance-rl",
            str(tmp_path / FILE),
            "--out",
            str(tmp_path / "out"),
            "--val-fraction",
            "0.5",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (
        "6 imported, 3 skipped of 9 rows" in result.output
        and "skipped 1: no image" in result.output
    )
    return tmp_path / "out"


def _index(task_id: str) -> int:
    return int(task_id.split("#")[1])


def test_tasks_kinds_images_and_skips(rl_out: Path) -> None:
    _, expect = rl_rows()
    ledger = {_index(r["key"]): r for r in iter_jsonl(rl_out / "rows.jsonl")}
    assert {i: r["reason"] for i, r in ledger.items() if r["status"] == "skipped"} == expect[
        "skipped"
    ]
    tasks = {_index(t.id): (t, domain, split) for t, domain, split in load_tasks(rl_out)}
    assert {i: (t.kind.value, d) for i, (t, d, _) in tasks.items()} == expect["kinds"]
    assert (
        tasks[2][0].choices == (("A", "red"), ("B", "blue")) and tasks[2][0].answer == "B"
    )  # gold "(B)"
    assert tasks[8][0].question == expect["question_8"]  # from the user message, instruction cut
    assert tasks[1][0].images[0].png == picture(seed=5)  # only in tools_kwargs
    assert "image from tools_kwargs" in ledger[1]["conventions"]
    assert (
        dict(tasks[0][0].metadata)["data_source"] == "thinklite_eureka"
        and tasks[0][0].answer == "\\frac{1}{2}"
    )
    for i, pairs in expect["objects"].items():  # extra_info.detected_objects, as the row gives it
        assert tuple(m for m in tasks[i][0].metadata if m[0].startswith("detected_")) == pairs
    assert {i: s for i, (_, _, s) in tasks.items()} == {
        i: "val" if in_val(f"{FILE}#{i}", 0.5) else "train" for i in tasks
    }


def test_the_release_prompt_becomes_a_profile(rl_out: Path) -> None:
    profile = load_profiles(rl_out / "profiles.yaml")["codedance-rl"]
    rows, _ = rl_rows()
    messages = prompt_messages("What is in the picture?", (), profile)
    assert messages[0].text == RL_SYSTEM
    assert messages[1].text == rows[4]["messages"][1]["content"].replace("<image>", "")
    assert (
        messages[1].text.endswith(RELEASE_INSTRUCTION)
        and profile.feedback_open == "<tool_response>"
    )


def test_verl_reads_the_parquet_back_into_the_tasks(rl_out: Path) -> None:
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from codedance.integrations.verl.data import task_row
    from codedance.integrations.verl.tasks import TASK_KEY, images_from_prompt, task_from_fields

    sys.path.insert(0, str(Path(__file__).parents[1] / "integrations" / "verl"))
    import pyarrow.parquet as pq
    import tiny_qwen

    expected = [(t, d) for t, d, s in load_tasks(rl_out) if s == "train"]
    written = pq.read_table(rl_out / "train.parquet").to_pylist()
    assert written == [
        task_row(t, i, domain=d) for i, (t, d) in enumerate(expected)
    ]  # what prepare-data writes
    n_val = sum(1 for *_, s in load_tasks(rl_out) if s == "val")
    assert len(pq.read_table(rl_out / "val.parquet")) == n_val
    summary = json.loads((rl_out / "summary.json").read_text())
    assert summary["verl_rows"] == {"train": len(expected), "val": n_val}

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
    dataset = RLHFDataset(str(rl_out / "train.parquet"), tokenizer, config, processor=processor)
    assert len(dataset) == len(expected)
    for i, (want, domain) in enumerate(expected):
        item = dataset[i]
        task, got_domain = task_from_fields(
            item["extra_info"][TASK_KEY], images_from_prompt(item["raw_prompt"])
        )
        assert (task.id, task.question, task.answer, task.kind, task.choices, got_domain) == (
            want.id,
            want.question,
            want.answer,
            want.kind,
            want.choices,
            domain,
        )
        assert [im.to_pil().convert("RGB").tobytes() for im in task.images] == [
            im.to_pil().convert("RGB").tobytes() for im in want.images
        ]
        assert item["agent_name"] == "codedance"


def test_a_rerun_resumes(rl_out: Path) -> None:
    again = import_rl([rl_out.parent / FILE], rl_out, val_fraction=0.5)
    assert (again.ran, again.imported, again.rows) == (0, 6, 9)
    assert sum(1 for _ in iter_jsonl(rl_out / "tasks.jsonl")) == 6
