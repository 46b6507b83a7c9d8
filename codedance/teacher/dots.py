"""The teacher's `dots` solver: whether there are white dots and how many, by a white threshold
and connected components. One tool step, one printed
``RESULT:`` line (the compact program is four lines); no solver-specific mistakes (the teacher's
generic bug still applies)."""

from __future__ import annotations

import cv2
import numpy as np

from codedance.teacher.program import Step, compact, results, snippet
from codedance.teacher.view import TaskView
from codedance.world.dots import YES_QUESTION

MISTAKES: tuple[str, ...] = ()
COMPACT = True  # `steps` takes ``compact_code=``
YES_BODY = "print('RESULT:', 'yes' if (img.min(2) > 200).any() else 'no')"
COUNT_BODY = "print('RESULT:', cv2.connectedComponents((img.min(2) > 200).astype(np.uint8))[0] - 1)"


def _asks_yes_no(view: TaskView) -> bool:
    return view.question == YES_QUESTION


def glance(view: TaskView, img: np.ndarray) -> str:
    """The answer read from the pixels in-process (the same computation as the program)."""
    if _asks_yes_no(view):
        return "yes" if (img.min(2) > 200).any() else "no"
    return str(cv2.connectedComponents((img.min(2) > 200).astype(np.uint8))[0] - 1)


def steps(
    view: TaskView, hard: bool, mistake: str | None, compact_code: bool = False
) -> list[Step]:
    if _asks_yes_no(view):
        think, body = "I look for white pixels.", YES_BODY
    else:
        think, body = "I count the white connected components.", COUNT_BODY
    return [Step(think, compact(body) if compact_code else snippet(body))]


def answer(view: TaskView, feedback: str) -> str | None:
    found = results(feedback)
    return found[-1] if found else None
