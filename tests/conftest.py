"""Test tiers, assigned by where a test lives (torchtune's split: the default run is the unit tier).

- ``unit`` (the default of a plain ``pytest``, seconds): pure logic, doctests, HTTP against an
  in-process replay server; no sandbox, no torch, no verl.
- ``integration``: the real sandbox end to end (sandbox, teacher, demo, synth, eval runner, solve,
  the batch driver, the loop on a real sandbox, the hostile suites), and the bundled MathVision
  testmini read whole (304 real images decoded and re-encoded: half a minute on a busy machine).
- ``torch``: tiny models built from configs (train/, TRL, the transformers backend).
- ``verl``: the verl plugin against verl's own classes.
- ``slow``: the longest end-to-end runs (also in their own tier above).

``scripts/run-tests.sh`` (CI and the README's command) runs every tier (``-m ""``); select one
with ``-m integration``, ``-m "unit or torch"``, ... A test file none of whose tests the ``-m``
expression can select is not imported (`codedance.conftest.may_select`): the unit tier does not
pay for importing torch, verl or the sandbox's test helpers. The package's doctests take their
tier from `codedance.conftest.doctest_tier`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codedance.conftest import may_select

# every service the suite starts (the sandbox's, the demo's, the eval runner's, and the
# controllers of subprocess tests, which inherit this) leaves the host's fs.file-max as it is:
# the raise is tested with a fake sysctl (tests/sandbox/test_units.py), never on a shared host
os.environ.setdefault("CODEDANCE_KEEP_FILE_MAX", "1")

ROOT = Path(__file__).resolve().parent
TIERS: dict[str, tuple[str, ...]] = {
    "verl": ("integrations/verl/", "test_tool_call_definition.py::test_verl_metrics_agree",
             "test_advantages.py::test_matches_verl_grpo_on_random_batches"),
    "torch": ("train/", "policy/test_transformers_qwen.py", "data/test_sft_roundtrip.py"),
    "integration": ("sandbox/", "data/", "curate/", "teacher/", "eval/test_runner.py", "eval/test_failure_paths.py", "eval/test_cli.py",
                    "eval/test_vlmeval_adapter.py", "policy/test_vllm_recordings.py", "test_demo.py",
                    "test_synth_run.py", "test_synth_verify.py", "test_synth_records.py", "test_runs.py",
                    "test_solve_cmd.py", "test_console.py", "test_interrupt.py", "test_validation.py", "test_lockstep_progress.py", "test_rollout.py",
                    "eval/test_loaders.py::test_mathv_layout_reads_the_real_testmini",
                    "eval/test_scoring.py::test_every_real_mathvision_gold_scores_right_and_a_wrong_answer_wrong"),
}
SLOW = ("sandbox/test_hostile_holder.py", "test_demo.py", "test_synth_run.py", "eval/test_failure_paths.py")


def file_tier(rel: str) -> str:
    """The tier of the tests in a file (``rel``: its path below tests/), node entries aside."""
    for tier, prefixes in TIERS.items():
        if any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in prefixes):
            return tier
    return "unit"


def node_tiers(rel: str) -> dict[str, str]:
    """The tests of a file placed in another tier by name (``file.py::test_name`` entries)."""
    return {p.split("::")[1]: tier for tier, prefixes in TIERS.items() for p in prefixes
            if p.startswith(f"{rel}::")}


def tier_of(item: pytest.Item) -> str:
    rel = item.path.resolve().relative_to(ROOT).as_posix()
    return node_tiers(rel).get(item.name.split("[")[0], file_tier(rel))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip a test module, or a helper module (``--doctest-modules`` imports those too), when
    ``-m`` can select none of its tests."""
    if collection_path.suffix != ".py" or collection_path.name == "conftest.py":
        return None
    rel = collection_path.resolve().relative_to(ROOT).as_posix()
    return None if may_select(config, {file_tier(rel), *node_tiers(rel).values()}) else True


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark each test below tests/ with its tier, and ``slow`` (the package's doctests are marked
    by `codedance.conftest`)."""
    item.add_marker(getattr(pytest.mark, tier_of(item)))
    if item.path.resolve().relative_to(ROOT).as_posix() in SLOW:
        item.add_marker(pytest.mark.slow)
