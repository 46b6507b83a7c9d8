"""The non-adaptive teacher (``call_rate``, the CPU testbed's SFT data) through the real loop and
sandbox: it calls the tool at the same rate on every difficulty, its bug hits easy episodes too
and is fixed from the feedback, and its answers stay right."""

from __future__ import annotations

import pytest

from codedance.teacher import ExpertTeacher, TeacherConfig
from codedance.types import ExecStatus
from codedance.world import generate
from tests.teacher.helpers import CONFIG, solve

pytestmark = pytest.mark.tier("integration")


def test_calls_at_a_fixed_rate_on_every_difficulty(pool):
    teacher = ExpertTeacher(
        TeacherConfig(temperature=1.0, mistake_rate=0.3, call_rate=0.5, code_style="compact")
    )
    calls = {"easy": 0, "hard": 0}
    for difficulty in calls:
        for seed in range(16):
            policy, trajectory, ok = solve(pool, generate("dots", difficulty, seed), teacher)
            assert ok, (difficulty, seed, trajectory.answer)
            assert policy.direct == (trajectory.tool_calls == ())
            calls[difficulty] += not policy.direct
    assert (
        4 <= calls["easy"] <= 12 and 4 <= calls["hard"] <= 12
    )  # ~8 of 16 each: no difficulty signal


def test_the_bug_hits_easy_episodes_and_is_fixed(pool):
    teacher = ExpertTeacher(
        TeacherConfig(temperature=1.0, mistake_rate=1.0, call_rate=1.0, code_style="compact")
    )
    policy, trajectory, ok = solve(pool, generate("dots", "easy", 3), teacher)
    assert policy.mistake == "bug" and ok
    assert [c.status for c in trajectory.tool_calls] == [ExecStatus.ERROR, ExecStatus.OK]
    assert "RESULT:" in trajectory.turns[-1].think


def test_the_default_teacher_stays_adaptive_and_a_bad_rate_is_refused(pool):
    teacher = ExpertTeacher(TeacherConfig(temperature=1.0))
    assert all(teacher.policy(generate("dots", "easy", s)).direct for s in range(6))
    assert not any(teacher.policy(generate("dots", "hard", s)).direct for s in range(6))
    with pytest.raises(ValueError, match="call_rate"):
        TeacherConfig(call_rate=1.5)


def test_the_copy_probe_replays_the_teachers_own_tool_episode(pool):
    """`branch.copy_probability` scores the teacher's answer turn after a written program output;
    that conversation and that answer turn must be the ones the real sandbox episode gives."""
    from codedance.prompts import conversation
    from codedance.teacher.policy import quoting_answer
    from codedance.train.branch import after_program

    teacher = ExpertTeacher(
        TeacherConfig(temperature=1.0, mistake_rate=0.0, call_rate=1.0, code_style="compact")
    )
    for difficulty in ("easy", "hard"):
        task = generate("dots", difficulty, 5)
        _, trajectory, ok = solve(pool, task, teacher)
        assert ok and len(trajectory.turns) == 2
        real = [(m.role, m.text) for m in conversation(trajectory)]
        written = [(m.role, m.text) for m in after_program(task, CONFIG).messages]
        assert written == real[:-1]
        assert real[-1] == ("assistant", quoting_answer(task.answer, task.answer))
