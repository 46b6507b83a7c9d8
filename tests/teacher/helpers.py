"""One teacher episode through the real loop and a sandbox of the shared pool, graded."""

from __future__ import annotations

import pytest

from codedance.grading import grade_trajectory
from codedance.rollout import Episode, EpisodeConfig, run_episode

pytestmark = pytest.mark.tier("integration")

CONFIG = EpisodeConfig(max_turns=6)


def solve(pool, task, teacher, rollout=0):
    """(policy, trajectory, correct) of `teacher` on `task`."""
    policy = teacher.policy(task, rollout)
    with pool.sandbox(images=Episode(task, CONFIG).images) as sandbox:
        trajectory = run_episode(policy, task, sandbox, CONFIG)
    return policy, trajectory, grade_trajectory(trajectory=trajectory, task=task).correct
