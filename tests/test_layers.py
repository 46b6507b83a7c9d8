"""The import graph of the package: no circle between rooms, and no import back up the floors.

A room is a top-level module or subpackage of ``codedance`` (``types``, ``sandbox``, ``eval``...).
Every ``import codedance.x`` / ``from codedance.x import`` is read from the source with `ast`,
function-level imports included (they are real dependencies, only deferred). The floors: the
core at the front (types and errors; the leaf rooms; the loop and its math), the wings behind
(the runs layer, the world wing, eval, train), then the plugins other programs load
(integrations) and the importer of the authors' data (data, which writes verl's parquet layout
through integrations), then the data engine (curate), then the command line.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "codedance"
FLOORS = (
    {"types", "errors"},
    {"config", "parsing", "sandbox", "prompts", "policy", "grading", "records", "task_records",
     "assets", "presets"},
    {"rollout", "rewards", "advantages", "world"},
    {"runs", "teacher", "sft_records"},
    {"demo", "synth", "eval", "train"},
    {"integrations", "data"},  # data writes the verl parquet through integrations.verl's row format
    {"curate"},  # the data engine: reads tables as the data importer does
    {"cli", "conftest"},
)
FLOOR = {room: n for n, rooms in enumerate(FLOORS) for room in rooms}


def room_of(module: str) -> str:
    return module.split(".")[1]


@functools.cache  # read once for the tests below
def edges() -> frozenset[tuple[str, str, str]]:
    """(importing room, imported room, file) for every import of another room."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        here = room_of(".".join(rel.parts)) if len(rel.parts) > 1 else "codedance"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith("codedance.") and room_of(name) != here:
                    found.add((here, room_of(name), str(rel)))
    return frozenset(found)


def test_every_room_has_a_floor() -> None:
    rooms = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert rooms - set(FLOOR) == set(), "give the new room a floor in FLOORS"


def test_no_import_runs_back_up() -> None:
    up = sorted(f"{file}: {a} (floor {FLOOR[a]}) imports {b} (floor {FLOOR[b]})"
                for a, b, file in edges() if a in FLOOR and FLOOR[b] > FLOOR[a])
    assert up == []


def test_no_circle_between_rooms() -> None:
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges():
        graph.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and (seen.add(nxt) or reaches(nxt, goal, seen))):
                return True
        return False

    circles = sorted(f"{a} <-> {b}" for a, b, _ in edges() if reaches(b, a, set()))
    assert circles == []
