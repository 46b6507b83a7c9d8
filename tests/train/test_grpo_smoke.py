"""GRPO trainer on a very small Qwen2.5-VL: real loop and rewards/advantages, update direction,
finite metrics, checkpoint and resume. Uses `FakeRunner` (no sandbox) to stay fast."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from codedance.rollout import EpisodeSettings
from codedance.train.config import GRPOStage, RolloutSettings
from codedance.train.grpo import GRPOTrainer, Rollouts
from codedance.train.loss import collate, token_logprobs
from tests.train.helpers import FakeRunner, corpus, task, tiny

pytestmark = pytest.mark.tier("torch")

ROLL = RolloutSettings(max_tokens=24, max_length=512, max_pixels=56 * 56)
EPISODE = EpisodeSettings(max_turns=3, prompt_profile="paper")


def trainer(tmp_path, **kw):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model, processor = tiny(corpus())
    stage = GRPOStage(
        steps=2,
        prompts_per_step=2,
        group_size=2,
        lr=1e-3,
        micro_batch=2,
        save_every=1,
        save_rollouts=False,
        **kw,
    )
    return GRPOTrainer(
        model,
        processor,
        stage,
        ROLL,
        EPISODE,
        [task(i) for i in range(4)],
        tmp_path,
        make_runner=lambda images: FakeRunner(images),
        threads=1,
    )


def test_steps_log_finite_metrics_and_resume_exactly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t = trainer(tmp_path)
    rows = []
    t.train(on_step=rows.append)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        for key in (
            "loss",
            "entropy",
            "grad_norm",
            "accuracy",
            "calls",
            "reward/total",
            "logprob_gap",
            "tokens",
        ):
            assert math.isfinite(r[key]), key
        assert r["logprob_gap"] < 0.05  # generation and training see the same tokens
    weights = {k: v.clone() for k, v in t.model.state_dict().items()}
    again = trainer(tmp_path)
    assert again.resume() == 2
    for k, v in again.model.state_dict().items():
        assert torch.equal(v, weights[k]), k
    assert again.optimizer.state_dict()["state"]  # Adam moments restored
    again.train(steps=3)
    assert (tmp_path / "checkpoints" / "step-3").exists()


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean"])
def test_an_update_raises_the_logprob_of_positive_advantage_tokens(tmp_path, aggregation) -> None:  # type: ignore[no-untyped-def]
    t = trainer(tmp_path, aggregation=aggregation)
    ro: Rollouts = t.collect(0)
    if not (ro.advantages != 0).any():  # all rollouts equal: force a signal so the test can judge
        mask = list(ro.encoded[0].loss_mask)
        ro.advantages[0, : len(mask)] = mask
    batch = collate(ro.encoded, t.processor, t.processor.tokenizer.pad_token_id)
    adv = (
        torch.tensor(ro.advantages[:, : batch["input_ids"].shape[1]])[:, 1:]
        * batch["loss_mask"][:, 1:]
    )

    def objective() -> float:
        with torch.no_grad():
            return float((token_logprobs(t.model, batch)[0] * adv).sum())

    before = objective()
    t.update(ro)
    assert objective() > before


def test_resume_restores_a_model_that_was_loaded_from_disk(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The pipeline's GRPO starts from a loaded ``sft/final``; its checkpoints' tensor names are
    the saved format's, so resume must load them as a checkpoint, not by raw state-dict keys."""
    from codedance.train.tiny import load_policy, save_policy

    torch.manual_seed(0)
    model, processor = tiny(corpus())
    save_policy(tmp_path / "init", model, processor)

    def loaded_trainer():  # type: ignore[no-untyped-def]
        m, p = load_policy(tmp_path / "init")
        stage = GRPOStage(
            steps=1,
            prompts_per_step=2,
            group_size=2,
            lr=1e-2,
            micro_batch=2,
            save_every=1,
            save_rollouts=False,
        )
        return GRPOTrainer(
            m,
            p,
            stage,
            ROLL,
            EPISODE,
            [task(i) for i in range(4)],
            tmp_path / "grpo",
            make_runner=lambda images: FakeRunner(images),
            threads=1,
        )

    from codedance.train.checkpoint import save_checkpoint

    t = loaded_trainer()
    with torch.no_grad():  # a trained model's weights, whatever the step's advantages were
        for param in t.model.parameters():
            param.add_(0.01)
    save_checkpoint(t.out, 1, t.model, t.processor, t.optimizer, 2)
    trained = {k: v.clone() for k, v in t.model.state_dict().items()}
    again = loaded_trainer()
    assert again.resume() == 1
    for k, v in again.model.state_dict().items():
        assert torch.equal(v, trained[k]), k
