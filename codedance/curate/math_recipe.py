"""The math recipe (paper Tables 8-9): a text chain of thought revised into executed code steps.

For a medium or hard item of a source with ``recipe: math``:

1. the strong model writes a step-by-step solution (template ``math_cot``, Table 8);
2. the strong model revises it for a code interpreter (template ``math_to_code``, Table 9): each
   calculating step becomes a ``<code>```python ...```</code>`` snippet followed by the result it
   expects, ``<interpreter>...</interpreter>``, the other text kept, the answer last.
   `split_revision` is strict: at least one snippet, every ``<code>`` tag closed around a
   non-empty ```python block, else `ProgramUnparseable`;
3. the trajectory runs through the real loop and sandbox, one executed turn per snippet: the
   text before snippet *i* is turn *i*'s thinking, the sandbox runs the snippet and its real
   output is fed back (the revision's claimed ``<interpreter>`` text never enters the data).
   While every real output agrees with the claimed one (whitespace-normalised stdout, the
   snippet succeeded), the revision's next step is used as written, and its closing text with
   the answer becomes the final turn. From the first disagreement (a wrong claim, a failed
   snippet, no claim given) the revision's later text no longer follows from what the model
   saw, so the strong model writes the remaining turns itself, seeing the real outputs (it may
   write more code or answer).

`math_trajectory` returns the trajectory and a record of the revision: the steps, which agreed,
and where the strong model took over (``diverged_at``, None when the revision held throughout).
Medium and hard items get the same recipe. Not handled: checking the chain of thought's own
arithmetic before the revision (the executed steps and the verify stage's grading do that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from codedance.curate.endpoints import Asker
from codedance.curate.templates import render
from codedance.parsing import ANSWER_RE
from codedance.policy.base import Completion
from codedance.rollout import EpisodeConfig, arun_episode
from codedance.types import ExecResult, Message, Task, Trajectory

_CODE_TAG = re.compile(r"<code>(.*?)</code>", re.DOTALL)
_FENCED = re.compile(r"^\s*```python[ \t]*\n(.*?)```\s*$", re.DOTALL)
_CLAIM = re.compile(r"\s*<interpreter>(.*?)</interpreter>", re.DOTALL)
_ANSWER = re.compile(r"<answer>.*?</answer>", re.DOTALL)


class ProgramUnparseable(ValueError):
    """The revision holds no well-formed code snippet."""


@dataclass(frozen=True)
class Step:
    """One calculating step of a revision: the text before it, its code, the output it claims
    (None when the revision gave no ``<interpreter>`` block after it)."""

    text: str
    code: str
    claimed: str | None


@dataclass(frozen=True)
class Revision:
    steps: tuple[Step, ...]
    closing: str  # the text after the last snippet, with the answer tag when there is one


def split_revision(reply: str) -> Revision:
    """The steps of a Table 9 revision (see the module docstring)."""
    if reply.count("<code>") != reply.count("</code>"):
        raise ProgramUnparseable(f"a <code> tag is not closed: {reply[:120]!r}")
    steps: list[Step] = []
    position = 0
    for match in _CODE_TAG.finditer(reply):
        fenced = _FENCED.match(match.group(1))
        if fenced is None or not fenced.group(1).strip():
            raise ProgramUnparseable(
                f"snippet {len(steps) + 1} is not one non-empty ```python block: "
                f"{match.group(1)[:120]!r}"
            )
        text = reply[position : match.start()]
        claim = _CLAIM.match(reply, match.end())
        position = claim.end() if claim else match.end()
        steps.append(Step(text.strip(), fenced.group(1).strip(), claim.group(1) if claim else None))
    if not steps:
        raise ProgramUnparseable(f"no <code> snippet: {reply[:120]!r}")
    return Revision(tuple(steps), reply[position:].strip())


def steps_of(cot: str) -> str:
    """The chain of thought without its answer tag (the revision gives the answer)."""
    return _ANSWER.sub("", cot).strip()


def agrees(claimed: str | None, result: ExecResult) -> bool:
    """Whether the sandbox's real `result` is the revision's claim (stdout, spaces normalised)."""
    return claimed is not None and result.ok and claimed.split() == result.stdout.split()


def step_turn(step: Step) -> str:
    thinking = step.text or "I compute this step with code."
    return f"<think>{thinking}</think>\n<code>\n```python\n{step.code}\n```\n</code>"


def closing_turn(closing: str) -> str | None:
    """The revision's closing text as a final turn, or None when it has no single answer tag."""
    answers = ANSWER_RE.findall(closing)
    if len(answers) != 1 or not answers[0].strip():
        return None
    thinking = steps_of(closing) or "The computed values give the answer."
    return f"<think>{thinking}</think>\n<answer>{answers[0].strip()}</answer>"


class _Watched:
    """The sandbox, keeping its last result (the policy compares it to the claim)."""

    def __init__(self, sandbox: Any) -> None:
        self.sandbox = sandbox
        self.last: ExecResult | None = None

    def run(self, code: str) -> ExecResult:
        self.last = self.sandbox.run(code)
        return self.last

    async def arun(self, code: str) -> ExecResult:
        self.last = await self.sandbox.arun(code)
        return self.last


class RevisionPolicy:
    """Replies with the revision's steps while the real outputs agree with their claims, then
    with the strong model (see the module docstring)."""

    def __init__(self, revision: Revision, strong: Asker, runner: _Watched) -> None:
        self.revision = revision
        self.strong = strong
        self.runner = runner
        self.agreed: list[bool] = []
        self.diverged_at: int | None = None

    def complete(self, messages: tuple[Message, ...]) -> Completion:
        raise NotImplementedError("RevisionPolicy is asynchronous: use arun_episode")

    async def acomplete(self, messages: tuple[Message, ...]) -> Completion:
        done = sum(m.role == "assistant" for m in messages)
        steps = self.revision.steps
        if self.diverged_at is None and done:
            self.agreed.append(
                self.runner.last is not None and agrees(steps[done - 1].claimed, self.runner.last)
            )
            if not self.agreed[-1]:
                self.diverged_at = done - 1
        if self.diverged_at is None:
            if done < len(steps):
                return Completion(step_turn(steps[done]))
            closing = closing_turn(self.revision.closing)
            if closing is not None:
                return Completion(closing)
            self.diverged_at = done  # the revision ran out without an answer: the model answers
        return await self.strong.ask(messages)


async def math_trajectory(
    task: Task, strong: Asker, sandbox: Any, episode: EpisodeConfig, prompts: Any = None
) -> tuple[Trajectory, str, dict[str, Any]]:
    """(trajectory, the chain of thought, the revision's record) for `task`; `ProgramUnparseable`
    when the revision has no usable snippet. `sandbox` holds the model-sized images."""
    images = episode.images_of(task)
    ask_cot = Message("user", (*images, render("math_cot", prompts, question=task.question)))
    cot = (await strong.ask((ask_cot,))).text
    rewrite = render("math_to_code", prompts, question=task.question, solution=steps_of(cot))
    revision = split_revision((await strong.ask((Message("user", (rewrite,)),))).text)
    runner = _Watched(sandbox)
    policy = RevisionPolicy(revision, strong, runner)
    trajectory = await arun_episode(policy, task, runner, episode)
    record = {
        "steps": [{"text": s.text, "code": s.code, "claimed": s.claimed} for s in revision.steps],
        "agreed": policy.agreed,
        "diverged_at": policy.diverged_at,
    }
    return trajectory, cot, record
