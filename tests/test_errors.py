"""The error tree: every exception class of the package is a `CodeDanceError` (what the command
line prints as one line) or one of the internal ones `codedance.errors` names (and private ones,
named with a leading underscore), which never leave the module that raises them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tier("unit")

PACKAGE = Path(__file__).resolve().parents[1] / "codedance"
INTERNAL = {
    "ProtocolError",
    "LimitExceeded",
    "SnapshotBroken",
    "DeadlinePassed",
    "OpsUnparseable",
    "BoxesUnparseable",
    "ProgramUnparseable",
    "Unmappable",
}
# read in a child interpreter: `tests/test_layers.py` says why a parse here could fail
READ = """
import ast, json, sys
from pathlib import Path
found = {}
for path in Path(sys.argv[1]).rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef):
            bases = [
                b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                for b in node.bases
            ]
            found[node.name] = [bases, str(path.relative_to(Path(sys.argv[1]).parent))]
print(json.dumps(found))
"""


def exception_classes() -> dict[str, tuple[list[str], str]]:
    """Class name -> (base names, file) for every class deriving from an exception by name."""
    classes = json.loads(
        subprocess.run(
            [sys.executable, "-c", READ, str(PACKAGE)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    exceptions = {
        "Exception",
        "ValueError",
        "RuntimeError",
        "OSError",
        "FileNotFoundError",
        "KeyError",
    }
    changed = True
    while changed:
        changed = False
        for name, (bases, _) in classes.items():
            if name not in exceptions and set(bases) & exceptions:
                exceptions.add(name)
                changed = True
    return {name: tuple(classes[name]) for name in exceptions if name in classes}


def test_every_exception_is_in_the_tree_or_named_internal() -> None:
    classes = exception_classes()
    tree = {"CodeDanceError"}
    changed = True
    while changed:
        changed = False
        for name, (bases, _) in classes.items():
            if name not in tree and set(bases) & tree:
                tree.add(name)
                changed = True
    internal = set(INTERNAL) | {
        name for name in classes if name.startswith("_")
    }  # private: module-local
    for name, (bases, _) in classes.items():  # subclasses of an internal one are internal
        if set(bases) & INTERNAL:
            internal.add(name)
    outside = sorted(
        f"{file}: {name}" for name, (_, file) in classes.items() if name not in tree | internal
    )
    assert outside == [], (
        "derive these from codedance.errors (or name them internal there and here)"
    )
    assert {
        "ServiceError",
        "SandboxUnavailable",
        "SandboxClosed",
        "EndpointDown",
        "InputError",
    } <= tree


# the names each ``except`` of the command line catches, read in a child interpreter as above
HANDLERS = """
import ast, json, sys
from pathlib import Path

found = []
for path in sorted(Path(sys.argv[1]).rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            kinds = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            names = [k.id if isinstance(k, ast.Name) else getattr(k, "attr", "") for k in kinds]
            found.append([f"{path.name}:{node.lineno}", names])
print(json.dumps(found))
"""


def test_the_command_line_converts_no_library_error() -> None:
    """A library's built-in error a person can cause becomes a `CodeDanceError` where it is
    raised; the command line catches those (and its own file reads and optional imports)."""
    handlers = json.loads(
        subprocess.run(
            [sys.executable, "-c", HANDLERS, str(PACKAGE / "cli")],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    converted = {"ValueError", "KeyError", "TypeError", "RuntimeError", "FileNotFoundError"}
    assert [(where, names) for where, names in handlers if converted & set(names)] == []
