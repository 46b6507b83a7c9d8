"""The import graph of the package: no circle between rooms, no import back up the floors, and no
circle between the modules of one package.

A room is a top-level module or subpackage of ``codedance`` (``types``, ``sandbox``, ``eval``...).
Every ``import codedance.x`` / ``from codedance.x import`` (relative ones resolved) is read from the
source with `ast`, function-level imports included (they are real dependencies, only deferred).
``from package import name`` is an import of the submodule ``package.name`` where one exists, else
of the package itself. The floors: the core at the front (types and errors; the leaf rooms; the loop
and its math), the wings behind (the runs layer, the world wing, eval, train), then the plugins
other programs load (integrations) and the importer of the authors' data (data, which writes verl's
parquet layout through integrations), then the data engine (curate), then the command line.

The sources are parsed in a child interpreter that runs nothing else: CPython 3.11.7's AST
constructor keeps its recursion depth per interpreter, not per thread, so an ``ast.parse`` here
while any other thread of the test process compiles fails with "AST constructor recursion depth
mismatch" (fixed in 3.11.8; CI's Python is 3.11.7).
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tier("unit")

PACKAGE = Path(__file__).resolve().parents[1] / "codedance"
FLOORS = (
    {"types", "errors", "python_ast", "messages", "progress"},
    {
        "config",
        "parsing",
        "sandbox",
        "prompts",
        "policy",
        "grading",
        "records",
        "task_records",
        "assets",
        "presets",
    },
    {"rollout", "rewards", "advantages", "world"},
    {"runs", "teacher", "sft_records", "agents"},
    {"demo", "synth", "eval", "train"},
    {"integrations", "data"},  # data writes the verl parquet through integrations.verl's row format
    {"curate"},  # the data engine: reads tables as the data importer does
    {"cli", "conftest"},
)
FLOOR = {room: n for n, rooms in enumerate(FLOORS) for room in rooms}


def module_files(package: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, not ``__init__``)."""
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_modules(name: str, path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the module ``name`` (source at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = (
                package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            )
            source = ".".join([*base, node.module] if node.module else base)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in modules else source)
    return {module for module in found if module in modules and module != name}


def read_graph(package: Path) -> dict[str, list[str]]:
    """Module -> the package's modules it imports (parses: run it apart, `read_graph_apart`)."""
    files = module_files(package)
    return {name: sorted(imported_modules(name, path, set(files))) for name, path in files.items()}


def read_graph_apart(package: Path) -> dict[str, list[str]]:
    """`read_graph` in a child interpreter whose only thread parses."""
    out = subprocess.run(
        [sys.executable, __file__, str(package)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return json.loads(out)


@functools.cache  # read once for the tests below
def graph() -> dict[str, frozenset[str]]:
    return {module: frozenset(imports) for module, imports in read_graph_apart(PACKAGE).items()}


def room_of(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def edges() -> set[tuple[str, str, str]]:
    """(importing room, imported room, importing module) for every import of another room."""
    return {
        (room_of(a), room_of(b), a)
        for a, imports in graph().items()
        for b in imports
        if room_of(a) != room_of(b) and "." in a and "." in b
    }


def circles(nodes: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in nodes.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return sorted(found)


def test_every_room_has_a_floor() -> None:
    rooms = {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__")
        or (p.is_dir() and (p / "__init__.py").exists())
    }
    assert rooms - set(FLOOR) == set(), "give the new room a floor in FLOORS"


def test_no_import_runs_back_up() -> None:
    up = sorted(
        f"{module}: {a} (floor {FLOOR[a]}) imports {b} (floor {FLOOR[b]})"
        for a, b, module in edges()
        if a in FLOOR and FLOOR[b] > FLOOR[a]
    )
    assert up == []


def test_no_circle_between_rooms() -> None:
    rooms: dict[str, set[str]] = {}
    for a, b, _ in edges():
        rooms.setdefault(a, set()).add(b)
    assert circles(rooms) == []


def parts_of(package: str) -> dict[str, set[str]]:
    """The imports between the parts of ``package`` (its modules and subpackages, a subpackage
    standing for everything below it); the package's own ``__init__`` is left out."""

    def part(module: str) -> str | None:
        if not module.startswith(package + "."):
            return None
        return package + "." + module[len(package) + 1 :].split(".")[0]

    found: dict[str, set[str]] = {}
    for a, imports in graph().items():
        for b in imports:
            if part(a) is not None and part(b) is not None and part(a) != part(b):
                found.setdefault(part(a), set()).add(part(b))
    return found


def test_no_circle_between_the_parts_of_a_package() -> None:
    """Inside every package too, a subpackage counting as one part: a module that needs a
    sibling's name does not hand one back to it, lazily or not."""
    packages = {module.rpartition(".")[0] for module in graph() if "." in module}
    found = {package: circles(parts_of(package)) for package in sorted(packages)}
    assert {package: found for package, found in found.items() if found} == {}


def test_the_jail_imports_nothing_of_the_controller() -> None:
    """The zygote, holders and steps (``codedance.sandbox.jail``) import only each other, the wire
    format and modules outside the sandbox: a controller module in the zygote is memory whose page
    tables every step's fork copies, and its at-fork hooks run in every step."""
    jail, allowed = "codedance.sandbox.jail", {"codedance.sandbox.protocol"}
    reached = sorted(
        f"{module} imports {imported}"
        for module, imports in graph().items()
        if module == jail or module.startswith(jail + ".")
        for imported in imports
        if room_of(imported) == "sandbox"
        and imported not in allowed
        and not (imported == jail or imported.startswith(jail + "."))
    )
    assert any(module.startswith(jail + ".") for module in graph()), (
        "the jail subpackage moved: update this test"
    )
    assert reached == []


def test_the_graph_reads_relative_and_submodule_imports(tmp_path) -> None:
    """The reader itself: a circle made only of relative and ``from package import module`` imports
    is found, and a name that is not a module counts as an import of its package."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("NAME = 1\n")
    (package / "sub" / "a.py").write_text("from . import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from pkg.sub import a, NAME\n")
    (package / "c.py").write_text("from .sub import NAME\n")
    found = read_graph_apart(package)
    assert found["pkg.sub.a"] == ["pkg.sub.b"]
    assert found["pkg.sub.b"] == ["pkg.sub", "pkg.sub.a"]
    assert found["pkg.c"] == ["pkg.sub"]
    assert circles({a: set(b) for a, b in found.items()}) == [["pkg.sub.a", "pkg.sub.b"]]


if __name__ == "__main__":  # the child interpreter of `graph`
    print(json.dumps(read_graph(Path(sys.argv[1]))))
