"""The tier selection that decides which files a run imports (`codedance.conftest.may_select`):
a file is skipped only when no test in it could match ``-m``, whatever marks its tests carry."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from codedance.conftest import PACKAGE, doctest_tier, may_select

pytestmark = pytest.mark.tier("unit")


def load_conftest():  # type: ignore[no-untyped-def]
    """tests/conftest.py as a module of its own (pytest's import mode gives it no name)."""
    spec = importlib.util.spec_from_file_location(
        "tests_conftest", Path(__file__).parent / "conftest.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(markexpr: str) -> SimpleNamespace:
    return SimpleNamespace(option=SimpleNamespace(markexpr=markexpr))


def test_the_default_unit_run_skips_the_other_tiers_only() -> None:
    assert may_select(run("unit"), ["unit"])
    assert not any(may_select(run("unit"), [tier]) for tier in ("integration", "torch", "verl"))
    assert may_select(run("unit"), ["integration", "unit"])  # a file with tests in both tiers


def test_every_tier_is_imported_without_an_expression_or_when_named() -> None:
    for tier in ("unit", "integration", "torch", "verl"):
        assert may_select(run(""), [tier]) and may_select(
            run("unit or torch or verl or integration"), [tier]
        )
    assert not may_select(run("integration and not slow"), ["torch"])
    assert may_select(run("not unit"), ["verl"]) and not may_select(run("not unit"), ["unit"])


def test_other_marks_are_tried_both_ways() -> None:
    # a verl test file may mark its tests slow itself; gpu tests sit in any tier
    assert may_select(run("slow"), ["verl"]) and may_select(run("gpu"), ["torch"])
    assert may_select(run("not slow"), ["unit"]) and may_select(run("torch and not gpu"), ["torch"])
    assert not may_select(run("torch and gpu"), ["unit"])


def test_doctests_take_the_tier_of_their_heavy_package() -> None:
    assert doctest_tier(PACKAGE / "integrations" / "verl" / "reward.py") == "verl"
    assert doctest_tier(PACKAGE / "train" / "grpo.py") == "torch"
    assert (
        doctest_tier(PACKAGE / "rewards" / "core.py") == "unit"
        and doctest_tier(PACKAGE / "types.py") == "unit"
    )


def test_a_module_below_tests_declares_its_tier_or_collection_stops() -> None:
    """The declarations are read from the source (the file is not imported to decide), the test's
    own wins over its module's, and a module without one stops the run with what to add."""
    conftest = load_conftest()
    here = Path(__file__)
    assert conftest.declared_tiers(here) == {"unit"}
    advantages = here.parent / "test_advantages.py"  # a unit file with one verl test in it
    assert conftest.declared_tiers(advantages) == {"unit", "verl"}
    bare = here.parent / "train" / "helpers.py"
    assert conftest.declared_tiers(bare) == {"torch"}


def test_a_module_without_a_tier_is_refused(tmp_path, monkeypatch) -> None:
    conftest = load_conftest()
    monkeypatch.setattr(conftest, "ROOT", tmp_path)
    undeclared = tmp_path / "test_new.py"
    undeclared.write_text("def test_x():\n    pass\n")
    with pytest.raises(
        pytest.UsageError,
        match=r'declares no test tier: add pytestmark = pytest.mark.tier\("unit"\)',
    ):
        conftest.declared_tiers(undeclared)
    undeclared.write_text(
        "pytestmark = pytest.mark.tier" + '("fast")\n'
    )  # split: this file is read too
    with pytest.raises(pytest.UsageError, match="unknown tier"):
        conftest.declared_tiers(undeclared)
