"""Presets parse, overrides apply, unknown keys are named; the canonical SFT record and the
ms-swift export (no torch needed)."""

from __future__ import annotations

import json

import pytest

from codedance.config import PRESETS as ALL_PRESETS
from codedance.sft_records import canonical_record, write_records
from codedance.train.config import load_config
from tests.train.helpers import corpus

pytestmark = pytest.mark.tier("torch")

PRESETS = ALL_PRESETS / "train"


def test_every_preset_loads_and_its_header_gives_the_command() -> None:
    presets = sorted(PRESETS.glob("*.yaml"))
    assert {p.stem for p in presets} >= {"tiny-cpu", "sft-qwen2.5-vl-7b"}
    for path in presets:
        assert path.read_text().startswith("# codedance ")
        load_config(path)
    tiny = load_config(
        PRESETS / "tiny-cpu.yaml", ["grpo.steps=3", "grpo.profile_overrides=[[delta, 0.0]]"]
    )
    assert tiny.grpo.steps == 3 and tiny.grpo.profile_overrides == (("delta", 0.0),)
    assert tiny.grpo.clip == 0.2 and tiny.grpo.kl_coef == 0.0 and tiny.sft.warmup_ratio == 0.05
    assert tiny.sft.teacher.code_style == "compact"
    paper = load_config(PRESETS / "sft-qwen2.5-vl-7b.yaml")
    assert (paper.sft.batch_size, paper.sft.lr) == (128, 5e-5)
    assert paper.sft.teacher.code_style == "full"


@pytest.mark.parametrize("style", ["full", "compact"])
def test_the_pipeline_teacher_writes_the_configured_code_style(tmp_path, style) -> None:  # type: ignore[no-untyped-def]
    from codedance.train.pipeline import teacher_trajectories, world_tasks

    cfg = load_config(
        PRESETS / "tiny-cpu.yaml",
        [f"out_dir={tmp_path}", "sft.tasks.n=6", f"sft.teacher.code_style={style}"],
    )
    codes = [
        t.code
        for tr in teacher_trajectories(cfg, world_tasks(cfg.sft.tasks), log=lambda _m: None)
        for t in tr.turns
        if t.code
    ]
    assert codes and all(c.rstrip().endswith("print('DONE')") for c in codes)
    assert all(("def color_mask" in c) == (style == "full") for c in codes)


def test_unknown_keys_are_errors_that_name_them() -> None:
    with pytest.raises(ValueError, match="stepz"):
        load_config(None, ["grpo.stepz=1"])
    with pytest.raises(ValueError, match="key=value"):
        load_config(None, ["grpo.steps"])


def test_canonical_record_and_swift_export(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = corpus()[0]  # prompt with an image, a code turn whose feedback has an image, the answer
    record = canonical_record(t).as_dict()
    roles = [(m["role"], m["loss"]) for m in record["messages"]]
    assert roles == [("user", False), ("assistant", True), ("user", False), ("assistant", True)]
    placeholders = sum(m["content"].count("<image>") for m in record["messages"])
    assert placeholders == len(record["images"]) == 2
    assert record["messages"][1]["content"] == t.turns[0].text
    path = tmp_path / "swift.jsonl"
    assert write_records((canonical_record(t) for t in corpus()), path, "swift") == 9
    first = json.loads(path.read_text().splitlines()[0])
    assert [m["loss"] for m in first["messages"]] == [False, True, False, True]
    assert all(
        (tmp_path / "images").joinpath(p.rsplit("/", 1)[1]).exists() for p in first["images"]
    )
