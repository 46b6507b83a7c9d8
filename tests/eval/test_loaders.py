"""Loaders over every on-disk format, against the real MathVision testmini and built fixtures."""

from __future__ import annotations

import json

import pytest

from codedance.eval.loaders import load_benchmark
from codedance.eval.sources import DataNotFoundError, read_tsv
from codedance.eval.spec import get_spec, parse_benchmarks
from codedance.types import AnswerKind

pytestmark = pytest.mark.tier("unit")


@pytest.mark.tier("integration")
def test_mathv_layout_reads_the_real_testmini(mathv_root):
    tasks = load_benchmark(get_spec("mathvision_mini"), path=mathv_root)
    assert len(tasks) == 304
    kinds = {t.kind for t in tasks}
    assert kinds == {AnswerKind.CHOICE, AnswerKind.MATH}
    first = json.loads((mathv_root / "data" / "testmini.jsonl").read_text().splitlines()[0])
    t = tasks[0]
    assert t.id == f"mathvision_mini/{first['id']}" and t.answer == first["answer"]
    assert "<image1>" not in t.question and t.images[0].width > 0
    assert dict(t.metadata)["difficulty"] == f"level {first['level']}"


def test_tsv_base64_images_references_and_lists(tmp_path, fx):
    png, jpg = fx.png(), fx.jpeg()
    path = fx.tsv(
        tmp_path / "CountBenchQA.tsv",
        [
            {"index": "0", "image": png, "question": 'How many "dogs"?\tx', "answer": "3"},
            {"index": "1", "image": "0", "question": "Same image, how many cats?", "answer": "2"},
            {
                "index": "2",
                "image": str([__import__("base64").b64encode(jpg).decode()] * 2),
                "question": "q",
                "answer": "4",
            },
        ],
    )
    items = read_tsv(path)
    assert items[0].images == (png,) and items[1].images == (png,)  # row 1 reuses row 0's image
    assert items[2].images == (jpg, jpg)
    assert items[0].get("question") == 'How many "dogs"?\tx'
    tasks = load_benchmark(get_spec("countbench"), lmu_dir=tmp_path)
    assert [t.answer for t in tasks] == ["3", "2", "4"]
    assert tasks[2].images[0].png[:4] == b"\x89PNG"  # JPEG re-encoded as PNG


def test_pandas_written_tsv_reads_the_same(tmp_path, fx):
    pd = pytest.importorskip("pandas")
    import base64

    df = pd.DataFrame(
        [
            {
                "index": 5,
                "image": base64.b64encode(fx.png()).decode(),
                "question": "a\nb",
                "answer": 7,
                "hint": float("nan"),
            }
        ]
    )
    df.to_csv(tmp_path / "CountBenchQA.tsv", sep="\t", index=False)
    (task,) = load_benchmark(get_spec("countbench"), lmu_dir=tmp_path)
    assert task.id == "countbench/5" and task.question == "a\nb" and task.answer == "7"


