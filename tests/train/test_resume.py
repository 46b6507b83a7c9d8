"""Resume after a kill: a run killed with SIGKILL in the middle of its SFT or GRPO stage, rerun,
continues from its checkpoint's weights, optimizer, schedule and RNG, so its losses and final
weights equal an uninterrupted run's (one torch thread: the runs are deterministic); and a
checkpoint whose weights do not load completely is refused, naming it, never trained on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("trl")

from codedance.errors import CheckpointError

pytestmark = pytest.mark.tier("torch")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHILD = HERE / "resume_child.py"


def child(
    kind: str, out: Path, steps: int, block_at: int = -1, pause: float = 600
) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    args = [sys.executable, str(CHILD), kind, str(out), str(steps)] + (
        [str(block_at), str(pause)] if block_at > 0 else []
    )
    log = open(out.parent / f"{out.name}.log", "a")  # noqa: SIM115 (the child writes it)
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=HERE)


def losses(out: Path) -> dict[int, float]:
    """Step -> loss of the child's latest run into `out` (the log holds every run, in turn)."""
    runs = (out.parent / f"{out.name}.log").read_text().split("=== run\n")
    return {
        int(r["step"]): r["loss"]
        for r in (json.loads(line) for line in runs[-1].splitlines() if line.startswith("{"))
    }


def mark_run(out: Path) -> None:
    with open(out.parent / f"{out.name}.log", "a") as log:
        log.write("=== run\n")


def finish(proc: subprocess.Popen, out: Path) -> str:
    assert proc.wait(timeout=280) == 0, (out.parent / f"{out.name}.log").read_text()[-3000:]
    return (out.parent / f"{out.name}.log").read_text()


