"""The ablation summary over seeds: stage names parsed into (stage, seed), Student-t intervals,
claims decided on per-seed values (never on one seed), the markdown table and curves written."""

from __future__ import annotations

import json
import math

import pytest

from codedance.records import append_jsonl
from codedance.train.seeds import claims, interval, write_summary

pytestmark = pytest.mark.tier("torch")


def _eval(out, name, **metrics):  # type: ignore[no-untyped-def]
    (out / "eval").mkdir(parents=True, exist_ok=True)
    (out / "eval" / f"{name}.json").write_text(json.dumps(metrics))


def test_interval_is_the_student_t_one():
    mean, low, high = interval([1.0, 2.0, 3.0])
    assert math.isclose(mean - low, high - mean)
    assert mean == 2.0 and math.isclose(high - mean, 4.303 * 1.0 / math.sqrt(3), rel_tol=1e-9)
    assert math.isnan(interval([0.5])[1])


def test_summary_reads_seeded_stages_and_decides_claims(tmp_path):
    _eval(
        tmp_path, "after-sft", **{"p_direct/easy": 0.5, "p_direct/hard": 0.5, "accuracy/hard": 0.4}
    )
    for seed, (easy, hard) in enumerate([(0.9, 0.1), (0.8, 0.2), (0.85, 0.05)]):
        _eval(
            tmp_path,
            f"after-grpo-paper-s{seed}",
            **{
                "p_direct/easy": easy,
                "p_direct/hard": hard,
                "accuracy/hard": 0.5,
                "exec_success": 0.9,
            },
        )
        _eval(tmp_path, f"after-grpo-outcome-only-s{seed}", **{"p_direct/easy": 0.5 + 0.01 * seed})
        (tmp_path / f"grpo-paper-s{seed}").mkdir()
        append_jsonl(
            tmp_path / f"grpo-paper-s{seed}" / "metrics.jsonl", {"step": 1, "calls/easy": easy}
        )
    append_jsonl(tmp_path / "timings.jsonl", {"seed": 0, "stage": "paper-s0", "seconds": 61.0})
    data = write_summary(tmp_path)
    assert data["stages"]["after-grpo-paper"]["seeds"] == [0, 1, 2]
    assert data["stages"]["after-sft"]["seeds"] == [0]
    verdicts = {c["claim"]: c["verdict"] for c in data["claims"]}
    assert verdicts["R_BAT: calls on easy items fall well below calls on hard items"] == "holds"
    assert verdicts["R_BAT: calls on easy items fall from the SFT policy's"] == "holds"
    assert verdicts["outcome-only: calls on easy items stay near the SFT policy's"] == "holds"
    assert verdicts["outcome-only leaves more calls on easy items than R_BAT"] == "holds"
    assert verdicts["w/o R_turn: execution success is lower"] == "not run"
    text = (tmp_path / "ablation.md").read_text()
    assert "| after-grpo-paper | 3 | " in text and "| 0 | paper-s0 | 61 |" in text
    assert (tmp_path / "curves.png").exists()


def test_one_seed_never_makes_a_claim_hold():
    evals = {
        "after-sft": {0: {"p_direct/easy": 0.5}},
        "after-grpo-paper": {0: {"p_direct/easy": 1.0, "p_direct/hard": 0.0}},
    }
    rows = {c["claim"]: c for c in claims(evals)}
    assert (
        rows["R_BAT: calls on easy items fall well below calls on hard items"]["verdict"]
        == "does not hold"
    )
    assert rows["R_BAT: calls on easy items fall well below calls on hard items"]["n"] == 1


