"""The expert teacher: a `Policy` that writes CodeDance turns and solves world tasks from pixels.

    teacher = ExpertTeacher(TeacherConfig(temperature=1.0, mistake_rate=0.5, seed=0))
    trajectory = run_episode(teacher.policy(task, rollout=0), task, sandbox)

Per difficulty: easy tasks are answered directly (the teacher's glance runs its pixel routines
in-process on the image it was shown, no code turn); medium tasks take one tool step; hard tasks a
chain of steps, where with probability ``mistake_rate·min(1, temperature)`` the first step is a
realistic mistake (one of the solver's ``MISTAKES``: a loose threshold, an unsplit count, the frame
taken for the scale bar; or a plain bug) that the teacher notices from the real sandbox feedback and
corrects.
``code_style="compact"`` makes the programs short (8–18 lines: routines written inline, no
docstrings, comments or annotated images) for the skills whose solver has ``COMPACT`` (counting,
spatial, geometry), and its last turn quotes the output line it answers from (``RESULT: 12`` on a
line of its own, as the feedback shows it); the others keep the full style. Same decisions, checks
and answers either way.

``call_rate`` p ≥ 0 makes the teacher *not adaptive* (the CPU testbed's SFT data, docs/train.md):
on every difficulty it calls the tool with probability p (one seeded draw per episode) and
otherwise answers directly from its glance, with the same words whatever the difficulty; the
generic bug can then hit the first program on any difficulty (the solver's own mistakes stay on
hard tasks). The default, −1, is the adaptive teacher above.

Every decision is a function of the conversation so far (replayed on each call) and a random
stream seeded by (seed, task id, rollout): the same inputs give the same trajectory. The teacher
knows a task only through `TaskView` (question, options, skill and difficulty labels), never its
answer. A step whose output never arrives (failure twice, the turn-limit message) leads to the best
answer the outputs allow, or "unknown".
Not handled: tasks of skills without a solver module (raises ValueError at `policy`).
"""

from __future__ import annotations

import hashlib
import io
import random
from dataclasses import dataclass, replace

import numpy as np

from codedance.config import bounded, check_bounds
from codedance.policy.base import Completion
from codedance.teacher import charts, counting, dots, geometry, photos, search, spatial
from codedance.teacher.program import LOAD, Step, finished, results
from codedance.teacher.view import TaskView
from codedance.types import Image, Message, Task

SOLVERS = {
    "counting": counting,
    "spatial": spatial,
    "geometry": geometry,
    "search": search,
    "charts": charts,
    "photos": photos,
    "dots": dots,
}
CODE_STYLES = ("full", "compact")
BUG = "channels = input_image.size[2]  # number of colour channels\n"
DIRECT_THINK = (
    "The picture is simple enough to read directly."  # the opening of every direct answer
)


@dataclass(frozen=True)
class TeacherConfig:
    """``temperature`` 0 gives the greedy expert (no mistakes); ``mistake_rate`` is the chance of
    a first mistake on a hard task at temperature ≥ 1; ``code_style`` is ``full`` (helpers'
    source pasted in, the default) or ``compact`` (see the module docstring)."""

    temperature: float = bounded(1.0, at_least=0)
    mistake_rate: float = bounded(0.5, at_least=0, at_most=1)
    seed: int = 0
    code_style: str = "full"
    # < 0: adaptive; p in [0, 1]: calls on every difficulty with probability p
    call_rate: float = bounded(-1.0, at_most=1)

    def __post_init__(self) -> None:
        check_bounds(self)
        if self.code_style not in CODE_STYLES:
            raise ValueError(f"code_style must be one of {CODE_STYLES}, got {self.code_style!r}")


def register(skill: str, module: object) -> None:
    """Add a solver module (``glance``, ``steps``, ``answer``) for another skill."""
    SOLVERS[skill] = module


class ExpertTeacher:
    """Makes one `TeacherPolicy` per (task, rollout)."""

    def __init__(self, config: TeacherConfig = TeacherConfig()) -> None:
        self.config = config

    def policy(self, task: Task, rollout: int = 0) -> TeacherPolicy:
        view = TaskView.from_task(task)
        if view.skill not in SOLVERS:
            raise ValueError(f"the teacher has no solver for skill {view.skill!r}")
        return TeacherPolicy(view, self.config, rollout)


