"""Verification of one curated trajectory before it becomes SFT data.

`verify(task, trajectory, pool, episode, judge)` accepts a trajectory only when, in this order
(the first failure is the reason):

1. it ended with an answer (``not_answered``) and every turn follows the format (``bad_format``);
2. no code turn is a no-op (``noop_code``): a snippet that executed nothing, or ran without
   printing anything or showing an image (its feedback tells the model nothing);
3. no turn repeats an earlier turn's code with the same result (``duplicate_turn``: teaching
   that is teaching tool spam);
4. the answer is correct against the gold: by the rules of its answer kind, then, when the rules
   say wrong and a judge endpoint is given, by the judge (the few-shot "Judgement: 1/0" prompt
   of `codedance.grading.judge`, parsed strictly): ``wrong_answer``, or ``judge_unparseable``
   when the judge's reply is not a verdict (never guessed);
5. re-running every snippet in order in a fresh sandbox holding the same images reproduces each
   recorded result (status, output, error, image hashes, notes: `codedance.synth.verify.observable`)
   (``output_mismatch``); a sandbox that fails itself gives ``replay_error``;
6. optionally (``verify.cross_check``), the judge endpoint, a stronger MLLM, sees the whole
   conversation with every image and says whether the reasoning agrees with the images
   (template ``cross_check``, strict one-word ``CONSISTENT`` / ``INCONSISTENT``):
   ``inconsistent_reasoning``, or ``cross_check_unparseable``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from codedance.curate.endpoints import Asker, error_text
from codedance.curate.inspectors import parse_word
from codedance.curate.judging import ask_judge
from codedance.curate.templates import render
from codedance.grading import grade_trajectory
from codedance.policy.base import PolicyError
from codedance.prompts import conversation
from codedance.rollout import EXEC_TIMEOUT_S, EpisodeConfig
from codedance.synth.verify import observable, recorded_steps, replay_mismatch
from codedance.types import Image, Message, StopReason, Task, Trajectory

if TYPE_CHECKING:  # pragma: no cover
    from codedance.sandbox.pool import SandboxPool

REASONS = (
    "not_answered",
    "bad_format",
    "noop_code",
    "duplicate_turn",
    "wrong_answer",
    "judge_unparseable",
    "judge_error",
    "output_mismatch",
    "replay_error",
    "inconsistent_reasoning",
    "cross_check_unparseable",
)


@dataclass(frozen=True)
class Verdict:
    """``reason`` is '' when accepted; ``graded_by`` is ``rule`` or ``judge``."""

    reason: str = ""
    detail: str = ""
    graded_by: str = ""

    @property
    def accepted(self) -> bool:
        return not self.reason


def structural_problem(trajectory: Trajectory) -> Verdict | None:
    """Checks 1-3 (no sandbox, no model)."""
    if trajectory.stop_reason is not StopReason.ANSWERED:
        return Verdict("not_answered", f"stopped: {trajectory.stop_reason.value}")
    seen: dict[tuple[object, ...], int] = {}
    for i, turn in enumerate(trajectory.turns):
        if not turn.verdict.ok:
            return Verdict("bad_format", f"turn {i}: {', '.join(turn.verdict.reasons)}")
        r = turn.result
        if r is None:
            continue
        if r.executed_nothing or (
            r.ok and not r.stdout.strip() and not r.stderr.strip() and not r.images
        ):
            return Verdict("noop_code", f"turn {i}: the code produced no output and no image")
        signature = (" ".join((turn.code or "").split()), observable(r))
        if signature in seen:
            return Verdict(
                "duplicate_turn", f"turn {i} repeats turn {seen[signature]} with the same result"
            )
        seen[signature] = i
    return None


async def grade(task: Task, trajectory: Trajectory, judge: Asker | None) -> Verdict:
    """Check 4: '' reason when correct by the rules or, failing them, by the judge."""
    if grade_trajectory(trajectory=trajectory, task=task).correct:
        return Verdict(graded_by="rule")
    if judge is None or not trajectory.answer:
        return Verdict(
            "wrong_answer", f"answered {trajectory.answer!r}, gold {task.answer!r}", "rule"
        )
    judged = await ask_judge(judge, task, trajectory.answer)
    if judged.problem:
        return Verdict(judged.problem, judged.detail, "judge")
    if not judged.correct:
        return Verdict(
            "wrong_answer", f"judge: {trajectory.answer!r} is not {task.answer!r}", "judge"
        )
    return Verdict(graded_by="judge")


async def replay(
    task: Task,
    trajectory: Trajectory,
    pool: SandboxPool,
    episode: EpisodeConfig,
    exec_timeout_s: float,
) -> Verdict | None:
    """Check 5: re-run the snippets in a fresh sandbox; None when every result is reproduced."""
    steps = recorded_steps(trajectory)
    if not steps:
        return None
    try:
        mismatch = await replay_mismatch(pool, episode.images_of(task), steps, exec_timeout_s)
    except Exception as exc:  # noqa: BLE001  (the sandbox's own failure, not the snippet's)
        return Verdict("replay_error", f"{type(exc).__name__}: {exc}")
    return None if mismatch is None else Verdict("output_mismatch", mismatch)


def cross_check_message(trajectory: Trajectory, prompts: Any = None) -> Message:
    """One user message: the conversation as the model saw it (roles marked, images in place),
    then the ``cross_check`` instruction."""
    parts: list[str | Image] = []
    for message in conversation(trajectory):
        if message.role != "system":
            parts.append(f"\n[{message.role}]\n")
            parts.extend(message.parts)
    parts.append("\n\n" + render("cross_check", prompts))
    return Message("user", tuple(parts))


async def cross_check(trajectory: Trajectory, judge: Asker, prompts: Any = None) -> Verdict | None:
    """Check 6; None when the judge says the reasoning is consistent with the images."""
    try:
        reply = (await judge.ask((cross_check_message(trajectory, prompts),), temperature=0.0)).text
    except PolicyError as exc:
        return Verdict("judge_error", f"cross-check: {error_text(exc)}", "judge")
    word = parse_word(reply, ("CONSISTENT", "INCONSISTENT"))
    if word is None:
        return Verdict("cross_check_unparseable", f"{reply[:120]!r}", "judge")
    return (
        Verdict(
            "inconsistent_reasoning",
            "the judge found the reasoning at odds with the images",
            "judge",
        )
        if word == "INCONSISTENT"
        else None
    )


async def verify(
    task: Task,
    trajectory: Trajectory,
    pool: SandboxPool,
    episode: EpisodeConfig,
    judge: Asker | None,
    exec_timeout_s: float = EXEC_TIMEOUT_S,
    *,
    cross_checker: Asker | None = None,
    prompts: Any = None,
) -> Verdict:
    """The verdict on `trajectory` (see the module docstring); `cross_checker` enables check 6."""
    problem = structural_problem(trajectory)
    if problem is not None:
        return problem
    graded = await grade(task, trajectory, judge)
    if not graded.accepted:
        return graded
    replayed = await replay(task, trajectory, pool, episode, exec_timeout_s)
    if replayed is not None:
        return replayed
    if cross_checker is not None:
        checked = await cross_check(trajectory, cross_checker, prompts)
        if checked is not None:
            return checked
    return graded
