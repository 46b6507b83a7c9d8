"""The teacher's compact code style (``TeacherConfig.code_style="compact"``) through the real loop
and sandbox: short programs that run and answer right on counting, spatial and geometry, a last
turn that quotes the RESULT line, hard mistakes still noticed and fixed from the feedback, the
same answers as the full style; and the default (full) style unchanged, byte for byte."""

from __future__ import annotations

import hashlib

import pytest

from codedance.parsing import parse_message
from codedance.teacher import ExpertTeacher, TeacherConfig
from codedance.teacher.program import results
from codedance.world import generate
from tests.teacher.helpers import solve

pytestmark = pytest.mark.tier("integration")

SKILLS = ("counting", "spatial", "geometry")


@pytest.mark.parametrize("skill", SKILLS)
def test_compact_programs_are_short_run_and_answer_right(pool, skill):
    compact = ExpertTeacher(TeacherConfig(temperature=0.0, code_style="compact"))
    full = ExpertTeacher(TeacherConfig(temperature=0.0))
    for diff, seed in (("medium", 4), ("medium", 7), ("hard", 4), ("hard", 7)):
        task = generate(skill, diff, seed)
        _, trajectory, ok = solve(pool, task, compact)
        assert ok, (skill, diff, seed, trajectory.answer, task.answer)
        assert trajectory.tool_calls and all(r.ok for r in trajectory.tool_calls)
        for t in trajectory.turns:
            assert parse_message(t.text).verdict.ok
        for t in trajectory.turns[:-1]:
            code = parse_message(t.text).code or ""
            lines = code.strip().splitlines()
            assert 5 <= len(lines) <= 18, code  # the full style: ~40-60
            assert '"""' not in code and "#" not in code and "def color_mask" not in code
            assert ("RESULT:" in code or "check:" in code) and lines[-1] == "print('DONE')"
        for r in trajectory.tool_calls:  # a measurement, or the hard tasks' check of it
            assert ("RESULT:" in r.stdout or "check:" in r.stdout) and "DONE" in r.stdout
        quoted = results([r for r in trajectory.tool_calls if "RESULT:" in r.stdout][-1].stdout)[-1]
        assert (
            trajectory.turns[-1].think
            == f"The output reads\nRESULT: {quoted}\nwhich answers the question."
        )
        _, reference, _ = solve(pool, task, full)
        assert trajectory.answer == reference.answer
        assert len(trajectory.turns) == len(reference.turns)
        assert (
            reference.turns[-1].think
            == f"The output gives {reference.answer}, which answers the question."
        )


@pytest.mark.parametrize("skill", SKILLS)
def test_compact_hard_mistakes_are_noticed_and_fixed(pool, skill):
    teacher = ExpertTeacher(TeacherConfig(temperature=1.0, mistake_rate=1.0, code_style="compact"))
    seen = set()
    for rollout in range(6):
        policy, trajectory, ok = solve(pool, generate(skill, "hard", 3), teacher, rollout)
        seen.add(policy.mistake)
        assert ok, (policy.mistake, trajectory.answer)
        if policy.mistake == "bug":
            assert "failed" in trajectory.turns[1].think
        else:
            assert trajectory.turns[1].think.startswith("Looking at the output"), trajectory.turns[
                1
            ].think
    assert len(seen) >= 2


def test_easy_tasks_are_still_answered_directly(pool):
    teacher = ExpertTeacher(TeacherConfig(temperature=0.0, code_style="compact"))
    for skill in SKILLS:
        _, trajectory, ok = solve(pool, generate(skill, "easy", 5), teacher)
        assert ok and trajectory.tool_calls == () and len(trajectory.turns) == 1


def _plans_digest(config: TeacherConfig) -> str:
    teacher, h = ExpertTeacher(config), hashlib.sha256()
    for skill in SKILLS:
        for diff in ("medium", "hard"):
            for seed in (1, 2):
                for k in range(3):
                    for step in teacher.policy(generate(skill, diff, seed), k)._plan():
                        for s in (step, step.fix) if step.fix else (step,):
                            h.update(s.think.encode())
                            h.update(s.code.encode())
    return h.hexdigest()


def test_the_default_style_is_unchanged():
    """The full style's thinks and programs, hashed as they were before the compact style existed
    (updated twice since: the hard tasks' last step checks the measurement instead of re-running it;
    counting's one-object area is taken from blobs with a square box, so diagonal touching pairs
    are split)."""
    assert TeacherConfig().code_style == "full"
    digest = _plans_digest(TeacherConfig(temperature=1.0, mistake_rate=1.0))
    assert digest == "0451688895bed0cf9e67f0c05194f0ab091aa1c2cd9873e943eb4afb587957b1"
    assert (
        _plans_digest(TeacherConfig(temperature=1.0, mistake_rate=1.0, code_style="compact"))
        != digest
    )


def test_skills_without_a_compact_solver_keep_the_full_style_and_bad_styles_are_refused():
    task = generate("search", "medium", 1)
    compact = ExpertTeacher(TeacherConfig(code_style="compact")).policy(task)._plan()
    full = ExpertTeacher(TeacherConfig()).policy(task)._plan()
    assert [s.code for s in compact] == [s.code for s in full]
    with pytest.raises(ValueError, match="code_style"):
        TeacherConfig(code_style="tiny")
