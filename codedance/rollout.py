"""The think -> execute -> feedback loop: `Episode` (the per-turn decisions) and its drivers.

`Episode` holds one trajectory in progress and makes every decision as a plain method, with no
I/O: ``messages`` is what to send the model next; `Episode.on_completion` parses the reply and
returns the code to run (or None when the episode is over); `Episode.on_result` renders the
sandbox's result into the next observation. `run_episode` and `arun_episode` drive it with a
`Policy` and a `CodeRunner` (`drive_episode` with an optional ``on_turn`` callback, called as each
turn ends, for a caller that shows turns live and keeps the `Episode` to save on an interruption);
verl's agent loop (`codedance.integrations.verl.agent_loop`) and the CPU trainer's lockstep
sampler drive the same methods with their own token-level models.

Stop reasons (`StopReason`):
- ``answered``: the turn has a complete ``<answer>…</answer>``; code in the same turn is not run
  (the verdict flags it).
- ``max_turns``: the last allowed turn (``max_turns``: `MAX_TURNS`, `EVAL_MAX_TURNS` in eval and
  solve) had code but no answer; that code is not run. With ``inject_turn_limit`` the feedback
  before the last turn ends with the profile's "Turn limit reached" text
  (`Turn.feedback_has_turn_limit` on the turn whose feedback carries it; that turn's code ran, so it
  is a tool call like any other).
- ``max_tokens``: the reply was cut at ``max_tokens`` (finish reason ``length``) without an
  answer, or the server said the conversation overflows its context (`ContextOverflowError`).
- ``format_error``: a reply with neither code nor answer (empty, prose only, unclosed tags).
  ``Trajectory.answer`` may still hold a ``\\boxed{}`` fallback for scoring.
- ``sandbox_error``: the runner itself raised (an infrastructure failure, not the snippet's
  error: a snippet that fails, times out or crashes is an `ExecResult` the model sees).
- ``image_limit``: the server refused the conversation for holding more images than its
  per-prompt limit (`ImageLimitError`, vLLM's ``--limit-mm-per-prompt``).
- ``interrupted``: the caller stopped the episode (`Episode.interrupt`: a server error, Ctrl-C) and
  keeps what was done; a code block not yet run is kept without a result. Drivers never set it.
The per-conversation image cap (``FeedbackLimits.max_images_per_trajectory``) counts the task's
own images too, so a server started with that limit never sees more.
The loop trusts the reply's text, not its token ids (see `codedance.policy.base.Completion`).
Other policy errors (unreachable server, unknown model, ...) propagate as `PolicyError`.

The trajectory is exactly what the model saw: ``Trajectory.prompt`` plus each turn's raw text,
``feedback_text`` and ``feedback_images`` (`codedance.prompts.conversation` rebuilds the
messages); the sampled token ids/logprobs are kept per turn when the backend returns them: those
are the model's tokens (loss mask 1); prompt and feedback are mask 0.

Departure from the release: its eval resamples when a reply has neither code nor answer; we stop
with ``format_error``. Its eval runs the code of the last allowed turn; we do not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from codedance.config import bounded, check_bounds
from codedance.errors import SettingsError
from codedance.parsing import parse_message
from codedance.policy.base import Completion, ContextOverflowError, ImageLimitError, Policy
from codedance.prompts import (
    RELEASE,
    FeedbackLimits,
    PromptProfile,
    VisionLimits,
    get_profile,
    model_images,
    prompt_messages,
    render_feedback,
    split_placeholders,
    with_turn_limit,
)
from codedance.types import (
    ExecResult,
    ExecStatus,
    Image,
    Message,
    StopReason,
    Task,
    Trajectory,
    Turn,
)

MODEL_LIMITS = (ContextOverflowError, ImageLimitError)  # the server's refusals that end an episode


@runtime_checkable
class CodeRunner(Protocol):
    """What the loop needs from a sandbox (``codedance.sandbox.Sandbox`` is one)."""

    def run(self, code: str) -> ExecResult: ...

    async def arun(self, code: str) -> ExecResult: ...


MAX_TURNS = 6
"""Model calls per episode at most: the paper's training budget (Table 4 and the release's RL
scripts: 6), the default of every command that makes trajectories (demo, synth, train, curate,
verl's agent loop)."""
EVAL_MAX_TURNS = 10
"""The paper's evaluation budget (10 turns), the default of ``codedance eval`` and ``solve``."""
EXEC_TIMEOUT_S = 15.0
"""Seconds per code execution: the release's sandbox timeout."""


@dataclass(frozen=True)
class EpisodeConfig:
    """Settings of one episode. ``vision`` sizes the task's images for the model."""

    max_turns: int = MAX_TURNS
    profile: PromptProfile = RELEASE
    feedback: FeedbackLimits = FeedbackLimits()
    vision: VisionLimits = VisionLimits()
    inject_turn_limit: bool = True
    metadata: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.max_turns}")

    def images_of(self, task: Task) -> tuple[Image, ...]:
        """The task's images as the model sees them (sized by ``vision``): what the episode's
        sandbox must hold, so that the code's pixel coordinates are the model's."""
        return model_images(task.images, self.vision)


