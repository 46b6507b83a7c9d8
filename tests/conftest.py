"""Test tiers, declared in each test file (torchtune's split: the default run is the unit tier).

Every module below tests/ (test files and their helper modules) says its tier at the top:
``pytestmark = pytest.mark.tier("unit")`` (with ``pytest.mark.slow`` beside it for the longest
runs); a test in another tier than its file carries ``@pytest.mark.tier("verl")`` itself, and the
test's own declaration wins. A module without one is a collection error that says what to add.

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
expression can select is not imported (`codedance.conftest.may_select`; its declarations are read
from its source): the unit tier does not pay for importing torch, verl or the sandbox's test
helpers. The package's doctests take their tier from `codedance.conftest.doctest_tier`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from codedance.conftest import TIER_NAMES, may_select

# every service the suite starts (the sandbox's, the demo's, the eval runner's, and the
# controllers of subprocess tests, which inherit this) leaves the host's fs.file-max as it is,
# even where the caller's shell opted in: the raise is tested against a fake sysctl only
# (tests/sandbox/test_units.py, tests/sandbox/test_file_max.py), never on a shared host
os.environ.pop("CODEDANCE_RAISE_FILE_MAX", None)

ROOT = Path(__file__).resolve().parent
_DECLARED = re.compile(r"""pytest\.mark\.tier\(\s*["'](\w+)["']\s*\)""")
_MODULE_TIER = re.compile(
    r"""^pytestmark\s*=.*?pytest\.mark\.tier\(\s*["'](\w+)["']""", re.MULTILINE
)


def declared_tiers(path: Path) -> set[str]:
    """The tiers a module below tests/ declares (its own and its tests'), read from its source."""
    found = set(_DECLARED.findall(path.read_text(encoding="utf-8")))
    if not found:
        rel = path.resolve().relative_to(ROOT).as_posix()
        raise pytest.UsageError(
            f"tests/{rel} declares no test tier: add "
            f'pytestmark = pytest.mark.tier("unit") (or integration, torch, verl) below its imports'
        )
    if unknown := found - set(TIER_NAMES):
        raise pytest.UsageError(
            f"tests/{path.name}: unknown tier {sorted(unknown)}; the tiers are {TIER_NAMES}"
        )
    return found


def tier_of(item: pytest.Item) -> str:
    """The test's own tier declaration, else its module's (a doctest of a helper module carries
    no marks: its module's ``pytestmark`` line is read)."""
    marker = item.get_closest_marker("tier")
    if marker is not None:
        return marker.args[0]
    declared_tiers(item.path)  # the error that says what to add, where the module has none
    found = _MODULE_TIER.search(item.path.read_text(encoding="utf-8"))
    if found is None:
        raise pytest.UsageError(f"{item.path}: declare the module's tier in its pytestmark line")
    return found.group(1)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip a test module, or a helper module (``--doctest-modules`` imports those too), when
    ``-m`` can select none of its tests."""
    if collection_path.suffix != ".py" or collection_path.name == "conftest.py":
        return None
    return None if may_select(config, declared_tiers(collection_path)) else True


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark each test below tests/ with its tier (the package's doctests are marked by
    `codedance.conftest`)."""
    item.add_marker(getattr(pytest.mark, tier_of(item)))
