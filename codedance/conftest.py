"""Doctest collection for the package, and the test-tier selection that ``tests/conftest.py``
shares.

Modules that import verl, TRL or VLMEvalKit at import time are collected only where those are
installed (the ``train`` extra). Each module's doctests belong to a test tier (see
``tests/conftest.py``): ``integrations/`` to ``verl`` and ``train/`` to ``torch`` (their modules
import verl or torch when imported), the rest to ``unit``. A run whose ``-m`` expression selects
no test of a file's tiers (the default ``-m unit``) does not import that file at all, so the
unit tier never pays for importing torch or verl.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent
TIER_NAMES = ("unit", "integration", "torch", "verl")
DOCTEST_TIERS = {"integrations": "verl", "train": "torch"}
_WORDS = re.compile(r"[\w:+\-.\[\]\\/]+")

collect_ignore_glob = [] if importlib.util.find_spec("verl") else ["integrations/verl/*"]
collect_ignore_glob += [] if importlib.util.find_spec("trl") else ["train/sft.py"]
collect_ignore_glob += (
    ["integrations/vlmeval_adapter.py"] if not importlib.util.find_spec("vlmeval") else []
)


def doctest_tier(path: Path) -> str:
    """The tier of a package module's doctests, by its subpackage."""
    parts = path.resolve().relative_to(PACKAGE).parts
    return DOCTEST_TIERS.get(parts[0], "unit") if len(parts) > 1 else "unit"


def may_select(config: pytest.Config, tiers: Iterable[str]) -> bool:
    """Whether ``-m`` can select a test of one of `tiers`, whatever other marks it carries: the
    expression is tried with every truth value of its other names (``slow``, ``gpu``...). It is
    read by pytest's own parser, a private module: should that move, every file is collected and
    ``-m`` deselects as before."""
    text = config.option.markexpr
    if not text:
        return True
    try:
        from _pytest.mark.expression import Expression
    except ImportError:
        return True
    others = sorted(set(_WORDS.findall(text)) - {"and", "or", "not", *TIER_NAMES})
    if len(others) > 8:
        return True  # too many names to try them all: collect, and let -m deselect
    expression = Expression.compile(text)
    for tier in tiers:
        for values in itertools.product((False, True), repeat=len(others)):
            marks = {tier, *(name for name, on in zip(others, values, strict=True) if on)}
            if expression.evaluate(_carries(marks)):
                return True
    return False


def _carries(marks: set[str]) -> Callable[..., bool]:
    """The matcher of a test carrying `marks` (``**_``: a ``mark(key=value)`` term's arguments)."""
    return lambda name, **_: name in marks


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.suffix == ".py" and not may_select(config, (doctest_tier(collection_path),)):
        return True
    return None


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark each doctest with its tier (here, so that ``pytest codedance/x.py`` selects it too)."""
    item.add_marker(getattr(pytest.mark, doctest_tier(item.path)))
