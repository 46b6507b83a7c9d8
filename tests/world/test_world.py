"""The task world: determinism, coverage, ids, answers consistent with the pictures, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from codedance.types import AnswerKind
from codedance.world import (
    DIFFICULTIES,
    Difficulty,
    WorldError,
    generate,
    label,
    parse_skills,
    parse_task_id,
    skills,
    task_cycle,
    task_set,
)
from codedance.world.draw import PALETTE

pytestmark = pytest.mark.tier("unit")


@pytest.mark.parametrize("name", skills())
@pytest.mark.parametrize("difficulty", [d.value for d in DIFFICULTIES])
def test_every_skill_and_difficulty_is_deterministic(name, difficulty):
    a, b, c = (
        generate(name, difficulty, 5),
        generate(name, difficulty, 5),
        generate(name, difficulty, 6),
    )
    assert a == b and a.images[0].png == b.images[0].png
    assert (c.images[0].png, c.question, c.answer) != (a.images[0].png, a.question, a.answer)
    assert parse_task_id(a.id) == (
        name,
        DIFFICULTIES[[d.value for d in DIFFICULTIES].index(difficulty)],
        5,
    )
    w, h = a.images[0].size
    assert w % 28 == 0 and h % 28 == 0  # no resize on the way to the model
    meta = dict(a.metadata)
    assert meta["skill"] == name and meta["difficulty"] == difficulty
    if a.kind is AnswerKind.CHOICE:
        assert a.answer in dict(a.choices)


def test_a_small_task_set_draws_skills_evenly() -> None:
    names = skills()
    first = task_set(len(names), seed=0)
    assert sorted(label(t, "skill") for t in first) == sorted(names)  # every skill at once
    assert {label(t, "difficulty") for t in first} == {"easy", "medium", "hard"}
    cycle = task_cycle()
    assert len(set(cycle)) == len(cycle) == 3 * len(names)
    twelve = [s for s, _ in cycle[:12]]
    assert max(twelve.count(s) for s in names) - min(twelve.count(s) for s in names) <= 1
    assert task_cycle(["charts"], ["hard"]) == (("charts", Difficulty.HARD),)


def test_task_set_covers_the_grid_and_hard_is_harder():
    tasks = task_set(len(skills()) * 3, seed=0)
    assert {(dict(t.metadata)["skill"], dict(t.metadata)["difficulty"]) for t in tasks} == {
        (s, d.value) for s in skills() for d in DIFFICULTIES
    }
    assert len({t.id for t in tasks}) == len(tasks)
    easy = [generate("counting", "easy", s).images[0].size for s in range(3)]
    hard = [generate("counting", "hard", s).images[0].size for s in range(3)]
    assert all(e[0] * e[1] < h[0] * h[1] for e, h in zip(easy, hard))


def test_counting_answer_matches_target_pixels():
    """Independent of the teacher: on easy items the exact target colour forms one component
    per target (no other object shares it), so the components count the gold answer."""
    for seed in range(6):
        task = generate("counting", "easy", seed)
        color = task.question.split()[2]
        img = np.asarray(task.images[0].to_pil().convert("RGB"))
        mask = np.all(img == np.array(PALETTE[color]), axis=2)
        import cv2

        n, _lab, _stats, _c = cv2.connectedComponentsWithStats(mask.astype(np.uint8))
        assert n - 1 == int(task.answer)  # easy: the only objects of that colour are the targets


def test_bad_input_is_refused_with_a_clear_error():
    with pytest.raises(WorldError, match="unknown skill"):
        generate("juggling", "easy", 0)
    with pytest.raises(WorldError, match="unknown skill"):
        parse_skills("counting,juggling")
    with pytest.raises(WorldError, match="difficulty"):
        generate("counting", "extreme", 0)
    with pytest.raises(WorldError, match="at least 1"):
        task_set(0)
    with pytest.raises(WorldError, match="non-negative"):
        generate("counting", "easy", -1)
    with pytest.raises(WorldError, match="not a world task id"):
        parse_task_id("nonsense")
