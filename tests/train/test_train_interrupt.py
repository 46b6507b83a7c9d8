"""SIGTERM stops ``codedance train`` and ``codedance sft`` as Ctrl-C does, and the same command
again resumes: the real entry point in a subprocess, signalled mid-SFT. The step in progress
finishes and is saved as a checkpoint, the exit code is 130, nothing is left in the temporary
directory or the cgroups, and the rerun continues from that checkpoint (it does not start over).
A SIGKILL leaves the sandbox service's folders, which the next start's sweep removes."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

from tests.test_interrupt import leftovers, lines, start, terminate, wait_for_lines

pytestmark = [pytest.mark.tier("torch"), pytest.mark.slow]

SMALL = [  # batch 4, a checkpoint every 4 steps and at a stop; 12 steps with the epochs below
    "sft.batch_size=4",
    "sft.per_device_batch=4",
    "sft.logging_steps=1",
    "sft.gradient_checkpointing=false",
]


def wait_for_checkpoint(process, sft_dir: Path, step: int, timeout_s: float = 400) -> None:
    """Until the Trainer has finished writing ``checkpoint-<step>`` (its state is written last)."""
    deadline = time.monotonic() + timeout_s
    while not (sft_dir / f"checkpoint-{step}" / "trainer_state.json").is_file():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"no checkpoint-{step} after {timeout_s} s"
        time.sleep(0.1)


def newest_checkpoint(sft_dir: Path) -> int:
    return max(int(p.name.split("-")[1]) for p in sft_dir.glob("checkpoint-*"))


def sigterm_mid_sft(args: list[str], sft_dir: Path) -> int:
    """Run, SIGTERM once the first checkpoint (step 4) is written; the step the run saved at its
    stop (the one in progress at the signal)."""
    process = start(args)
    wait_for_checkpoint(process, sft_dir, 4)
    code, err = terminate(process)
    assert code == 130, err
    assert "interrupted: finished work is saved" in err and "Traceback" not in err
    assert leftovers(process.pid) == []
    stopped = newest_checkpoint(sft_dir)
    assert 4 < stopped < 12 and not (sft_dir / "final").exists()
    return stopped


def resumed_from(said: str, step: int) -> bool:
    """Whether the run's output says it resumed at `step` and trained from the step after it."""
    return (
        f"sft: resuming at step {step}" in said
        and f"sft step {step + 1}/12:" in said
        and "sft step 1/12:" not in said
    )


def test_train_resumes_after_a_sigkill_and_a_sigterm(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "run"
    args = [
        "train",
        "--stage",
        "sft",
        f"out_dir={out}",
        "threads=1",
        "sft.tasks.n=16",  # 16 sequences, 4 steps an epoch
        "sft.epochs=3",
        "eval.tasks.n=2",
        "rollout.max_tokens=16",
        "model.hidden=32",
        "model.layers=1",
        "model.intermediate=64",
        "model.vocab_size=512",
        *SMALL,
    ]
    teacher = out / "teacher" / "trajectories.jsonl"
    killed = start(args)  # SIGKILLed while the teacher runs: nothing can clean up
    wait_for_lines(killed, teacher, 1, timeout_s=400)
    assert leftovers(killed.pid), "the teacher's sandbox service should be running"
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=60)
    kept = lines(teacher)
    assert 1 <= kept < 16

    sft_dir = out / "sft"
    stopped = sigterm_mid_sft(args, sft_dir)  # the rerun's sandbox start swept the killed one's
    assert leftovers(killed.pid) == []
    assert lines(teacher) == 16  # the teacher resumed: the kept trajectories were not redone

    again = start(args)
    said, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert resumed_from(said, stopped) and "teacher: 16 trajectories" in said, said
    assert (sft_dir / "final" / "config.json").is_file()
    assert leftovers(again.pid) == []


def test_sigterm_stops_sft_and_a_rerun_resumes(tmp_path, monkeypatch):
    from codedance.records import ImageStore, append_jsonl, trajectory_json
    from codedance.train.tiny import save_policy
    from tests.train.helpers import corpus, tiny

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    data = tmp_path / "data"
    trajectories = corpus()[:8]
    store = ImageStore(data / "images")
    for i, trajectory in enumerate(trajectories):
        append_jsonl(data / "trajectories.jsonl", trajectory_json(trajectory, store, f"t{i}#0"))
    save_policy(tmp_path / "model", *tiny(trajectories, hidden=32))
    out = tmp_path / "sft"
    args = ["sft", "--data", str(data), "--model", str(tmp_path / "model"), "--out", str(out)]
    args += ["sft.epochs=6", *SMALL]  # 8 sequences, 2 steps an epoch
    stopped = sigterm_mid_sft(args, out)
    again = start(args)
    said, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert resumed_from(said, stopped), said
    assert (out / "final" / "config.json").is_file()
    assert leftovers(again.pid) == []
