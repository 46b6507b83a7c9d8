"""The VLMEvalKit adapter against real VLMEvalKit (skipped when ``vlmeval`` does not import).

Each test goes through VLMEvalKit's own code: its dataset class builds the prompt from a custom
MCQ TSV in ``$LMUData``, its ``infer_data_job`` calls ``generate(message=..., dataset=...)`` from
its worker threads, its ``evaluate`` scores the prediction file; the last test runs its
``run.py`` through ``python -m codedance.integrations.vlmeval_adapter``. The model is a real
OpenAI-compatible HTTP server with scripted replies (`ReplayServer`) and the code runs in the
real sandbox. The script answers "A" (right) only when the feedback it got holds ``42``, the
output of the snippet it asked to run, and "B" otherwise, so a run whose code did not execute
scores 0. Importing VLMEvalKit turns off torch's grad mode, seeds torch and disables SSL
verification process-wide; this module restores all three so later tests see no difference.
"""

from __future__ import annotations

import base64
import io
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest


def _import_vlmeval():
    try:
        import torch
    except ImportError:
        torch = None
    saved = (torch.is_grad_enabled(), torch.get_rng_state()) if torch is not None else None
    https_context = ssl._create_default_https_context
    try:
        import vlmeval.api.base
        import vlmeval.config  # noqa: F401
        from vlmeval.dataset import build_dataset
        from vlmeval.inference import infer_data_job
        from vlmeval.smp import load
    except Exception as exc:  # noqa: BLE001 - not installed, or installed without what its imports need
        pytest.skip(
            f"vlmeval does not import: {type(exc).__name__}: {exc}", allow_module_level=True
        )
    finally:
        ssl._create_default_https_context = https_context
        if saved is not None:
            torch.set_grad_enabled(saved[0])
            torch.set_rng_state(saved[1])
    return build_dataset, infer_data_job, load


build_dataset, infer_data_job, load = _import_vlmeval()

from PIL import Image as PILImage

from codedance.integrations.vlmeval_adapter import FAIL_MSG, register, vlmeval_model_class
from codedance.policy.replay_server import ReplayServer, ServerReply

pytestmark = pytest.mark.tier("integration")

CODE = "<think>look</think><code>\n```python\nprint(6 * 7, input_image.size[0] > 0)\n```\n</code>"
DATASET = "CodeDanceSix"


def _text(content) -> str:
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)


def script(body: dict) -> str:
    messages = body["messages"]
    if not any(m["role"] == "assistant" for m in messages):
        return CODE
    return (
        "<think>ran</think><answer>A</answer>"
        if "42 True" in _text(messages[-1]["content"])
        else "<answer>B</answer>"
    )


def _png(color) -> str:
    buffer = io.BytesIO()
    PILImage.new("RGB", (40, 30), color).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


@pytest.fixture
def lmudata(tmp_path, monkeypatch):
    """A custom MCQ benchmark as VLMEvalKit reads it: ``$LMUData/<name>.tsv`` with base64 images."""
    import pandas as pd

    root = tmp_path / "LMUData"
    root.mkdir()
    rows = [
        {
            "index": i,
            "image": _png((60 * i, 90, 30)),
            "question": f"What is six times seven? ({i})",
            "A": "42",
            "B": "13",
            "answer": "A",
        }
        for i in range(3)
    ]
    pd.DataFrame(rows).to_csv(root / f"{DATASET}.tsv", sep="\t", index=False)
    monkeypatch.setenv("LMUData", str(root))
    monkeypatch.setenv("PRED_FORMAT", "tsv")
    monkeypatch.setenv("EVAL_FORMAT", "csv")
    return root


def test_infer_data_job_runs_episodes_in_the_sandbox_and_vlmevalkit_scores_them(tmp_path, lmudata):
    seen = []
    with ReplayServer(script) as server:
        register(
            "codedance-test",
            model_url=server.url,
            model_name="scripted",
            records=True,
            on_trajectory=lambda dataset, t: seen.append((dataset, t)),
        )
        dataset = build_dataset(DATASET)
        assert type(dataset).__name__ == "CustomMCQDataset"
        work = tmp_path / "work"
        work.mkdir()
        model = infer_data_job(
            "codedance-test",
            work_dir=str(work),
            model_name="codedance-test",
            dataset=dataset,
            api_nproc=2,
        )
    assert isinstance(model, vlmeval_model_class())
    assert getattr(model, "is_api", False)

    # the dataset's own MCQ prompt reached the model with the image
    first = [r for r in server.requests if len(r["messages"]) == 2]
    assert len(first) == 3 and len(server.requests) == 6  # code turn + answer turn per sample
    user = first[0]["messages"][-1]["content"]
    assert any(p["type"] == "image_url" for p in user)
    assert "Options:\nA. 42\nB. 13" in _text(user)

    predictions = work / f"codedance-test_{DATASET}.tsv"
    table = load(str(predictions))
    assert list(table["prediction"]) == ["A", "A", "A"]
    records = [
        r if isinstance(r, dict) else json.loads(r.replace("'", '"').replace("None", "null"))
        for r in table["extra_records"]
    ]
    assert [r["tool_call_status"] for r in records] == [["ok"]] * 3
    assert {r["stop_reason"] for r in records} == {"answered"}

    assert len(seen) == 3 and {d for d, _ in seen} == {DATASET}
    assert all(t.tool_calls[0].stdout == "42 True\n" for _, t in seen)

    result = dataset.evaluate(str(predictions), model="exact_matching", nproc=1)
    assert float(result["Overall"].iloc[0]) == 1.0


