"""CodeDance-SFT import: fixture parquet in the card's schema → trajectory records; every
unmappable row counted with its reason; images once; resume; progress; bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from codedance.cli import app
from codedance.data.formats import Unmappable, conversation
from codedance.data.ledger import iter_jsonl
from codedance.data.sft_import import import_sft
from codedance.data.stream import InputError
from codedance.prompts.profiles import RELEASE_SYSTEM
from codedance.records import load_trajectories
from codedance.sft_records import canonical_record
from codedance.types import Image
from tests.data.fixtures import SFT_SCHEMA, USER, sft_rows, write

pytestmark = pytest.mark.tier("integration")

FILE = "train-00000-of-00001.parquet"


@pytest.fixture
def sft_file(tmp_path: Path) -> Path:
    rows, _ = sft_rows()
    return write(rows, SFT_SCHEMA, tmp_path / FILE)


def test_rows_map_to_trajectories_and_every_skip_is_counted(sft_file: Path, tmp_path: Path) -> None:
    _, expect = sft_rows()
    seen = []
    result = import_sft([sft_file], tmp_path / "out", progress=seen.append)
    assert (result.imported, result.rows, result.total) == (5, 9, 9)
    assert result.skipped == {
        "more placeholders than images": 2,
        "tool call without a response": 1,
        "image does not decode": 1,
    }
    ledger = {r["key"]: r for r in iter_jsonl(tmp_path / "out" / "rows.jsonl")}
    for index, reason in expect["skipped"].items():
        assert ledger[f"{FILE}#{index}"]["reason"] == reason
    assert {int(k.split("#")[1]) for k, r in ledger.items() if r["status"] == "imported"} == set(
        expect["imported"]
    )
    assert (
        result.conventions["images without placeholders"] == 1
        and result.conventions["tool_call messages"] == 1
    )
    assert seen[-1].done == seen[-1].total == 9 and seen[-1].imported == 5

    by_key = dict(load_trajectories(tmp_path / "out"))
    plain, image, swift = by_key[f"{FILE}#0"], by_key[f"{FILE}#1"], by_key[f"{FILE}#8"]
    record = canonical_record(plain)
    assert [(m.role, m.loss) for m in record.messages] == [
        ("system", False),
        ("user", False),
        ("assistant", True),
        ("user", False),
        ("assistant", True),
    ]
    assert record.messages[0].content == RELEASE_SYSTEM and record.messages[1].content == USER
    assert plain.turns[0].code.strip() == "print(input_image.size)" and plain.answer == "64x48"
    assert image.turns[0].code == "input_image.crop((0, 0, 32, 24))"  # from the hermes tool call
    assert image.turns[0].feedback_text.startswith("<tool_response>\nOutput image:\n<image>")
    assert image.turns[0].feedback_images[0].png == expect["crop"]
    assert image.turns[0].feedback_images[0].origin == "turn:0:0"
    assert image.prompt[1].images[0].origin == "input:0" and image.prompt[1].images[0].size == (
        64,
        48,
    )
    first_user = swift.prompt[0]
    assert (
        isinstance(first_user.parts[0], Image)
        and first_user.parts[1] == "What is the size of the image?"
    )
    assert (
        swift.turns[0].code.strip() == "print(input_image.size)"
    )  # a tool_call message folded into the turn
    # three distinct pictures (PNG input, JPEG input stored as PNG, the crop), each stored once
    assert len(list((tmp_path / "out" / "images").glob("*.png"))) == 3
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["imported"] == 5 and summary["examples"]["image does not decode"][0].startswith(
        f"{FILE}#7"
    )


def test_a_rerun_resumes_without_duplicates(sft_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = import_sft([sft_file], out, limit=3)
    assert first.ran == 3 and first.rows == 3
    second = import_sft([sft_file], out)
    assert second.ran == 6 and second.imported == 5 and second.rows == 9
    again = import_sft([sft_file], out)
    assert again.ran == 0 and again.imported == 5
    keys = [r["key"] for r in iter_jsonl(out / "trajectories.jsonl")]
    assert len(keys) == len(set(keys)) == 5


def test_conversation_rules() -> None:
    def msgs(*pairs: tuple[str, str]) -> list[dict]:
        return [{"role": r, "content": c} for r, c in pairs]

    with pytest.raises(Unmappable, match="more images than placeholders"):
        conversation(msgs(("user", "<image>a"), ("assistant", "b")), 2)
    with pytest.raises(Unmappable, match="unknown role"):
        conversation(msgs(("user", "a"), ("narrator", "b"), ("assistant", "c")), 0)
    with pytest.raises(Unmappable, match="ends on a user or tool message"):
        conversation(
            msgs(("user", "a"), ("assistant", "<code>\n```python\nx\n```\n</code>"), ("tool", "1")),
            0,
        )
    qwen = conversation(
        msgs(("human", "<|vision_start|><|image_pad|><|vision_end|>q"), ("gpt", "a")), 1
    )
    assert qwen.prompt == (("user", "<image>q"),) and "qwen image tokens" in qwen.conventions
    final = conversation(
        msgs(("user", "q"), ("assistant", "<code>\n```python\nx\n```\n</code><answer>1</answer>")),
        0,
    )
    assert len(final.steps) == 1 and "final turn with code and answer" in final.conventions
    merged = conversation(
        msgs(
            ("user", "q"),
            ("assistant", "<code>\n```python\nx\n```\n</code>"),
            ("tool", "1"),
            ("tool", "2"),
            ("assistant", "done"),
        ),
        0,
    )
    assert (
        merged.steps[0].feedback
        == "<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>"
    )


def test_bad_input_is_one_clear_error(tmp_path: Path, sft_file: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"prompt": ["x"]}), other)
    with pytest.raises(InputError, match="has no column 'messages'"):
        import_sft([other], tmp_path / "o1")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not empty"):
        import_sft([sft_file], tmp_path / "busy")
    result = CliRunner().invoke(
        app,
        [
            "data",
            "import",
            "codedance-sft",
            str(tmp_path / "missing"),
            "--out",
            str(tmp_path / "o2"),
        ],
    )
    assert result.exit_code == 2 and "does not exist" in result.output
