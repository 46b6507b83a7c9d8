"""A procedural world of visual reasoning tasks with exactly known answers.

    from codedance.world import generate, task_set
    task = generate("counting", "hard", seed=3)
    tasks = task_set(18, seed=0)            # every skill × difficulty

Skills (one module each): ``counting``, ``search`` (a small code on a tag in a 4K-class canvas),
``charts`` (matplotlib bar, line and pie charts from vega_datasets tables), ``geometry``
(measurement against a drawn scale), ``spatial``, ``photos`` (scikit-image's ``coins`` photo,
hand-checked counts), ``dots`` (a background colour or a count of tiny dots: the CPU
testbed's skill, docs/train.md). ``charts`` needs vega_datasets, ``photos`` scikit-image.
See docs/world.md.
"""

from codedance.world import charts, counting, geometry, photos, search, spatial  # noqa: F401  (register skills)

# isort: split
from codedance.world import dots  # noqa: F401  (registered last: the other skills' task cycles stay as they were)
from codedance.world.base import (
    DIFFICULTIES,
    WORLD_VERSION,
    Difficulty,
    WorldError,
    generate,
    label,
    parse_difficulty,
    parse_skills,
    parse_task_id,
    skills,
    task_cycle,
    task_set,
)

__all__ = [
    "DIFFICULTIES",
    "WORLD_VERSION",
    "Difficulty",
    "WorldError",
    "generate",
    "label",
    "parse_difficulty",
    "parse_skills",
    "parse_task_id",
    "skills",
    "task_cycle",
    "task_set",
]
