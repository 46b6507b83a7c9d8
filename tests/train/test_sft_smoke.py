"""TRL SFT on scripted trajectories with a very small Qwen2.5-VL: the loss falls, labels cover
only the model's turns, the saved model reloads with identical logits, and a rerun resumes."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("trl")

from codedance.train.config import SFTStage
from codedance.train.sft import TrajectoryCollator, encode_all, run_sft
from codedance.train.tiny import load_policy
from tests.train.helpers import corpus, tiny

pytestmark = pytest.mark.tier("torch")


def test_labels_are_the_model_turns_only() -> None:
    trajectories = corpus()
    _, processor = tiny(trajectories)
    encoded = encode_all(trajectories, processor, 512)
    batch = TrajectoryCollator(encoded, processor)([{"index": 0}, {"index": 1}])
    tok = processor.tokenizer
    labels = batch["labels"][0]
    kept = tok.decode([int(x) for x in labels[labels != -100]])
    assert kept == "".join(t.text + "<|im_end|>" for t in trajectories[0].turns)
    assert batch["pixel_values"].shape[0] > 0 and batch["image_grid_thw"].shape == (
        3,
        3,
    )  # 2 + 1 images


def test_sft_loss_falls_and_the_checkpoint_reloads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trajectories = corpus()
    torch.manual_seed(0)
    model, processor = tiny(trajectories)
    stage = SFTStage(
        epochs=1,
        max_steps=5,
        batch_size=9,
        per_device_batch=9,
        lr=3e-3,
        warmup_ratio=0.0,
        logging_steps=1,
        gradient_checkpointing=False,
    )
    result = run_sft(model, processor, trajectories, stage, tmp_path, max_length=512)
    losses = [loss for _, loss in result.losses]
    assert result.steps == 5 and len(losses) == 5
    assert losses[-1] < 0.85 * losses[0]
    logged = [json.loads(line) for line in (tmp_path / "sft_log.jsonl").read_text().splitlines()]
    assert [(int(r["step"]), r["loss"]) for r in logged] == list(
        result.losses
    )  # the report's SFT curve
    assert all(isinstance(v, float) for r in logged for v in r.values())
    loaded, proc2 = load_policy(tmp_path / "final")
    batch = TrajectoryCollator(encode_all(trajectories[:2], proc2, 512), proc2)(
        [{"index": 0}, {"index": 1}]
    )
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(**inputs).logits, loaded.eval()(**inputs).logits, atol=1e-5)
    # a rerun with more steps resumes from the saved TRL checkpoint instead of starting over
    more = run_sft(
        loaded,
        proc2,
        trajectories,
        SFTStage(
            epochs=1,
            max_steps=6,
            batch_size=9,
            per_device_batch=9,
            lr=3e-3,
            warmup_ratio=0.0,
            logging_steps=1,
            gradient_checkpointing=False,
        ),
        tmp_path,
        max_length=512,
    )
    assert (
        more.steps == 6 and min(s for s, _ in more.losses) == 1
    )  # history carried over from the checkpoint