def _seeded_layout(tmp_path, copies):  # type: ignore[no-untyped-def]
    """Three SFT seeds in ``sft-s<k>/`` with their p_copy, pushes and GRPO evals."""
    for seed, copy in enumerate(copies):
        sub = tmp_path / f"sft-s{seed}"
        _eval(
            sub,
            "after-sft",
            **{
                "p_direct/easy": 0.5,
                "p_direct/hard": 0.5,
                "accuracy/hard": 0.2,
                "p_copy/hard": copy,
            },
        )
        _eval(
            sub,
            f"after-grpo-paper-s{seed}",
            **{"p_direct/easy": 0.8 + 0.01 * seed, "p_direct/hard": 0.45, "accuracy/hard": 0.1},
        )
        _eval(
            sub,
            f"after-grpo-outcome-only-s{seed}",
            **{"p_direct/easy": 0.5, "p_direct/hard": 0.5 + 0.01 * seed},
        )
        pushes = {
            name: {
                label: {"push": push, "p_call": 0.5, "delta": 0, "delta_seq": 0, "delta_turn": 0}
                for label, push in (("easy", easy - 0.01 * seed), ("hard", 0.2))
            }
            for name, easy in (("paper", -0.5), ("outcome-only", 0.0))
        }
        (sub / "pushes.json").write_text(json.dumps(pushes))


def test_sft_seeds_pair_with_their_grpo_and_pushes_sit_beside_the_move(tmp_path):
    _seeded_layout(tmp_path, copies=[0.02, 0.01, 0.03])
    data = write_summary(tmp_path, publish=tmp_path / "docs")
    assert (tmp_path / "docs" / "ablation.md").read_text() == (tmp_path / "ablation.md").read_text()
    assert (tmp_path / "docs" / "ablation.json").exists()
    assert data["stages"]["after-sft"]["seeds"] == [0, 1, 2]
    paper = data["pushes"]["paper"]
    assert paper["push/easy"] == pytest.approx([-0.5, -0.51, -0.52])
    assert paper["dp_direct/easy"] == pytest.approx([0.3, 0.31, 0.32])
    assert paper["dp_direct/hard"] == pytest.approx([-0.05] * 3)
    verdicts = {c["claim"]: c["verdict"] for c in data["claims"]}
    assert verdicts["R_BAT: calls on easy items fall well below calls on hard items"] == "holds"
    assert verdicts["R_BAT: the easy − hard call gap is wider than outcome-only's"] == "holds"
    assert verdicts["R_BAT: calls on hard items do not fall"] == "holds"
    # no seed learned the copy: the accuracy claim is not judged on guesses
    assert verdicts["R_BAT: hard accuracy holds"].startswith("not tested")
    text = (tmp_path / "ablation.md").read_text()
    assert "| 1 | 0.010 | no |" in text and "| paper | -0.51 [" in text


def test_accuracy_claims_count_only_the_seeds_that_copy(tmp_path):
    _seeded_layout(tmp_path, copies=[0.5, 0.4, 0.01])
    rows = {c["claim"]: c for c in write_summary(tmp_path)["claims"]}
    accuracy = rows["R_BAT: hard accuracy holds"]
    assert accuracy["n"] == 2 and accuracy["verdict"] == "does not hold"  # −0.1 on both


def test_claims_not_run_when_only_the_sft_is_done(tmp_path):
    _eval(tmp_path / "sft-s0", "after-sft", **{"p_direct/easy": 0.5, "p_copy/hard": 0.01})
    assert {c["verdict"] for c in write_summary(tmp_path)["claims"]} == {"not run"}


def test_a_later_seed_gets_the_teacher_and_still_claims_its_folder(tmp_path):
    from codedance.train.config import load_config
    from codedance.train.pipeline import claim_run
    from codedance.train.seeds import seed_config, share_teacher

    config = load_config(["testbed"], [f"out_dir={tmp_path}"])
    teacher = tmp_path / "sft-s0" / "teacher"
    teacher.mkdir(parents=True)
    (teacher / "trajectories.jsonl").write_text("{}\n")
    later = seed_config(config, 1)
    share_teacher(teacher, later)
    assert (tmp_path / "sft-s1" / "teacher" / "trajectories.jsonl").read_text() == "{}\n"
    claim_run(later)  # what the SFT stage does next: its own folder, not someone else's
