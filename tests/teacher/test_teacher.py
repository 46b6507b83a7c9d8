"""The expert teacher through the real loop and sandbox: turn structure per difficulty, mistakes
noticed and corrected from the feedback, answers that follow the pixels, measured accuracy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from codedance.parsing import parse_message
from codedance.teacher import ExpertTeacher, TeacherConfig
from codedance.teacher.accuracy import measure
from codedance.types import ExecStatus
from codedance.world import generate, skills, task_set
from tests.teacher.helpers import solve

pytestmark = pytest.mark.tier("integration")


@pytest.mark.parametrize("skill", ["counting", "spatial", "geometry"])
def test_turns_grow_with_difficulty(pool, skill):
    teacher = ExpertTeacher(TeacherConfig(temperature=0.0))
    _, easy, ok_e = solve(pool, generate(skill, "easy", 11), teacher)
    _, medium, ok_m = solve(pool, generate(skill, "medium", 11), teacher)
    _, hard, ok_h = solve(pool, generate(skill, "hard", 11), teacher)
    assert (ok_e, ok_m, ok_h) == (True, True, True)
    assert len(easy.turns) == 1 and easy.tool_calls == ()
    assert len(medium.turns) == 2 and len(medium.tool_calls) == 1
    assert len(hard.turns) >= 3 and all(r.ok for r in hard.tool_calls)
    for t in (*easy.turns, *medium.turns, *hard.turns):
        assert parse_message(t.text).verdict.ok


@pytest.mark.parametrize("skill,seed", [("counting", 3), ("spatial", 3), ("geometry", 3)])
def test_hard_first_mistake_is_noticed_and_corrected(pool, skill, seed):
    teacher = ExpertTeacher(TeacherConfig(temperature=1.0, mistake_rate=1.0))
    seen = set()
    for rollout in range(10):
        policy, trajectory, ok = solve(pool, generate(skill, "hard", seed), teacher, rollout)
        assert policy.mistake is not None
        seen.add(policy.mistake)
        assert ok, (policy.mistake, trajectory.answer)
        if policy.mistake == "bug":
            assert trajectory.tool_calls[0].status is ExecStatus.ERROR
            assert "failed" in trajectory.turns[1].think
        else:
            assert len(trajectory.tool_calls) >= 2
    assert "bug" in seen and len(seen) >= 2


def test_counting_loose_threshold_would_be_wrong_and_is_fixed(pool):
    """The 'loose' first step really miscounts (look-alike colours join in), so the correction
    is what makes the answer right."""
    teacher = ExpertTeacher(TeacherConfig(mistake_rate=1.0))
    task = generate("counting", "hard", 4)
    for rollout in range(12):
        policy, trajectory, ok = solve(pool, task, teacher, rollout)
        if policy.mistake == "loose":
            first = trajectory.tool_calls[0].stdout
            assert f"RESULT: {task.answer}\n" not in first
            assert trajectory.turns[1].think.startswith("Looking at the output") and ok
            return
    pytest.fail("no loose-threshold rollout in 12")


def test_answers_follow_the_pixels_not_the_task(pool):
    """The same question on another task's picture gets that picture's answer."""
    teacher = ExpertTeacher(TeacherConfig(temperature=0.0))
    a, b = generate("counting", "medium", 20), generate("counting", "medium", 21)
    swapped = replace(b, question=a.question, answer="?")
    twin = replace(a, images=swapped.images, id=a.id)
    _, trajectory, _ = solve(pool, twin, teacher)
    # count of a's target kind on b's picture, checked against a pixel count done here
    import numpy as np

    from codedance.teacher import pixels

    img = np.asarray(b.images[0].to_pil().convert("RGB"))
    color, shape = a.question.split()[2], a.question.split()[3][:-1]
    from codedance.world.draw import PALETTE

    expected = pixels.count_shapes(
        pixels.blobs(pixels.color_mask(img, PALETTE[color], 40), img), shape, split=False
    )
    assert trajectory.answer == str(expected)


def test_temperature_zero_makes_no_mistakes():
    teacher = ExpertTeacher(TeacherConfig(temperature=0.0, mistake_rate=1.0))
    assert all(
        teacher.policy(generate("counting", "hard", s), k).mistake is None
        for s in range(3)
        for k in range(3)
    )
    with pytest.raises(ValueError, match="no solver"):
        teacher.policy(replace(generate("counting", "easy", 0), metadata=(("skill", "x"),)))


def test_measured_accuracy_per_cell(tmp_path):
    report = measure(
        task_set(3 * len(skills()), seed=500),
        TeacherConfig(temperature=1.0, mistake_rate=0.5),
        run=tmp_path / "run",
    )
    assert len(report.cells) == 3 * len(skills())
    for cell in report.cells:
        assert cell.accuracy >= 0.5, cell
    assert sum(c.correct for c in report.cells) / sum(c.n for c in report.cells) >= 0.9


@pytest.mark.parametrize("skill", ["charts", "counting", "geometry"])
@pytest.mark.parametrize("style", ["full", "compact"])
def test_hard_check_turn_does_new_work_and_keeps_the_answer(pool, skill, style):
    """The last tool step of a hard plan checks what the answer rests on (a zoom or a fit check,
    ``check:`` lines); it never re-runs a snippet already run."""
    teacher = ExpertTeacher(TeacherConfig(temperature=1.0, mistake_rate=0.5, code_style=style))
    for seed in range(3):
        _, trajectory, ok = solve(pool, generate(skill, "hard", 40 + seed), teacher)
        codes = [t.code for t in trajectory.turns if t.result is not None]
        assert ok and len(codes) == len(set(codes)) >= 2, (seed, trajectory.answer)
        last = trajectory.tool_calls[-1]
        assert last.ok and "check:" in last.stdout and "RESULT" not in last.stdout


def test_touching_pairs_are_counted_whatever_their_angle():
    """The teacher's count on hard counting tasks, both code styles, run in-process on the
    world's pixels: touching pairs at any angle are split (a diagonal pair's box is half empty,
    so its fill looks like a triangle's; seed 8 was miscounted that way)."""
    import contextlib
    import io

    import cv2
    import numpy as np

    from codedance.teacher import counting, pixels
    from codedance.world.draw import PALETTE

    for seed in range(60):
        task = generate("counting", "hard", seed)
        img = np.asarray(task.images[0].to_pil().convert("RGB"))
        color, shape = counting.target(task)
        found = pixels.blobs(pixels.color_mask(img, PALETTE[color], 40), img)
        assert str(pixels.count_shapes(found, shape, split=True)) == task.answer, seed
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            body = counting._compact_body(color, shape, 40, split=True, show=False)
            exec(body, {"np": np, "cv2": cv2, "img": img})  # noqa: S102
        assert printed.getvalue().strip() == f"RESULT: {task.answer}", seed