def _rng(config: TeacherConfig, view: TaskView, rollout: int) -> random.Random:
    digest = hashlib.sha256(f"{config.seed}/{view.id}/{rollout}".encode()).digest()
    return random.Random(int.from_bytes(digest, "little"))


def _pixels(image: Image) -> np.ndarray:
    from PIL import Image as PILImage

    return np.asarray(PILImage.open(io.BytesIO(image.png)).convert("RGB"))


def turn(think: str, code: str | None = None, answer: str | None = None) -> str:
    """One message in the CodeDance format."""
    text = f"<think>{think}</think>\n"
    if code is not None:
        return text + f"<code>\n```python\n{code}```\n</code>"
    return text + f"<answer>{answer}</answer>"


def quoting_answer(read: str, value: str) -> str:
    """The compact teacher's last turn: the output line it answers from, quoted token for token."""
    return turn(f"The output reads\nRESULT: {read}\nwhich answers the question.", answer=value)


class TeacherPolicy:
    """The teacher on one episode; see the module docstring."""

    def __init__(self, view: TaskView, config: TeacherConfig, rollout: int) -> None:
        self.view, self.config, self.rollout = view, config, rollout
        self.solver = SOLVERS[view.skill]
        rng = _rng(config, view, rollout)
        p = config.mistake_rate * min(1.0, config.temperature)
        kinds = (*getattr(self.solver, "MISTAKES", ()), "bug")
        self.mistake = rng.choice(kinds) if rng.random() < p else None
        self.compact = config.code_style == "compact" and getattr(self.solver, "COMPACT", False)
        self.fixed_rate = config.call_rate >= 0
        # drawn only in that mode, so the adaptive teacher's random stream is unchanged
        self.direct = (
            rng.random() >= config.call_rate if self.fixed_rate else view.difficulty == "easy"
        )

    def _plan(self) -> list[Step]:
        hard = self.view.difficulty == "hard"
        mistake = self.mistake if hard else None
        if self.compact:
            plan = self.solver.steps(self.view, hard, mistake, compact_code=True)
        else:
            plan = self.solver.steps(self.view, hard, mistake)
        if (hard or self.fixed_rate) and self.mistake == "bug":
            first = plan[0]
            buggy = Step(
                first.think,
                first.code.replace(LOAD, LOAD + BUG, 1),
                fix=replace(
                    first,
                    think="input_image is a PIL image: .size is (width, height), it has no "
                    "channel count. I drop that line and run the rest. " + first.think,
                ),
            )
            plan = [buggy, *plan[1:]]
        return plan

    def complete(self, messages: tuple[Message, ...]) -> Completion:
        users = [m for m in messages if m.role == "user"]
        if not users or not users[0].images:
            raise ValueError("the teacher needs the task's image in the first user message")
        feedbacks = [m.text for m in users[1:]]
        if self.direct:
            value = self.solver.glance(self.view, _pixels(users[0].images[0]))
            return Completion(turn(DIRECT_THINK, answer=value))
        queue, note, best, retried = self._plan(), "", None, False
        read = None  # the RESULT value the best answer was read from
        for feedback in feedbacks:
            step = queue.pop(0)
            if "Turn limit reached" in feedback:
                queue = []
            if not finished(feedback):
                if step.fix is not None or not retried:
                    queue.insert(0, step.fix or step)
                    retried = step.fix is None
                    note = "The code failed; reading the error, "
                continue
            problem = step.check(feedback)
            if problem is not None and step.fix is not None:
                queue.insert(0, step.fix)
                note = f"Looking at the output, {problem}. "
                continue
            value = self.solver.answer(self.view, feedback)
            if value:
                printed = results(feedback)
                best, read = value, printed[-1] if printed else None
            note = ""
        if queue and (best is None or len(feedbacks) < len(self._plan()) + 2):
            step = queue[0]
            return Completion(turn(note + step.think, code=step.code))
        value = best if best is not None else "unknown"
        if (
            self.compact and read is not None
        ):  # quote the output line itself: a copy, token for token
            return Completion(quoting_answer(read, value))
        return Completion(
            turn(f"The output gives {value}, which answers the question.", answer=value)
        )

    async def acomplete(self, messages: tuple[Message, ...]) -> Completion:
        return self.complete(messages)
