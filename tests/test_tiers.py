"""The tier selection that decides which files a run imports (`codedance.conftest.may_select`):
a file is skipped only when no test in it could match ``-m``, whatever marks its tests carry."""

from __future__ import annotations

from types import SimpleNamespace

from codedance.conftest import PACKAGE, doctest_tier, may_select


def run(markexpr: str) -> SimpleNamespace:
    return SimpleNamespace(option=SimpleNamespace(markexpr=markexpr))


def test_the_default_unit_run_skips_the_other_tiers_only() -> None:
    assert may_select(run("unit"), ["unit"])
    assert not any(may_select(run("unit"), [tier]) for tier in ("integration", "torch", "verl"))
    assert may_select(run("unit"), ["integration", "unit"])  # a file with tests in both tiers


def test_every_tier_is_imported_without_an_expression_or_when_named() -> None:
    for tier in ("unit", "integration", "torch", "verl"):
        assert may_select(run(""), [tier]) and may_select(run("unit or torch or verl or integration"), [tier])
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
    assert doctest_tier(PACKAGE / "rewards" / "core.py") == "unit" and doctest_tier(PACKAGE / "types.py") == "unit"
