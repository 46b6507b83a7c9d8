"""One real verl GRPO step on the CPU, end to end: ``codedance verl train --preset cpu-smoke``.

verl's own ``main_ppo`` with the v1 trainer on a real Ray cluster and TransferQueue, our agent loop
with the real sandbox, verl's reward loop with our ``compute_score``, the ``codedance_paper``
estimator in our ``codedance_sync`` trainer, the actor update on FSDP2/gloo and the weight sync
to the ``hf`` rollout server. Only the model's choices of one rollout per prompt are scripted
(the ``scripted-first`` test policy), so that the groups' rewards differ. About 1-2 minutes on 2
cores, most of it Ray and worker start-up.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

pytest.importorskip("verl")
pytest.importorskip("ray")

pytestmark = [pytest.mark.tier("verl"), pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("verl-cpu")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "RAY_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from codedance.cli import main; main()",
            "verl",
            "train",
            "--preset",
            "cpu-smoke",
            f"out_dir={out}",
        ],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    log = (out / "train.log").read_text() if (out / "train.log").exists() else ""
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{log[-6000:]}"
    assert "step:1 actor/grad_norm:" in done.stdout  # the command's per-step summary
    return out


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_one_step_with_a_real_update(run):
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1]
    m = rows[0]["data"]
    grad = m["actor/grad_norm"]
    assert math.isfinite(grad) and grad > 0
    assert m["critic/advantages/max"] > 0 > m["critic/advantages/min"]
    # the server's log-probs are the ones the FSDP actor recomputes
    assert m["training/rollout_probs_diff_max"] < 0.05


def test_estimator_and_sandbox_metrics(run):
    m = read_jsonl(run / "metrics.jsonl")[0]["data"]
    for key in (
        "accuracy",
        "d_mean",
        "mu_mean",
        "reward_total_mean",
        "r_tool_mean",
        "a_seq_abs_mean",
        "a_turn_mean",
        "a_turn_std",
        "stop_answered",
        "exec_success",
    ):
        assert math.isfinite(m[f"codedance/{key}"]), key
    assert m["codedance/a_seq_abs_mean"] > 0
    statuses = {
        k: v
        for k, v in m.items()
        if k.startswith("codedance/calls_") and k != "codedance/calls_per_traj"
    }
    assert set(statuses) == {
        f"codedance/calls_{s}"
        for s in ("ok", "error", "timeout", "crashed", "oom", "refused", "lost")
    }
    n_traj = 2 * 2  # train_batch_size x rollout.n
    assert sum(statuses.values()) == pytest.approx(m["codedance/calls_per_traj"] * n_traj)
    assert statuses["codedance/calls_ok"] >= 2  # each group's scripted rollout ran its snippet


def test_updated_weights_reach_the_rollout_server(run):
    loads = read_jsonl(run / "weight_sync.jsonl")
    assert [load["global_steps"] for load in loads] == [0, 1]
    assert all(load["unknown"] == [] and load["not_updated"] == 0 for load in loads)
    assert loads[0]["max_abs_delta"] == 0.0  # the initial sync: the same checkpoint
    assert loads[1]["max_abs_delta"] > 0.0  # after the update: changed weights
