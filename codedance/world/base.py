"""The task world's common parts: difficulties, the skill registry, task building, task sets.

A skill is a generator ``(rng, difficulty) -> Draft`` registered under its name; `generate`
turns a (skill, difficulty, seed) triple into a `codedance.types.Task` whose id names all three,
so ``generate(*parse_task_id(task.id))`` regenerates it exactly (same PNG bytes). Randomness comes
only from a numpy ``Generator`` seeded with the triple; no global state, no clock.

Task metadata holds only public labels: ``skill``, ``difficulty``, ``seed``, ``world``
(the generator version). The answer is ``Task.answer``; no other hidden truth is stored.

Not handled: tasks over several images (every skill draws one image).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from codedance.errors import SettingsError
from codedance.types import AnswerKind, Image, Task

WORLD_VERSION = "1"


class Difficulty(str, Enum):
    """easy: answerable at a glance; medium: one tool step; hard: several steps or a likely
    first mistake."""

    EASY = "easy"
    MEDIUM = "medium"
    HARD = "hard"


DIFFICULTIES = (Difficulty.EASY, Difficulty.MEDIUM, Difficulty.HARD)


class WorldError(SettingsError):
    """A request the world cannot satisfy (unknown skill or difficulty, bad counts)."""


@dataclass(frozen=True)
class Draft:
    """What a skill generator returns: one image, the question, and the gold answer."""

    image: Image
    question: str
    answer: str
    kind: AnswerKind
    choices: tuple[tuple[str, str], ...] = ()


Generator = Callable[[np.random.Generator, Difficulty], Draft]
_SKILLS: dict[str, Generator] = {}


def skill(name: str) -> Callable[[Generator], Generator]:
    """Register a generator under `name` (decorator)."""

    def register(fn: Generator) -> Generator:
        _SKILLS[name] = fn
        return fn

    return register


def skills() -> tuple[str, ...]:
    """Registered skill names, in registration order."""
    from codedance import world  # noqa: F401  (imports every skill module)

    return tuple(_SKILLS)


def parse_difficulty(value: str | Difficulty) -> Difficulty:
    try:
        return Difficulty(value)
    except ValueError:
        raise WorldError(f"unknown difficulty {value!r}; choose from easy, medium, hard") from None


def parse_skills(names: str | Iterable[str] | None) -> tuple[str, ...]:
    """Skill names from a comma list or iterable (None or "all": every skill); unknown names raise.

    >>> parse_skills("counting,spatial")
    ('counting', 'spatial')
    """
    known = skills()
    if names is None or names == "all":
        return known
    items = [
        n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()
    ]
    unknown = [n for n in items if n not in known]
    if unknown or not items:
        raise WorldError(f"unknown skill(s) {unknown or items}; known: {', '.join(known)}")
    return tuple(dict.fromkeys(items))


def rng_for(skill_name: str, difficulty: Difficulty, seed: int) -> np.random.Generator:
    """A generator seeded by the triple (stable across processes and Python versions)."""
    digest = hashlib.sha256(f"{skill_name}/{difficulty.value}/{seed}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def task_id(skill_name: str, difficulty: Difficulty, seed: int) -> str:
    return f"{skill_name}-{difficulty.value}-{seed}"


def parse_task_id(tid: str) -> tuple[str, Difficulty, int]:
    """(skill, difficulty, seed) of a world task id.

    >>> parse_task_id("counting-hard-7")
    ('counting', <Difficulty.HARD: 'hard'>, 7)
    """
    try:
        name, diff, seed = tid.rsplit("-", 2)
        return name, Difficulty(diff), int(seed)
    except ValueError:
        raise WorldError(f"{tid!r} is not a world task id (skill-difficulty-seed)") from None


def generate(skill_name: str, difficulty: str | Difficulty, seed: int) -> Task:
    """The task for (skill, difficulty, seed); the same triple always gives the same task."""
    diff = parse_difficulty(difficulty)
    fn = _SKILLS.get(skill_name) if skill_name in skills() else None
    if fn is None:
        raise WorldError(f"unknown skill {skill_name!r}; known: {', '.join(skills())}")
    if seed < 0:
        raise WorldError(f"seed must be non-negative, got {seed}")
    draft = fn(rng_for(skill_name, diff, seed), diff)
    metadata = (
        ("skill", skill_name),
        ("difficulty", diff.value),
        ("seed", str(seed)),
        ("world", WORLD_VERSION),
    )
    return Task(
        id=task_id(skill_name, diff, seed),
        question=draft.question,
        images=(Image(draft.image.png, "input:0", draft.image.width, draft.image.height),),
        answer=draft.answer,
        kind=draft.kind,
        choices=draft.choices,
        source=f"world/{skill_name}",
        metadata=metadata,
    )


def task_cycle(
    skill_names: Sequence[str] | None = None,
    difficulties: Sequence[str | Difficulty] = DIFFICULTIES,
) -> tuple[tuple[str, Difficulty], ...]:
    """Every (skill, difficulty) once, in the order tasks are drawn: the skills round-robin, and
    each round shifts the difficulties by one, so any ``n`` tasks spread as evenly as they can over
    the skills (then over the difficulties): the first ``len(skills)`` hold every skill, the first
    ``len(skills)·len(difficulties)`` every combination."""
    names = parse_skills(skill_names)
    diffs = [parse_difficulty(d) for d in difficulties]
    if not diffs:
        raise WorldError("no difficulty selected")
    count = len(names)
    return tuple(
        (names[i % count], diffs[(i % count + i // count) % len(diffs)])
        for i in range(count * len(diffs))
    )


def task_set(
    n: int,
    seed: int = 0,
    skill_names: Sequence[str] | None = None,
    difficulties: Sequence[str | Difficulty] = DIFFICULTIES,
) -> tuple[Task, ...]:
    """`n` tasks cycling over `task_cycle`, seeds ``seed, seed+1, ...``."""
    if n < 1:
        raise WorldError(f"the number of tasks must be at least 1, got {n}")
    combos = task_cycle(skill_names, difficulties)
    return tuple(generate(*combos[i % len(combos)], seed + i) for i in range(n))


def label(task: Task, key: str) -> str:
    """A public metadata label of a task ('' when absent)."""
    return dict(task.metadata).get(key, "")