def test_a_failed_sample_is_vlmevalkits_fail_message_and_is_redone_on_the_next_run(
    tmp_path, lmudata
):
    broken = {"on": True}

    def flaky(body):
        if broken["on"] and "(1)" in _text(body["messages"][1]["content"]):
            return ServerReply(status=400, error="bad request for sample 1")
        return script(body)

    with ReplayServer(flaky) as server:
        register("codedance-flaky", model_url=server.url, model_name="scripted")
        dataset = build_dataset(DATASET)
        work = tmp_path / "work"
        work.mkdir()
        infer_data_job(
            "codedance-flaky",
            work_dir=str(work),
            model_name="codedance-flaky",
            dataset=dataset,
            api_nproc=2,
        )  # the failure must not abort VLMEvalKit's run
        table = load(str(work / f"codedance-flaky_{DATASET}.tsv"))
        by_index = dict(zip(table["index"], table["prediction"], strict=True))
        assert by_index[0] == by_index[2] == "A"
        assert FAIL_MSG in by_index[1] and "400" in by_index[1]

        broken["on"] = False
        before = len(server.requests)
        dataset = build_dataset(
            DATASET
        )  # a rerun is a new run.py process (infer_data_job pops the images)
        infer_data_job(
            "codedance-flaky",
            work_dir=str(work),
            model_name="codedance-flaky",
            dataset=dataset,
            api_nproc=2,
        )
        assert len(server.requests) - before == 2  # only sample 1 was redone (code turn + answer)
        table = load(str(work / f"codedance-flaky_{DATASET}.tsv"))
        assert list(table["prediction"]) == ["A", "A", "A"]


def test_generate_takes_vlmevalkits_message_forms(tmp_path):
    image = tmp_path / "a.png"
    image.write_bytes(base64.b64decode(_png((10, 20, 30))))
    with ReplayServer(
        ["<think>t</think><answer>\\boxed{7}</answer>", "<think>t</think>so \\boxed{9}"]
    ) as server:
        model = vlmeval_model_class()(server.url, "scripted")
        # a list of strings: VLMEvalKit's preprocessing recognizes the path as an image
        assert model.generate([str(image), "Q one?"], dataset="X") == "7"  # as codedance scores it
        # a system item goes before the question text, not lost
        message = [
            {"type": "text", "value": "Be brief.", "role": "system"},
            {"type": "image", "value": str(image)},
            {"type": "text", "value": "Q two?"},
        ]
        assert model.generate(message, dataset="X") == "9"  # no <answer>: the last \boxed{}
    first, second = (_text(r["messages"][-1]["content"]) for r in server.requests)
    assert (
        "Q one?" in first
        and sum(p["type"] == "image_url" for p in server.requests[0]["messages"][-1]["content"])
        == 1
    )
    assert second.index("Be brief.") < second.index("Q two?")
    with pytest.raises(AssertionError):  # VLMEvalKit's own check: video is not an allowed type
        model.generate([{"type": "video", "value": str(image)}, {"type": "text", "value": "Q?"}])


def test_run_py_through_the_launcher(tmp_path, lmudata):
    import vlmeval

    checkout = Path(vlmeval.__file__).resolve().parent.parent
    if not (checkout / "run.py").is_file():
        pytest.skip(f"no VLMEvalKit run.py beside {vlmeval.__file__} (not an editable checkout)")
    work = tmp_path / "work"
    with ReplayServer(script) as server:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "codedance.integrations.vlmeval_adapter",
                "--vlmevalkit",
                str(checkout),
                "--model-url",
                server.url,
                "--model-name",
                "scripted",
                "--max-turns",
                "4",
                "--",
                "--data",
                DATASET,
                "--model",
                "codedance",
                "--work-dir",
                str(work),
                "--judge",
                "exact_matching",
                "--api-nproc",
                "2",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
            env=os.environ.copy(),
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(server.requests) == 6
    (acc,) = work.glob(f"codedance/*/codedance_{DATASET}_acc.csv")
    assert "Overall" in acc.read_text() and float(load(str(acc))["Overall"].iloc[0]) == 1.0


def test_importing_vlmeval_here_left_torch_and_ssl_as_they_were():
    torch = pytest.importorskip("torch")
    assert torch.is_grad_enabled()  # VLMEvalKit's import turns it off process-wide
    assert ssl._create_default_https_context is ssl.create_default_context
