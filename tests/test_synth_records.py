"""The canonical SFT record (typed, torch-free) and its ms-swift and TRL exports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from codedance.prompts import conversation
from codedance.sft_records import SFTRecord, canonical_record, write_records
from tests.train.helpers import corpus

pytestmark = pytest.mark.tier("integration")


def test_canonical_record_flags_model_turns_and_places_images() -> None:
    t = corpus()[0]  # prompt with an image, a code turn whose feedback has an image, the answer
    record = canonical_record(t)
    assert isinstance(record, SFTRecord)
    assert [m.loss for m in record.messages] == [m.role == "assistant" for m in conversation(t)]
    assert [m.content for m in record.messages if m.loss] == [turn.text for turn in t.turns]
    assert [i.sha256 for i in record.images] == [
        i.sha256 for m in conversation(t) for i in m.images
    ]
    assert sum(m.content.count("<image>") for m in record.messages) == len(record.images) == 2


def test_swift_and_trl_exports_hold_the_same_conversation(tmp_path) -> None:  # type: ignore[no-untyped-def]
    records = [canonical_record(t) for t in corpus()]
    assert write_records(records, tmp_path / "swift.jsonl", "swift") == len(records)
    assert write_records(records, tmp_path / "trl.jsonl", "trl") == len(records)
    swift = [json.loads(x) for x in (tmp_path / "swift.jsonl").read_text().splitlines()]
    trl = [json.loads(x) for x in (tmp_path / "trl.jsonl").read_text().splitlines()]
    for record, s, t in zip(records, swift, trl):
        assert [(m["role"], m["content"], m["loss"]) for m in s["messages"]] == [
            (m.role, m.content, m.loss) for m in record.messages
        ]
        joined = [
            "".join("<image>" if b["type"] == "image" else b["text"] for b in m["content"])
            for m in t["messages"]
        ]
        assert joined == [m.content for m in record.messages]
        assert s["images"] == t["images"] and len(s["images"]) == len(record.images)
        for path, image in zip(s["images"], record.images):
            assert path.startswith("images/") and (tmp_path / path).read_bytes() == image.png
    moved = tmp_path.parent / f"{tmp_path.name}-moved"
    tmp_path.rename(moved)  # relative paths survive moving the folder to another machine
    first = json.loads((moved / "swift.jsonl").read_text().splitlines()[0])
    assert (moved / first["images"][0]).read_bytes() == records[0].images[0].png
    tmp_path.mkdir()
    write_records(records[:1], tmp_path / "abs.jsonl", "swift", absolute=True)
    (path, *_) = json.loads((tmp_path / "abs.jsonl").read_text())["images"]
    assert Path(path).is_absolute() and Path(path).read_bytes() == records[0].images[0].png
    with pytest.raises(ValueError, match="unknown SFT format"):
        write_records(records, tmp_path / "x.jsonl", "alpaca")


def test_trl_export_is_what_trl_prepares() -> None:
    trl = pytest.importorskip("trl.data_utils")
    from codedance.records import ImageStore
    from codedance.sft_records import trl_json

    record = canonical_record(corpus()[0])
    row = trl_json(record, ImageStore(__import__("tempfile").mkdtemp()))
    prepared = trl.prepare_multimodal_messages(row["messages"], images=list(record.images))
    placed = [b["image"] for m in prepared for b in m["content"] if b["type"] == "image"]
    assert placed == list(record.images)


def test_synth_and_records_import_without_torch() -> None:
    code = "import sys, codedance.synth, codedance.sft_records; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
