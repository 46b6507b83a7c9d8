"""What one rollout hands to verl besides its tokens: `RolloutRecord`, carried in ``extra_fields``.

verl stores an agent loop's ``extra_fields`` with the sample (in 0.9.1's TransferQueue, and in the
reward loop as ``extra_info``); the advantage step and the reward function read them back. The
record is one JSON string under the key `EXTRA_KEY` so that it survives verl's object arrays
unchanged. It holds exactly what the rewards and advantages read, and nothing heavy (no images,
no stdout):

- per assistant turn: the raw text (what the format rules read), the ``[start, end)`` span of its
  tokens in the *response* (verl's ``responses`` / ``response_mask`` coordinates), the sandbox
  status of its call (``None`` for no call), whether the snippet executed nothing (no-op), whether
  the feedback after it carried the injected turn-limit text, how many images the feedback
  returned (DeepEyes' bonus counts them), and the parser's verdict;
- the extracted answer, the stop reason, the task id and the answer domain.

`RolloutRecord.trajectory` rebuilds a skeleton `codedance.types.Trajectory` (texts, results with
status and no-op flag only, one empty placeholder per returned image) that `codedance.rewards`
grades exactly as the full one: rewards never read stdout, pixels or the prompt. Not handled:
nothing from the feedback text is kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from codedance.types import (
    ExecResult,
    ExecStatus,
    FormatVerdict,
    Image,
    StopReason,
    Trajectory,
    Turn,
)

EXTRA_KEY = "codedance"
RECORD_VERSION = 1


@dataclass(frozen=True)
class TurnRecord:
    """One assistant turn as the rewards see it; ``span`` is [start, end) in response tokens."""

    text: str
    span: tuple[int, int]
    status: str | None = None  # an ExecStatus value, None when no code ran
    executed_nothing: bool = False
    injected_turn_limit: bool = False
    verdict_ok: bool = True
    verdict_reasons: tuple[str, ...] = ()
    feedback_images: int = 0

    def turn(self) -> Turn:
        result = None
        if self.status is not None:
            result = ExecResult(
                status=ExecStatus(self.status), executed_nothing=self.executed_nothing
            )
        shown = tuple(Image(png=b"", origin="record") for _ in range(self.feedback_images))
        return Turn(
            text=self.text,
            result=result,
            feedback_has_turn_limit=self.injected_turn_limit,
            verdict=FormatVerdict(ok=self.verdict_ok, reasons=self.verdict_reasons),
            feedback_images=shown,
        )


@dataclass(frozen=True)
class RolloutRecord:
    """A rollout's turns, answer and stop reason (see the module docstring)."""

    task_id: str
    turns: tuple[TurnRecord, ...]
    stop_reason: str
    answer: str | None = None
    domain: str = "general"
    truncated_tokens: int = 0  # response tokens cut at rollout.response_length (0 when none)

    @property
    def spans(self) -> tuple[tuple[int, int], ...]:
        return tuple(t.span for t in self.turns)

    def trajectory(self) -> Trajectory:
        """The skeleton trajectory the reward functions grade."""
        return Trajectory(
            task_id=self.task_id,
            turns=tuple(t.turn() for t in self.turns),
            stop_reason=StopReason(self.stop_reason),
            answer=self.answer,
        )

    def to_json(self) -> str:
        body = {
            "v": RECORD_VERSION,
            "task_id": self.task_id,
            "stop_reason": self.stop_reason,
            "answer": self.answer,
            "domain": self.domain,
            "truncated_tokens": self.truncated_tokens,
            "turns": [
                {
                    "text": t.text,
                    "span": list(t.span),
                    "status": t.status,
                    "executed_nothing": t.executed_nothing,
                    "injected_turn_limit": t.injected_turn_limit,
                    "verdict_ok": t.verdict_ok,
                    "verdict_reasons": list(t.verdict_reasons),
                    "feedback_images": t.feedback_images,
                }
                for t in self.turns
            ],
        }
        return json.dumps(body, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> RolloutRecord:
        body = json.loads(text)
        if body.get("v") != RECORD_VERSION:
            raise ValueError(f"rollout record version {body.get('v')!r}, expected {RECORD_VERSION}")
        turns = tuple(
            TurnRecord(
                text=t["text"],
                span=(int(t["span"][0]), int(t["span"][1])),
                status=t["status"],
                executed_nothing=bool(t["executed_nothing"]),
                injected_turn_limit=bool(t["injected_turn_limit"]),
                verdict_ok=bool(t["verdict_ok"]),
                verdict_reasons=tuple(t["verdict_reasons"]),
                feedback_images=int(t.get("feedback_images", 0)),
            )
            for t in body["turns"]
        )
        return cls(
            task_id=body["task_id"],
            turns=turns,
            stop_reason=body["stop_reason"],
            answer=body["answer"],
            domain=body["domain"],
            truncated_tokens=int(body["truncated_tokens"]),
        )


def record_from_extra(extra: object) -> RolloutRecord:
    """The record inside one sample's ``extra_fields`` / ``extra_info`` mapping; a sample that
    did not come from the codedance agent loop raises, naming the key."""
    if not isinstance(extra, dict) or EXTRA_KEY not in extra:
        keys = sorted(extra) if isinstance(extra, dict) else type(extra).__name__
        raise KeyError(
            f"no {EXTRA_KEY!r} record in the sample's extra fields ({keys}); was it "
            "generated by the 'codedance' agent loop?"
        )
    return RolloutRecord.from_json(extra[EXTRA_KEY])