def test_missing_file_names_the_file_and_the_source(tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        load_benchmark(get_spec("hrbench8k"), lmu_dir=tmp_path)
    message = str(info.value)
    assert (
        str(tmp_path / "HRBench8K.tsv") in message
        and "DreamMr/HR-Bench" in message
        and "--data" in message
    )


def test_vstar_keeps_the_file_order_and_builds_vlmevalkits_mcq_prompt(tmp_path, fx):
    rows = [
        {
            "index": str(i),
            "image": fx.png(),
            "question": f"Q{i}",
            "A": "right",
            "B": "wrong1",
            "C": "wrong2",
            "D": "wrong3",
            "answer": "A",
            "category": "direct_attributes",
        }
        for i in range(2)
    ]
    rows[1]["hint"] = "Look left."
    fx.tsv(tmp_path / "VStarBench.tsv", rows)
    tasks = load_benchmark(get_spec("vstar"), lmu_dir=tmp_path)
    assert [t.answer for t in tasks] == ["A", "A"] and dict(tasks[0].choices)["A"] == "right"
    options = "Options:\nA. right\nB. wrong1\nC. wrong2\nD. wrong3\n"
    suffix = "Please select the correct answer from the options above. \n"
    assert (
        tasks[0].question == f"Question: Q0\n{options}{suffix}"
    )  # ImageMCQDataset.build_prompt's text
    assert tasks[1].question == f"Hint: Look left.\nQuestion: Q1\n{options}{suffix}"


def test_chartqa_gold_that_is_no_list_literal_is_text(tmp_path, fx):
    fx.tsv(
        tmp_path / "ChartQA_TEST.tsv",
        [
            {
                "index": "0",
                "image": fx.png(),
                "question": "Q",
                "answer": "[Cable TV]",
                "split": "human",
            },
            {
                "index": "1",
                "image": fx.png(),
                "question": "Q",
                "answer": "['a', 'b']",
                "split": "human",
            },
        ],
    )
    tasks = load_benchmark(get_spec("chartqa"), lmu_dir=tmp_path)
    assert [t.answer for t in tasks] == ["[Cable TV]", "a"]


def test_hrbench_keeps_rotations(tmp_path, fx):
    rows = [
        {
            "index": str(i),
            "image": fx.png(),
            "question": "Q",
            "A": "a",
            "B": "b",
            "C": "c",
            "D": "d",
            "answer": "ABCD"[i],
            "category": "single",
            "cycle_category": f"cycle{i}",
        }
        for i in range(4)
    ]
    fx.tsv(tmp_path / "HRBench4K.tsv", rows)
    tasks = load_benchmark(get_spec("hrbench4k"), lmu_dir=tmp_path)
    assert [t.answer for t in tasks] == ["A", "B", "C", "D"]
    assert [dict(t.metadata)["cycle"] for t in tasks] == ["cycle0", "cycle1", "cycle2", "cycle3"]


def test_hf_parquet_with_image_structs(tmp_path, fx):
    fx.parquet(
        tmp_path / "test-00000.parquet",
        [
            {
                "image": {"bytes": fx.png(), "path": None},
                "question": "How many birds?",
                "number": 4,
                "text": "x",
            },
            {
                "image": {"bytes": fx.jpeg(), "path": None},
                "question": "How many cups?",
                "number": 2,
                "text": "y",
            },
        ],
    )
    tasks = load_benchmark(get_spec("countbench"), path=tmp_path)
    assert [(t.question, t.answer) for t in tasks] == [
        ("How many birds?", "4"),
        ("How many cups?", "2"),
    ]
    assert tasks[0].id == "countbench/0"


def test_hf_jsonl_with_image_files_and_chartqa_golds(tmp_path, fx):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "c.png").write_bytes(fx.png())
    fx.jsonl(
        tmp_path / "test.jsonl",
        [
            {
                "index": 9,
                "image": "img/c.png",
                "question": "Peak?",
                "answer": "['12', '12.0']",
                "split": "human",
            }
        ],
    )
    (task,) = load_benchmark(get_spec("chartqa"), path=tmp_path / "test.jsonl")
    meta = dict(task.metadata)
    assert json.loads(meta["golds"]) == ["12", "12.0"] and meta["split"] == "human"
    assert task.question.endswith("Answer the question using a single word or phrase.")


def test_missing_image_file_in_export_is_named(tmp_path, fx):
    fx.jsonl(
        tmp_path / "test.jsonl",
        [{"index": 1, "image": "img/nope.png", "question": "q", "answer": "1"}],
    )
    with pytest.raises(DataNotFoundError, match="nope.png"):
        load_benchmark(get_spec("countbench"), path=tmp_path / "test.jsonl")


def test_a_tiny_base64_image_is_not_taken_for_a_file_name(tmp_path, fx):
    """A few-pixel PNG in base64 is shorter than a long path: it is decoded, not looked up."""
    import base64
    import io

    from PIL import Image as PILImage

    buffer = io.BytesIO()
    PILImage.new("RGB", (2, 2), "red").save(buffer, format="PNG")
    tiny = base64.b64encode(buffer.getvalue()).decode()
    assert len(tiny) < 1024
    fx.jsonl(tmp_path / "test.jsonl", [{"index": 1, "image": tiny, "question": "q", "answer": "1"}])
    (task,) = load_benchmark(get_spec("countbench"), path=tmp_path / "test.jsonl")
    assert (task.images[0].width, task.images[0].height) == (2, 2)


def test_parse_benchmarks_paper_set_and_unknown():
    assert len(parse_benchmarks("paper")) == 11
    with pytest.raises(ValueError, match="known"):
        parse_benchmarks("vstar,nope")