def signal_when_blocked(proc: subprocess.Popen, out: Path, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to the child once it has reported its blocking step (it is mid-stage: more to do)."""
    log = out.parent / f"{out.name}.log"
    deadline = time.monotonic() + 280
    while "blocked" not in log.read_text():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the child never reached its blocking step"
        time.sleep(0.2)
    os.kill(proc.pid, sig)
    proc.wait(timeout=120)


def weights(path: Path) -> dict[str, torch.Tensor]:
    from codedance.train.tiny import load_policy

    return load_policy(path)[0].state_dict()


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        torch.testing.assert_close(value, b[key], rtol=1e-5, atol=1e-6, msg=key)


@pytest.fixture(scope="module")
def sft_reference(tmp_path_factory) -> tuple[dict[int, float], Path]:  # type: ignore[no-untyped-def]
    """An uninterrupted 8-step SFT run: its losses and its final model folder."""
    whole = tmp_path_factory.mktemp("sft") / "whole"
    finish(child("sft", whole, 8), whole)
    return losses(whole), whole / "final"


def test_sft_killed_mid_stage_resumes_from_its_checkpoint(tmp_path, sft_reference) -> None:  # type: ignore[no-untyped-def]
    reference, reference_final = sft_reference
    cut = tmp_path / "cut"
    signal_when_blocked(
        child("sft", cut, 8, block_at=6), cut
    )  # checkpoint-4 written, steps 5, 6 done: SIGKILL
    assert (cut / "checkpoint-4" / "trainer_state.json").exists() and not (cut / "final").exists()
    before = losses(cut)
    assert max(before) == 6
    mark_run(cut)
    resumed_log = finish(child("sft", cut, 8), cut)  # the same command again: resumes
    after = losses(cut)
    assert sorted(after) == [5, 6, 7, 8]
    for step in after:  # what the uninterrupted run computed at the same step
        assert after[step] == pytest.approx(reference[step], rel=1e-5), (
            step,
            before,
            after,
            reference,
        )
    assert after[5] == pytest.approx(before[5], rel=1e-5)  # the killed run's step 5, again
    assert after[5] < reference[1] - 0.5  # trained on: a fresh model scores about its step-1 loss
    assert_same_weights(weights(cut / "final"), weights(reference_final))
    assert "resuming at step 4 from" in resumed_log
    print(
        f"sft SIGKILL: losses before the kill {before}, after resume {after}, uninterrupted {reference}"
    )


def test_sft_sigterm_saves_the_step_in_progress_and_resumes_from_it(
    tmp_path, sft_reference
) -> None:  # type: ignore[no-untyped-def]
    reference, reference_final = sft_reference
    cut = tmp_path / "cut"
    stopped = child(
        "sft", cut, 8, block_at=5, pause=10
    )  # SIGTERM while step 5 is logged: step 6 ends it
    signal_when_blocked(stopped, cut, signal.SIGTERM)
    log = (tmp_path / "cut.log").read_text()
    assert stopped.returncode != 0 and "KeyboardInterrupt" in log, log[-3000:]
    assert f"sft: stopped on SIGTERM after step 6, saved in {cut / 'checkpoint-6'}" in log
    assert (cut / "checkpoint-6" / "trainer_state.json").exists() and not (cut / "final").exists()
    before = losses(cut)
    mark_run(cut)
    assert "resuming at step 6 from" in finish(child("sft", cut, 8), cut)
    after = losses(cut)
    assert sorted(after) == [7, 8]
    for step in after:
        assert after[step] == pytest.approx(reference[step], rel=1e-5), (
            step,
            before,
            after,
            reference,
        )
    assert_same_weights(weights(cut / "final"), weights(reference_final))
    print(f"sft SIGTERM: losses before {before}, after resume {after}, uninterrupted {reference}")


def test_grpo_killed_mid_stage_resumes_from_its_checkpoint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    straight = child("grpo", whole, 4)
    killed = child(
        "grpo", cut, 4, block_at=3
    )  # checkpoint step-2 written, step 3 done, then SIGKILL
    signal_when_blocked(killed, cut)
    finish(straight, whole)
    before = losses(cut)
    mark_run(cut)
    assert "resumed at step 2" in finish(child("grpo", cut, 4), cut)
    after, reference = losses(cut), losses(whole)
    assert sorted(after) == [3, 4]
    for step in after:
        assert after[step] == pytest.approx(reference[step], rel=1e-5, abs=1e-7), (
            step,
            after,
            reference,
        )
    assert after[3] == pytest.approx(before[3], rel=1e-5, abs=1e-7)
    rows = [json.loads(line) for line in (cut / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # the killed run's step 3 is not kept twice
    assert (
        len((cut / "rollouts" / "step-3.jsonl").read_text().splitlines()) == 4
    )  # nor its rollouts
    assert_same_weights(
        weights(cut / "checkpoints" / "step-4"), weights(whole / "checkpoints" / "step-4")
    )
    assert not all(
        torch.equal(a, b)
        for a, b in zip(
            weights(cut / "checkpoints" / "step-2").values(),
            weights(cut / "checkpoints" / "step-4").values(),
            strict=True,
        )
    )
    print(f"grpo losses: before the kill {before}, after resume {after}, uninterrupted {reference}")


def test_grpo_sigterm_saves_the_step_in_progress_and_resumes_from_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    straight = child("grpo", whole, 4)
    stopped = child(
        "grpo", cut, 4, block_at=3, pause=10
    )  # SIGTERM while step 3 reports: step 3 is saved
    signal_when_blocked(stopped, cut, signal.SIGTERM)
    finish(straight, whole)
    log = (tmp_path / "cut.log").read_text()
    assert stopped.returncode != 0 and "KeyboardInterrupt" in log, log[-3000:]
    assert (
        f"grpo: stopped on SIGTERM after step 3, saved in {cut / 'checkpoints' / 'step-3'}" in log
    )
    mark_run(cut)
    assert "resumed at step 3" in finish(child("grpo", cut, 4), cut)
    after, reference = losses(cut), losses(whole)
    assert sorted(after) == [4]
    assert after[4] == pytest.approx(reference[4], rel=1e-5, abs=1e-7), (after, reference)
    assert_same_weights(
        weights(cut / "checkpoints" / "step-4"), weights(whole / "checkpoints" / "step-4")
    )


def drop_tensors(folder: Path, prefix: str) -> None:
    """Rewrite ``folder/model.safetensors`` without the tensors whose names start with `prefix`."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(path)
    save_file(
        {k: v for k, v in tensors.items() if not k.startswith(prefix)},
        path,
        metadata={"format": "pt"},
    )


def test_sft_passes_over_a_checkpoint_cut_short_and_refuses_one_whose_weights_do_not_load(
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    import shutil

    from codedance.train.config import SFTStage
    from codedance.train.sft import run_sft
    from tests.train.helpers import corpus, tiny

    trajectories = corpus()
    stage = SFTStage(
        epochs=1,
        max_steps=4,
        batch_size=9,
        per_device_batch=9,
        lr=3e-3,
        warmup_ratio=0.0,
        logging_steps=1,
        gradient_checkpointing=False,
    )  # a checkpoint at step 4
    run_sft(*tiny(trajectories), trajectories, stage, tmp_path, max_length=512)
    # a kill while the Trainer wrote checkpoint-8: its weights are there, its trainer state is not
    shutil.copytree(tmp_path / "checkpoint-4", tmp_path / "checkpoint-8")
    (tmp_path / "checkpoint-8" / "trainer_state.json").unlink()
    lines: list[str] = []
    assert (
        run_sft(
            *tiny(trajectories), trajectories, stage, tmp_path, max_length=512, log=lines.append
        ).steps
        == 4
    )
    assert (
        f"sft: {tmp_path / 'checkpoint-8'} is incomplete (stopped while saving); passed over"
        in lines
    )
    assert any(
        line.startswith(f"sft: resuming at step 4 from {tmp_path / 'checkpoint-4'}")
        for line in lines
    )

    shutil.rmtree(tmp_path / "checkpoint-8")
    drop_tensors(tmp_path / "checkpoint-4", "visual.")
    with pytest.raises(CheckpointError) as refused:
        run_sft(*tiny(trajectories), trajectories, stage, tmp_path, max_length=512)
    message = str(refused.value)
    assert message.startswith(
        f"{tmp_path / 'checkpoint-4'}: its weights do not load completely (missing keys: "
    )
    assert "delete that folder" in message and "\n" not in message


def test_grpo_and_load_policy_refuse_weights_that_do_not_load_completely(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from codedance.rollout import EpisodeSettings
    from codedance.train.checkpoint import save_checkpoint
    from codedance.train.config import GRPOStage, RolloutSettings
    from codedance.train.grpo import GRPOTrainer
    from codedance.train.tiny import load_policy, save_policy
    from tests.train.helpers import FakeRunner, corpus, task, tiny

    def trainer() -> GRPOTrainer:
        model, processor = tiny(corpus())
        return GRPOTrainer(
            model,
            processor,
            GRPOStage(steps=1, prompts_per_step=2, group_size=2),
            RolloutSettings(),
            EpisodeSettings(),
            [task(0)],
            tmp_path / "grpo",
            make_runner=FakeRunner,
            threads=1,
        )

    t = trainer()
    saved = save_checkpoint(t.out, 1, t.model, t.processor, t.optimizer)
    drop_tensors(saved, "model.layers.1.")
    with pytest.raises(
        CheckpointError,
        match=r"step-1: its weights do not load completely \(missing keys: "
        r"model\.language_model\.layers\.1\.",
    ):
        trainer().resume()

    save_policy(tmp_path / "final", t.model, t.processor)
    drop_tensors(tmp_path / "final", "model.embed_tokens.")
    with pytest.raises(CheckpointError, match=r"final: its weights do not load completely"):
        load_policy(tmp_path / "final")
