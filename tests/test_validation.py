"""Bad input is refused before any work, by every command: one line ``error: ...``, exit code 2,
no run folder, no request to the model server, no sandbox service left behind."""

from __future__ import annotations

import base64
import csv
import glob
import io
import os
import tempfile
from pathlib import Path

import pytest
from PIL import Image as PILImage
from typer.testing import CliRunner

from codedance.cli import app
from codedance.policy.replay_server import ReplayServer

pytestmark = pytest.mark.tier("integration")


def leftovers() -> list[str]:
    """Sandbox services this process started (its folders and lock in the temporary directory)."""
    return glob.glob(os.path.join(tempfile.gettempdir(), f"codedance-{os.getpid()}-*"))


def refused(args: list[str], words: str) -> str:
    before = set(leftovers())  # a service another test of this process keeps open is not ours
    result = CliRunner().invoke(app, args)
    text = result.output.strip()
    assert result.exit_code == 2, (args, result.output)
    assert text.count("error:") == 1, (args, text)
    error = " ".join(
        text[text.index("error:") :].split()
    )  # one message, however the console wraps it
    assert words in error, (args, text)
    assert "Traceback" not in text, text
    assert set(leftovers()) <= before, args
    return text


def png_b64() -> str:
    buffer = io.BytesIO()
    PILImage.new("RGB", (32, 24), (200, 30, 30)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def tsv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("sft.epochs=-1", "sft.epochs: must be above 0, got -1"),
        ("sft.per_device_batch=0", "sft.per_device_batch: must be at least 1"),
        ("grpo.steps=0", "grpo.steps: must be at least 1"),
        ("grpo.top_p=1.5", "grpo.top_p: must be above 0 and at most 1"),
        ("threads=0", "threads: must be at least 1"),
    ],
)
def test_train_and_sft_range_check_every_number_at_load(tmp_path, override, words):
    refused(["train", override], words)
    refused(["sft", "--data", str(tmp_path), override], words)


def test_data_verify_and_import_refuse_options_out_of_range(tmp_path):
    (tmp_path / "trajectories.jsonl").write_text("")
    refused(
        ["data", "verify", str(tmp_path), "--concurrency", "0"],
        "--concurrency must be at least 1, got 0",
    )
    refused(
        ["data", "verify", str(tmp_path), "--concurrency", "-2"],
        "--concurrency must be at least 1, got -2",
    )
    refused(["data", "verify", str(tmp_path), "--tolerance", "2"], "--tolerance")
    refused(["data", "verify", str(tmp_path), "--limit", "0"], "--limit")
    missing = str(tmp_path / "none.parquet")
    refused(
        [
            "data",
            "import",
            "codedance-sft",
            missing,
            "--out",
            str(tmp_path / "o"),
            "--verify",
            "--concurrency",
            "0",
        ],
        "--concurrency must be at least 1",
    )
    refused(
        ["data", "import", "codedance-sft", missing, "--out", str(tmp_path / "o"), "--limit", "0"],
        "--limit",
    )
    refused(
        [
            "data",
            "import",
            "codedance-rl",
            missing,
            "--out",
            str(tmp_path / "o"),
            "--val-fraction",
            "1",
        ],
        "--val-fraction",
    )
    assert not (tmp_path / "o").exists()
    png = tmp_path / "chart.png"
    PILImage.new("RGB", (8, 8)).save(png)
    for kind in ("codedance-sft", "codedance-rl"):
        refused(
            ["data", "import", kind, str(png), "--out", str(tmp_path / "p")],
            "not a readable parquet file",
        )


def test_data_verify_refuses_a_record_it_cannot_read_before_any_sandbox(tmp_path):
    (tmp_path / "trajectories.jsonl").write_text('{"schema": 1}\n{}\n')
    refused(
        ["data", "verify", str(tmp_path)],
        "trajectories.jsonl, line 1: not a trajectory record (no key",
    )
    assert not (tmp_path / "verify.jsonl").exists()


