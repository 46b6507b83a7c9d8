"""Test tiers, assigned by where a test lives (torchtune's split: the default run is the unit tier).

- ``unit`` (the default of a plain ``pytest``, seconds): pure logic, doctests, HTTP against an
  in-process replay server; no sandbox, no torch, no verl.
- ``integration``: the real sandbox end to end (sandbox, teacher, demo, synth, eval runner, solve,
  the batch driver, the loop on a real sandbox, the hostile suites).
- ``torch``: tiny models built from configs (train/, TRL, the transformers backend).
- ``verl``: the verl plugin against verl's own classes.
- ``slow``: the longest end-to-end runs (also in their own tier above).

``scripts/run-tests.sh`` (CI and the README's command) runs every tier (``-m ""``); select one
with ``-m integration``, ``-m "unit or torch"``, ...
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
TIERS: dict[str, tuple[str, ...]] = {
    "verl": ("integrations/verl/", "test_tool_call_definition.py::test_verl_metrics_agree",
             "test_advantages.py::test_matches_verl_grpo_on_random_batches"),
    "torch": ("train/", "policy/test_transformers_qwen.py", "data/test_sft_roundtrip.py"),
    "integration": ("sandbox/", "data/", "curate/", "teacher/", "eval/test_runner.py", "eval/test_failure_paths.py", "eval/test_cli.py",
                    "eval/test_vlmeval_adapter.py", "policy/test_vllm_recordings.py", "test_demo.py",
                    "test_synth_run.py", "test_synth_verify.py", "test_synth_records.py", "test_runs.py",
                    "test_solve_cmd.py", "test_console.py", "test_rollout.py"),
}
SLOW = ("sandbox/test_hostile_holder.py", "test_demo.py", "test_synth_run.py", "eval/test_failure_paths.py")


def tier_of(item: pytest.Item) -> str:
    path = Path(str(item.fspath)).resolve()
    if ROOT not in path.parents:
        return "verl" if "integrations" in path.parts else "unit"  # the package's doctests
    rel = path.relative_to(ROOT).as_posix()
    node = f"{rel}::{item.name.split('[')[0]}"
    for tier, prefixes in TIERS.items():
        if any(node.startswith(p) or rel == p or (p.endswith("/") and rel.startswith(p)) for p in prefixes):
            return tier
    return "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item)))
        rel = Path(str(item.fspath)).resolve()
        if ROOT in rel.parents and rel.relative_to(ROOT).as_posix() in SLOW:
            item.add_marker(pytest.mark.slow)
