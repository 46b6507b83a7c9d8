"""One judge question: is `prediction` the gold answer? Asked of the judge endpoint, read strictly.

`ask_judge` sends the few-shot "Judgement: 1/0" prompt of `codedance.grading.judge` at
temperature 0 and returns a `JudgeReply`: ``correct`` True/False, or None when the reply is no
verdict (``problem`` ``judge_unparseable``, never guessed) or the request failed (``problem``
``judge_error``: a 4xx or malformed body; an open breaker raises `EndpointDown` to the caller).
Used by the filter stage (answers the rules cannot decide) and by verification.
"""

from __future__ import annotations

from dataclasses import dataclass

from codedance.curate.endpoints import Asker, error_text
from codedance.grading.judge import JudgeVerdictError, build_prompt, parse_verdict
from codedance.policy.base import PolicyError
from codedance.types import Message, Task


@dataclass(frozen=True)
class JudgeReply:
    correct: bool | None
    reply: str = ""
    problem: str = ""  # '' | judge_unparseable | judge_error
    detail: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "verdict": self.correct,
            "reply": self.reply,
            **({"problem": self.problem} if self.problem else {}),
        }


async def ask_judge(judge: Asker, task: Task, prediction: str) -> JudgeReply:
    """The judge's verdict on `prediction` for `task` (see the module docstring)."""
    prompt = build_prompt(question=task.question, gold=task.answer, prediction=prediction)
    try:
        reply = (await judge.ask((Message("user", (prompt,)),), temperature=0.0)).text
    except PolicyError as exc:
        return JudgeReply(None, "", "judge_error", error_text(exc))
    try:
        return JudgeReply(parse_verdict(reply), reply)
    except JudgeVerdictError as exc:
        return JudgeReply(None, reply, "judge_unparseable", str(exc))