@dataclass(frozen=True)
class EpisodeSettings:
    """The episode knobs of every command that runs episodes: turn budget (`MAX_TURNS`; eval and
    solve start from `EVAL_MAX_TURNS`), seconds per code execution, prompt profile, and the image
    area the model sees (the sandbox gets the same pixels)."""

    max_turns: int = bounded(MAX_TURNS, at_least=1)
    exec_timeout_s: float = bounded(EXEC_TIMEOUT_S, above=0)
    prompt_profile: str = "release"
    min_pixels: int = bounded(VisionLimits.min_pixels, at_least=1)
    max_pixels: int = bounded(VisionLimits.max_pixels, at_least=1)
    inject_turn_limit: bool = True

    def __post_init__(self) -> None:
        check_bounds(self)
        if self.min_pixels > self.max_pixels:
            raise SettingsError(
                f"need min_pixels <= max_pixels, got {self.min_pixels}, {self.max_pixels}"
            )

    def episode_config(
        self, metadata: tuple[tuple[str, str], ...] = (), profiles: str | None = None
    ) -> EpisodeConfig:
        """The `EpisodeConfig` of these settings (an unknown prompt profile raises here);
        ``profiles`` is a YAML file of user prompt profiles to find ``prompt_profile`` in."""
        vision = VisionLimits(min_pixels=self.min_pixels, max_pixels=self.max_pixels)
        profile = get_profile(self.prompt_profile, profiles)
        return EpisodeConfig(
            max_turns=self.max_turns,
            profile=profile,
            vision=vision,
            feedback=FeedbackLimits(vision=vision),
            inject_turn_limit=self.inject_turn_limit,
            metadata=metadata,
        )


class Episode:
    """One trajectory in progress. Use `messages`, `on_completion`, `on_result`, `trajectory`."""

    def __init__(self, task: Task, config: EpisodeConfig = EpisodeConfig()) -> None:
        self.task = task
        self.config = config
        self.images = config.images_of(task)
        self.prompt = prompt_messages(task.question, self.images, config.profile)
        self._messages: list[Message] = list(self.prompt)
        self._turns: list[Turn] = []
        self._pending: tuple[Completion, Turn] | None = None
        self._images_shown = len(self.images)  # the task's images count against the cap too
        self.stop_reason: StopReason | None = None
        self.answer: str | None = None
        self._notes: list[tuple[str, str]] = []

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    @property
    def turns(self) -> tuple[Turn, ...]:
        """The turns recorded so far (a turn is recorded once its code ran or the episode ended)."""
        return tuple(self._turns)

    @property
    def messages(self) -> tuple[Message, ...]:
        """The conversation to send the model next."""
        return tuple(self._messages)

    def _stop(self, reason: StopReason, turn: Turn | None = None) -> None:
        if turn is not None:
            self._turns.append(turn)
        self.stop_reason = reason

    def on_completion(self, completion: Completion) -> str | None:
        """Record the model's reply; return the code to run now, or None if the episode ended."""
        if self.done or self._pending is not None:
            raise RuntimeError("on_completion called on a finished episode or before on_result")
        parsed = parse_message(completion.text)
        turn = Turn(
            text=completion.text,
            think=parsed.think,
            code=parsed.code,
            answer=parsed.answer,
            verdict=parsed.verdict,
            token_ids=completion.token_ids,
            logprobs=completion.logprobs,
        )
        self.answer = parsed.scoring_answer
        if parsed.answer is not None:
            self._stop(StopReason.ANSWERED, turn)
        elif completion.truncated:
            self._stop(StopReason.MAX_TOKENS, turn)
        elif parsed.code is None:
            self._stop(StopReason.FORMAT_ERROR, turn)
        elif len(self._turns) + 1 >= self.config.max_turns:
            self._stop(StopReason.MAX_TURNS, turn)
        else:
            self._pending = (completion, turn)
            return parsed.code
        return None

    def on_result(self, result: ExecResult) -> None:
        """Record what the pending code produced and queue the observation for the model."""
        if self._pending is None:
            raise RuntimeError("on_result called with no code pending")
        if (
            result.status is ExecStatus.LOST
        ):  # the sandbox service went away: the model did nothing wrong
            self.on_runner_error(RuntimeError("; ".join(result.notes) or "the sandbox was lost"))
            return
        completion, turn = self._pending
        self._pending = None
        index = len(self._turns)
        feedback = render_feedback(
            result, self.config.profile, self.config.feedback, self._images_shown, index
        )
        limit = self.config.inject_turn_limit and index + 2 == self.config.max_turns
        if limit:
            feedback = with_turn_limit(feedback, self.config.profile)
        self._images_shown += len(feedback.images)
        turn = replace(
            turn,
            result=result,
            feedback_text=feedback.text,
            feedback_images=feedback.images,
            feedback_has_turn_limit=limit,
        )
        self._turns.append(turn)
        self._messages.append(Message("assistant", (completion.text,)))
        self._messages.append(Message("user", split_placeholders(feedback.text, feedback.images)))

    def on_runner_error(self, error: BaseException) -> None:
        """The sandbox itself failed on the pending code: stop with ``sandbox_error``."""
        if self._pending is None:
            raise RuntimeError("on_runner_error called with no code pending")
        _, turn = self._pending
        self._pending = None
        self._notes.append(("error", f"sandbox: {type(error).__name__}: {error}"))
        self._stop(StopReason.SANDBOX_ERROR, turn)

    def on_context_overflow(self, error: BaseException) -> None:
        """The conversation no longer fits the model: stop with ``max_tokens``."""
        self._notes.append(("error", f"context overflow: {error}"))
        self._stop(StopReason.MAX_TOKENS)

    def on_image_limit(self, error: BaseException) -> None:
        """The server takes no more images in one prompt: stop with ``image_limit``."""
        self._notes.append(("error", f"image limit: {error}"))
        self._stop(StopReason.IMAGE_LIMIT)

    def on_model_limit(self, error: ContextOverflowError | ImageLimitError) -> None:
        """The server refused the conversation (`MODEL_LIMITS`): stop as that limit says."""
        if isinstance(error, ImageLimitError):
            self.on_image_limit(error)
        else:
            self.on_context_overflow(error)

    def interrupt(self, error: BaseException) -> None:
        """Stop with ``interrupted`` (a server error, Ctrl-C), keeping every recorded turn and the
        pending one (its code not run). No-op on a finished episode."""
        if self.done:
            return
        pending = None
        if self._pending is not None:
            _, pending = self._pending
            self._pending = None
        self._notes.append(("error", f"interrupted: {type(error).__name__}: {error}".rstrip(": ")))
        self._stop(StopReason.INTERRUPTED, pending)

    def trajectory(self) -> Trajectory:
        if self.stop_reason is None:
            raise RuntimeError("the episode has not ended")
        metadata = (("profile", self.config.profile.name), *self.config.metadata, *self._notes)
        return Trajectory(
            task_id=self.task.id,
            turns=tuple(self._turns),
            stop_reason=self.stop_reason,
            answer=self.answer,
            metadata=metadata,
            prompt=self.prompt,
        )


