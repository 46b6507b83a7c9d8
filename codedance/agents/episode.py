"""`PeerEpisode`: the bookkeeping every peer protocol's episode shares
(`codedance.rollout.Episode`'s driving interface); a protocol adds ``on_completion`` and
``on_result``."""

from __future__ import annotations

from codedance.rollout import EpisodeConfig
from codedance.types import Message, StopReason, Task, Trajectory, Turn


class PeerEpisode:
    """Turns, messages, stop reason and answer of one episode; ``agent`` names the protocol and
    ``source`` the peer's file it follows (both kept in the trajectory's metadata)."""

    agent = ""
    source = ""

    def __init__(self, task: Task, config: EpisodeConfig, prompt: tuple[Message, ...]) -> None:
        self.task = task
        self.config = config
        self.prompt = prompt
        self._messages: list[Message] = list(prompt)
        self._turns: list[Turn] = []
        self._pending: tuple[str, Turn] | None = (
            None  # (the reply as it goes back to the model, its turn)
        )
        self._notes: list[tuple[str, str]] = []
        self.stop_reason: StopReason | None = None
        self.answer: str | None = None

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    @property
    def turns(self) -> tuple[Turn, ...]:
        return tuple(self._turns)

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self._messages)

    def _stop(self, reason: StopReason, turn: Turn | None) -> None:
        if turn is not None:
            self._turns.append(turn)
        self.stop_reason = reason

    def _check_ready(self) -> None:
        if self.done or self._pending is not None:
            raise RuntimeError("on_completion called on a finished episode or before on_result")

    def _take_pending(self) -> tuple[str, Turn]:
        if self._pending is None:
            raise RuntimeError("no call pending")
        pending, self._pending = self._pending, None
        return pending

    def on_runner_error(self, error: BaseException) -> None:
        _, turn = self._take_pending()
        self._notes.append(("error", f"tool: {type(error).__name__}: {error}"))
        self._stop(StopReason.SANDBOX_ERROR, turn)

    def on_model_limit(self, error: BaseException) -> None:
        from codedance.policy.base import ImageLimitError

        self._notes.append(("error", f"model limit: {error}"))
        self._stop(
            StopReason.IMAGE_LIMIT if isinstance(error, ImageLimitError) else StopReason.MAX_TOKENS,
            None,
        )

    def interrupt(self, error: BaseException) -> None:
        if self.done:
            return
        pending = self._pending[1] if self._pending is not None else None
        self._pending = None
        self._notes.append(("error", f"interrupted: {type(error).__name__}: {error}".rstrip(": ")))
        self._stop(StopReason.INTERRUPTED, pending)

    def trajectory(self) -> Trajectory:
        if self.stop_reason is None:
            raise RuntimeError("the episode has not ended")
        metadata = (
            ("profile", self.config.profile.name),
            ("agent", self.agent),
            ("agent_source", self.source),
            *self.config.metadata,
            *self._notes,
        )
        return Trajectory(
            task_id=self.task.id,
            turns=tuple(self._turns),
            stop_reason=self.stop_reason,
            answer=self.answer,
            metadata=metadata,
            prompt=self.prompt,
        )
