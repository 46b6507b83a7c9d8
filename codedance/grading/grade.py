"""Grade one response for one task: extract the final answer, apply the rule of its kind, and
optionally consult an LLM judge.

``judge_policy``: ``never`` (rules only, the default), ``fallback`` (the judge decides when the
rule says wrong — the release's math order: math-verify first, then a judge), ``only`` (the
judge alone, as the release grades its general RL data). A judge policy other than ``never``
without a judge raises. Judge errors propagate: an unreachable judge never becomes a 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from codedance.grading.check import check_answer
from codedance.grading.extract import ANSWER_TAG, extract_answer
from codedance.grading.judge import JudgeClient
from codedance.types import Task, Trajectory

JUDGE_POLICIES = ("never", "fallback", "only")


@dataclass(frozen=True)
class Grade:
    """Whether the answer is right, the answer that was graded, where it was found
    (``answer_tag``, ``boxed``, ``answer_is``, ``none``) and which scorer decided
    (``rule:<kind>`` or ``judge``)."""

    correct: bool
    answer: str | None
    source: str
    scorer: str


def grade_response(
    *, response: str, task: Task, judge: JudgeClient | None = None, judge_policy: str = "never"
) -> Grade:
    """Grade a model response (one message or the whole trace) against ``task``.

    >>> from codedance.types import AnswerKind, Task
    >>> task = Task(id="t", question="How many coins?", images=(), answer="24",
    ...             kind=AnswerKind.COUNT)
    >>> grade_response(response="<think>..</think><answer>twenty-four</answer>", task=task)
    Grade(correct=True, answer='twenty-four', source='answer_tag', scorer='rule:count')
    """
    if judge_policy not in JUDGE_POLICIES:
        raise ValueError(f"judge_policy must be one of {JUDGE_POLICIES}, got {judge_policy!r}")
    if judge_policy != "never" and judge is None:
        raise ValueError(f"judge_policy={judge_policy!r} needs a JudgeClient")
    extracted = extract_answer(response)
    if extracted.text is None:
        return Grade(False, None, extracted.source, "none")
    if judge_policy != "only":
        choices = dict(task.choices) or None
        if check_answer(extracted.text, task.answer, task.kind, choices):
            return Grade(True, extracted.text, extracted.source, f"rule:{task.kind.value}")
        if judge_policy == "never":
            return Grade(False, extracted.text, extracted.source, f"rule:{task.kind.value}")
    assert judge is not None
    verdict = judge.judge(question=task.question, gold=task.answer, prediction=extracted.text)
    return Grade(verdict, extracted.text, extracted.source, "judge")


def grade_trajectory(
    *,
    trajectory: Trajectory,
    task: Task,
    judge: JudgeClient | None = None,
    judge_policy: str = "never",
) -> Grade:
    """Grade a trajectory on its final answer: ``trajectory.answer`` when the rollout set it,
    else the last assistant turn's text. A trajectory for another task raises."""
    if trajectory.task_id != task.id:
        raise ValueError(f"trajectory is for task {trajectory.task_id!r}, not {task.id!r}")
    if trajectory.answer is not None:
        response = f"<answer>{trajectory.answer}</answer>"
        grade = grade_response(response=response, task=task, judge=judge, judge_policy=judge_policy)
        return Grade(grade.correct, grade.answer, ANSWER_TAG, grade.scorer)
    last = trajectory.turns[-1].text if trajectory.turns else ""
    return grade_response(response=last, task=task, judge=judge, judge_policy=judge_policy)