def drive_episode(
    episode: Episode,
    policy: Policy,
    sandbox: CodeRunner,
    on_turn: Callable[[Turn], None] | None = None,
) -> None:
    """Drive `episode` to its end with blocking calls, calling ``on_turn`` with each turn as it is
    recorded. Exceptions other than the stop reasons above propagate with ``episode`` as it stood
    (call `Episode.interrupt` to keep it)."""
    seen = 0
    while not episode.done:
        try:
            completion = policy.complete(episode.messages)
        except MODEL_LIMITS as exc:
            episode.on_model_limit(exc)
            break
        code = episode.on_completion(completion)
        if code is not None:
            try:
                result = sandbox.run(code)
            except Exception as exc:  # noqa: BLE001 - the runner's own failure, recorded as a stop reason
                episode.on_runner_error(exc)
            else:
                episode.on_result(result)
        seen = _report_turns(episode, seen, on_turn)
    _report_turns(episode, seen, on_turn)


def _report_turns(episode: Episode, seen: int, on_turn: Callable[[Turn], None] | None) -> int:
    turns = episode.turns
    if on_turn is not None:
        for turn in turns[seen:]:
            on_turn(turn)
    return len(turns)


def run_episode(
    policy: Policy, task: Task, sandbox: CodeRunner, config: EpisodeConfig = EpisodeConfig()
) -> Trajectory:
    """Run one episode to its end with blocking calls. `sandbox` should hold
    `EpisodeConfig.images_of` the task (the images as the model sees them)."""
    episode = Episode(task, config)
    drive_episode(episode, policy, sandbox)
    return episode.trajectory()


async def arun_episode(
    policy: Policy, task: Task, sandbox: CodeRunner, config: EpisodeConfig = EpisodeConfig()
) -> Trajectory:
    """`run_episode` on an asyncio loop: ``policy.acomplete`` and ``sandbox.arun``."""
    return await adrive_episode(Episode(task, config), policy, sandbox)


class EpisodeFactory(Protocol):
    """Starts episodes of another protocol (``codedance.agents``): ``start`` returns an object
    with `Episode`'s driving interface, ``images_of`` the images its runner works on."""

    def images_of(self, task: Task, config: EpisodeConfig) -> tuple[Image, ...]: ...

    def start(self, task: Task, config: EpisodeConfig) -> Episode: ...


async def adrive_episode(episode: Episode, policy: Policy, sandbox: CodeRunner) -> Trajectory:
    """Drive ``episode`` (an `Episode`, or one with its interface) to its end on an asyncio loop."""
    while not episode.done:
        try:
            completion = await policy.acomplete(episode.messages)
        except MODEL_LIMITS as exc:
            episode.on_model_limit(exc)
            break
        code = episode.on_completion(completion)
        if code is None:
            continue
        try:
            result = await sandbox.arun(code)
        except Exception as exc:  # noqa: BLE001 - as in drive_episode
            episode.on_runner_error(exc)
            continue
        episode.on_result(result)
    return episode.trajectory()
