"""What the teacher may know of a task: its question, options and public labels.

`TaskView.from_task` copies exactly these fields; the gold answer and any other metadata are
never handed to the teacher, so its answers come from the pixels it is shown.
"""

from __future__ import annotations

from dataclasses import dataclass

from codedance.types import Task


@dataclass(frozen=True)
class TaskView:
    id: str
    question: str
    choices: tuple[tuple[str, str], ...]
    skill: str
    difficulty: str

    @classmethod
    def from_task(cls, task: Task) -> TaskView:
        meta = dict(task.metadata)
        return cls(
            task.id, task.question, task.choices, meta.get("skill", ""), meta.get("difficulty", "")
        )
