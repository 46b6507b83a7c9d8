"""The math recipe (paper Tables 8-9): a text chain of thought rewritten into executed code.

For a medium or hard item of a source with ``recipe: math``:

1. the strong model writes a step-by-step solution (template ``math_cot``); its
   ``<answer>`` tag is removed, the steps are kept as the turn's thinking;
2. the strong model rewrites those steps as one Python program that prints each intermediate
   result (template ``math_to_code``); `extract_program` is strict: exactly the first fenced
   ```python block, non-empty, else `ProgramUnparseable`;
3. the trajectory runs through the real loop and sandbox: one turn holding the steps and the
   program, the sandbox's real output fed back, and the strong model's final turn.

Medium and hard items get the same shape (one code turn). Not handled: splitting the program
into one code turn per step, checking that the printed values agree with the text's.
"""

from __future__ import annotations

import re
from typing import Any

from codedance.curate.atomic import AtomicPolicy
from codedance.curate.endpoints import Asker
from codedance.curate.templates import render
from codedance.rollout import Episode, EpisodeConfig, arun_episode
from codedance.types import Message, Task, Trajectory

_PROGRAM = re.compile(r"```python[ \t]*\n(.*?)```", re.DOTALL)
_ANSWER = re.compile(r"<answer>.*?</answer>", re.DOTALL)


class ProgramUnparseable(ValueError):
    """The rewrite holds no non-empty ```python block."""


def extract_program(reply: str) -> str:
    match = _PROGRAM.search(reply)
    if match is None or not match.group(1).strip():
        raise ProgramUnparseable(f"no ```python block: {reply[:120]!r}")
    return match.group(1).strip()


def steps_of(cot: str) -> str:
    """The chain of thought without its answer tag (the answer comes after the execution)."""
    return _ANSWER.sub("", cot).strip()


async def math_trajectory(task: Task, strong: Asker, sandbox: Any, episode: EpisodeConfig,
                          prompts: Any = None) -> tuple[Trajectory, str, str]:
    """(trajectory, the chain of thought, the program) for `task`; `ProgramUnparseable` when the
    rewrite has no program. `sandbox` holds the model-sized images."""
    images = Episode(task, episode).images
    ask_cot = Message("user", (*images, render("math_cot", prompts, question=task.question)))
    cot = (await strong.ask((ask_cot,))).text
    rewrite = render("math_to_code", prompts, question=task.question, solution=steps_of(cot))
    program = extract_program((await strong.ask((Message("user", (rewrite,)),))).text)
    turn = f"<think>{steps_of(cot)}</think>\n<code>\n```python\n{program}\n```\n</code>"
    trajectory = await arun_episode(AtomicPolicy([turn], strong), task, sandbox, episode)
    return trajectory, cot, program