def test_an_import_that_keeps_no_row_fails_without_a_next_step(tmp_path):
    from tests.data.fixtures import RL_SCHEMA, rl_rows, write

    rows, _ = rl_rows()
    write(rows, RL_SCHEMA, tmp_path / "rl.parquet")
    result = CliRunner().invoke(
        app,
        [
            "data",
            "import",
            "codedance-sft",
            str(tmp_path / "rl.parquet"),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 1, result.output
    assert "nothing imported" in result.output and "codedance sft --data" not in result.output


def test_presets_cp_into_a_missing_folder_is_one_line(tmp_path):
    refused(["presets", "cp", "train/tiny-cpu", str(tmp_path / "no" / "x.yaml")], "is not a folder")


def test_a_bad_image_is_named_as_the_users_file(tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    snippet = tmp_path / "x.py"
    snippet.write_text("print(1)")
    words = f"--image {bad}: not a readable image (no image format Pillow reads)"
    refused(["sandbox", "check", "--image", str(bad)], words)
    refused(["sandbox", "run", str(snippet), "-i", str(bad)], words)
    refused(["sandbox", "run", str(snippet), "--timeout", "0"], "--timeout must be above 0")
    with ReplayServer(["<answer>1</answer>"]) as server:
        refused(
            [
                "solve",
                "--model",
                server.url,
                "--image",
                str(bad),
                "--question",
                "q",
                "--out",
                str(tmp_path / "s"),
            ],
            words,
        )
        assert server.requests == []


def test_eval_refuses_data_that_cannot_give_a_scorable_sample(tmp_path):
    image = png_b64()
    good = ["index", "question", "A", "B", "answer", "category", "image"]
    cases = {
        "no answer": (
            tsv(
                tmp_path / "a.tsv",
                [c for c in good if c != "answer"],
                [[i, "q", "red", "blue", "c", image] for i in range(8)],
            ),
            "has no column 'answer'",
        ),
        "no image": (
            tsv(
                tmp_path / "b.tsv", good[:-1], [[i, "q", "red", "blue", "A", "c"] for i in range(8)]
            ),
            "has no images",
        ),
        "no rows": (tsv(tmp_path / "c.tsv", good, []), "has no rows"),
    }
    garbage = tmp_path / "lmu" / "ChartQA_TEST.tsv"
    garbage.parent.mkdir()
    garbage.write_bytes(bytes(range(128, 256)) * 20)
    with ReplayServer(["<answer>A</answer>"] * 50) as server:
        common = ["eval", "--model", server.url, "--concurrency", "2"]
        for name, (path, words) in cases.items():
            out = tmp_path / name.replace(" ", "-")
            text = refused(
                [*common, "--benchmarks", "vstar", "--data", f"vstar={path}", "--out", str(out)],
                f"{path} {words}",
            )
            assert "model scripted at" not in text  # the server was not asked for its models either
            assert not out.exists(), name
        refused(
            [
                *common,
                "--benchmarks",
                "chartqa",
                "--lmu-data",
                str(garbage.parent),
                "--out",
                str(tmp_path / "g"),
            ],
            f"{garbage}: not a VLMEvalKit TSV file",
        )
        assert server.requests == []  # the data is checked before the server is asked anything


def test_an_eval_row_with_a_corrupt_image_fails_naming_its_file_and_row(tmp_path):
    rows = [
        [
            i,
            "q",
            "red",
            "blue",
            "A",
            "c",
            png_b64() if i != 1 else base64.b64encode(b"junk").decode(),
        ]
        for i in range(3)
    ]
    data = tsv(
        tmp_path / "v.tsv", ["index", "question", "A", "B", "answer", "category", "image"], rows
    )
    with ReplayServer(lambda body: "<answer>A</answer>") as server:
        result = CliRunner().invoke(
            app,
            [
                "eval",
                "--model",
                server.url,
                "--benchmarks",
                "vstar",
                "--data",
                f"vstar={data}",
                "--out",
                str(tmp_path / "r"),
                "--no-tools",
            ],
        )
    assert result.exit_code == 1, result.output
    failures = (tmp_path / "r" / "failures.jsonl").read_text()
    assert (
        f"vstar/1: image of row 1 of {data} is not a readable image (no image format Pillow reads)"
        in failures
    )


def test_demo_synth_curate_solve_and_sft_refuse_bad_input_before_any_work(tmp_path):
    out = tmp_path / "out"
    refused(
        ["demo", "--max-turns", "0", "--out", str(out)], "--max-turns must be at least 1, got 0"
    )
    refused(["demo", "--concurrency", "0", "--out", str(out)], "--concurrency must be at least 1")
    refused(
        ["synth", "--mistake-rate", "2", "--out", str(out)],
        "--mistake-rate must be at least 0 and at most 1, got 2.0",
    )
    refused(["synth", "--n", "0", "--out", str(out)], "--n must be at least 1, got 0")
    image = tmp_path / "chart.png"
    PILImage.new("RGB", (32, 24)).save(image)
    with ReplayServer(["<answer>1</answer>"]) as server:
        solve = ["solve", "--model", server.url, "--image", str(image), "--question", "q"]
        refused([*solve, "--out", str(out), "--max-pixels", "0"], "--max-pixels must be at least 1")
        refused(
            [*solve, "--out", str(out), "--request-timeout", "0"],
            "--request-timeout must be above 0, got 0.0",
        )
        eval_ = ["eval", "--model", server.url, "--benchmarks", "vstar", "--out", str(out)]
        refused([*eval_, "--retries", "-1"], "--retries must be at least 0, got -1")
        refused([*eval_, "--exec-timeout", "0"], "--exec-timeout must be above 0, got 0.0")
        assert server.requests == []
    config = tmp_path / "curate.yaml"
    config.write_text(
        f"out: {out}\n"
        "endpoints:\n"
        "  weak: {url: http://127.0.0.1:9/v1, model: w}\n"
        "  strong: {url: http://127.0.0.1:9/v1, model: s}\n"
        "  judge: {url: http://127.0.0.1:9/v1, model: j}\n"
        "sources: [{kind: world, n: 2}]\n"
    )
    curate = ["curate", "run", str(config)]
    refused([*curate, "sandboxes=0"], "sandboxes: must be at least 1, got 0")
    refused(
        [*curate, "endpoints.strong.breaker_failures=0"],
        "endpoints.strong.breaker_failures: must be at least 1, got 0",
    )
    missing = tmp_path / "no-data"
    refused(["sft", "--data", str(missing)], f"no trajectories in {missing / 'trajectories.jsonl'}")
    assert not missing.exists() and not out.exists()


def test_curate_reads_each_source_s_first_row_before_writing_its_folder(tmp_path):
    import json

    table = tmp_path / "rows.jsonl"
    table.write_text(json.dumps({"q": "how many?", "answer": "2"}) + "\n")  # no image
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = tmp_path / "run"

    def config(source: str) -> str:
        path = tmp_path / "curate.yaml"
        path.write_text(
            f"out: {out}\n"
            "stages: [filter]\n"
            "endpoints:\n"
            "  weak: {url: http://127.0.0.1:9/v1, model: w}\n"
            "  strong: {url: http://127.0.0.1:9/v1, model: s}\n"
            "  judge: {url: http://127.0.0.1:9/v1, model: j}\n"
            f"sources: [{source}]\n"
        )
        return str(path)

    refused(
        ["curate", "run", config(f"{{kind: table, path: {table}, question: q}}")],
        f"{table} row 0: needs 'q', 'answer' and an image in 'image'",
    )
    refused(
        ["curate", "run", config(f"{{kind: table, path: {empty}}}")],
        "sources[0] (table): no rows to curate",
    )
    assert not out.exists()
