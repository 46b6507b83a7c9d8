"""Typed, frozen data that crosses a seam between codedance's layers.

Every module that hands data to another uses these types (tuples, not lists; no ``dict[str, Any]``
contracts). Only the standard library is imported here; `Image.to_pil` imports Pillow lazily.

What is not here: configuration (it lives at the edge, in the CLI and presets) and anything
framework-specific (verl's or TRL's batch types stay in ``codedance.integrations``).
"""

from __future__ import annotations

import hashlib
import io
import struct
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import PIL.Image

SCHEMA_VERSION = 1


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) read from a PNG header, without decoding the pixels.

    >>> header = b"\\x89PNG\\r\\n\\x1a\\n" + b"\\x00\\x00\\x00\\rIHDR"
    >>> png_size(header + (3).to_bytes(4, "big") + (2).to_bytes(4, "big"))
    (3, 2)
    """
    if len(data) < 24 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not PNG data: expected the 8-byte PNG signature and an IHDR chunk")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@dataclass(frozen=True)
class Image:
    """An image as PNG bytes plus where it came from.

    ``origin`` names the source: ``input:0`` for the task's first image, ``turn:2:0`` for the
    first image the sandbox returned at turn 2. Pixels are decoded only by `to_pil`.
    """

    png: bytes = field(repr=False)
    origin: str = ""
    width: int = 0
    height: int = 0

    @classmethod
    def from_png(cls, png: bytes, origin: str = "") -> Image:
        width, height = png_size(png)
        return cls(png=png, origin=origin, width=width, height=height)

    @classmethod
    def from_pil(cls, image: PIL.Image.Image, origin: str = "") -> Image:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return cls(png=buffer.getvalue(), origin=origin, width=image.width, height=image.height)

    @property
    def size(self) -> tuple[int, int]:
        return self.width, self.height

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.png).hexdigest()

    def to_pil(self) -> PIL.Image.Image:
        from PIL import Image as PILImage

        image = PILImage.open(io.BytesIO(self.png))
        image.load()
        return image


class AnswerKind(str, Enum):
    """How a gold answer is compared with a prediction (see ``codedance.grading``)."""

    CHOICE = "choice"
    COUNT = "count"
    NUMBER = "number"
    RELAXED = "relaxed"
    TEXT = "text"
    MATH = "math"


@dataclass(frozen=True)
class Task:
    """One question about one or more images, with its gold answer.

    ``choices`` maps option letters to option texts for multiple-choice items (empty otherwise).
    ``metadata`` holds source-specific extras as (key, value) string pairs.
    """

    id: str
    question: str
    images: tuple[Image, ...]
    answer: str
    kind: AnswerKind = AnswerKind.TEXT
    choices: tuple[tuple[str, str], ...] = ()
    source: str = ""
    metadata: tuple[tuple[str, str], ...] = ()


class ExecStatus(str, Enum):
    """The outcome of one sandbox step. Only ``OK`` is a successful call."""

    OK = "ok"
    ERROR = "error"  # the snippet raised (including SyntaxError and SystemExit)
    TIMEOUT = "timeout"  # killed at the wall-clock limit
    CRASHED = "crashed"  # the step's process died (os._exit, abort, segfault, killed)
    OOM = "oom"  # out of memory (MemoryError or the memory limit's kill)
    REFUSED = "refused"  # the sandbox would not run or keep the step (threads left running, ...)
    LOST = (
        "lost"  # the sandbox service went away (killed, restarted, unreachable): the state is gone
    )


@dataclass(frozen=True)
class ExecError:
    """An exception raised by the snippet: type name, message, and the last frames of the
    user's own code as ``(line number, source line)`` pairs plus a formatted traceback."""

    type: str
    message: str
    traceback: str = ""
    frames: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class ExecResult:
    """What one sandbox step produced.

    ``rolled_back`` is True when the step failed and the trajectory's memory and files are those
    after the last successful step. ``notes`` are the sandbox's own remarks (output truncated,
    images dropped over the per-step limit, ...), meant to be shown to the model.
    ``executed_nothing`` is True for a snippet with no statements beyond ``pass`` (empty,
    comments only): such a call never counts as a successful tool call. The controller decides it
    for snippets up to 16,384 characters; a longer one's step says (its own trajectory's word).
    """

    status: ExecStatus
    stdout: str = ""
    stderr: str = ""
    error: ExecError | None = None
    images: tuple[Image, ...] = ()
    duration_s: float = 0.0
    rolled_back: bool = False
    notes: tuple[str, ...] = ()
    executed_nothing: bool = False

    @property
    def ok(self) -> bool:
        return self.status is ExecStatus.OK


class StopReason(str, Enum):
    """Why an episode ended: answered versus truncated is data, not a convention."""

    ANSWERED = "answered"
    MAX_TURNS = "max_turns"
    MAX_TOKENS = "max_tokens"
    FORMAT_ERROR = "format_error"
    SANDBOX_ERROR = "sandbox_error"
    IMAGE_LIMIT = "image_limit"  # the server refused more images per prompt
    INTERRUPTED = (
        "interrupted"  # the caller stopped it (server error, Ctrl-C); what was done is kept
    )


@dataclass(frozen=True)
class FormatVerdict:
    """Whether a model message follows the CodeDance format, and if not, why."""

    ok: bool
    reasons: tuple[str, ...] = ()


class CallOutcome(str, Enum):
    """What one assistant turn did with the tool: the one definition of a tool call.

    A turn is a call when its code ran (``Turn.result`` is set), whatever its feedback carries
    (the turn whose feedback ends with the turn-limit note is a call like any other). A call
    succeeds only when the sandbox status is ``ok`` *and* the snippet executed something: a
    snippet with no statements (empty, comments only, ``pass``) is the reward hack of the paper's
    Figure 11 and never a success. Output text is never inspected.
    """

    NONE = "none"  # no code ran: an answer turn, a turn whose code was not run
    OK = "ok"  # ran and succeeded
    FAILED = "failed"  # ran; the status is not ok (error, timeout, crash, OOM, refused)
    EMPTY = "empty"  # ran ok but executed nothing


@dataclass(frozen=True)
class Turn:
    """One assistant turn: the raw text (what is trained on), its parts, and what ran.

    ``token_ids`` are the sampled ids when the backend returned them (never re-tokenized).
    ``feedback_text``/``feedback_images`` are the observation given back to the model after this
    turn, if any; ``feedback_has_turn_limit`` says that observation ends with the turn-limit note
    (the turn itself is the model's, and its code ran: it is a call, see `CallOutcome`).
    """

    text: str
    think: str | None = None
    code: str | None = None
    answer: str | None = None
    verdict: FormatVerdict = FormatVerdict(ok=True)
    result: ExecResult | None = None
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    feedback_text: str = ""
    feedback_images: tuple[Image, ...] = ()
    feedback_has_turn_limit: bool = False

    @property
    def call_outcome(self) -> CallOutcome:
        """`CallOutcome` of this turn.

        >>> ran = ExecResult(ExecStatus.OK)
        >>> Turn("a").call_outcome.value, Turn("b", result=ran).call_outcome.value
        ('none', 'ok')
        >>> Turn("c", result=ran, feedback_has_turn_limit=True).call_outcome.value
        'ok'
        """
        if self.result is None:
            return CallOutcome.NONE
        if not self.result.ok:
            return CallOutcome.FAILED
        return CallOutcome.EMPTY if self.result.executed_nothing else CallOutcome.OK

    @property
    def is_call(self) -> bool:
        return self.result is not None


@dataclass(frozen=True)
class Message:
    """One chat message as the model receives it: a role and ordered parts.

    ``role`` is ``"system"``, ``"user"`` or ``"assistant"``; each part is text or an `Image`,
    in the order the model sees them (an image before the question, an image after
    "Output image:" in feedback). ``continued`` on the last message asks the model to go on
    writing that message (its end-of-turn left off, no new assistant turn opened): a protocol
    that extends one message across tool runs (`codedance.agents.thyme`).
    """

    role: str
    parts: tuple[str | Image, ...]
    continued: bool = False  # the last message only: the model continues it, no new turn opened

    @property
    def text(self) -> str:
        """The text parts joined, images left out."""
        return "".join(part for part in self.parts if isinstance(part, str))

    @property
    def images(self) -> tuple[Image, ...]:
        return tuple(part for part in self.parts if isinstance(part, Image))


@dataclass(frozen=True)
class Trajectory:
    """A whole episode for one task, exactly as the model saw it.

    ``prompt`` holds the messages before the first assistant turn (system text, the task's
    images as the model got them, the instruction); with the turns' text and feedback it
    rebuilds the whole conversation (``codedance.prompts.conversation``).
    """

    task_id: str
    turns: tuple[Turn, ...]
    stop_reason: StopReason
    answer: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    prompt: tuple[Message, ...] = ()

    @property
    def calls(self) -> tuple[Turn, ...]:
        """The turns that are tool calls (`CallOutcome`), in order."""
        return tuple(turn for turn in self.turns if turn.is_call)

    @property
    def tool_calls(self) -> tuple[ExecResult, ...]:
        """Results of every executed snippet, in order (one per call)."""
        return tuple(turn.result for turn in self.turns if turn.result is not None)

    @property
    def n_calls(self) -> int:
        return len(self.calls)

    @property
    def n_successful_calls(self) -> int:
        return sum(turn.call_outcome is CallOutcome.OK for turn in self.turns)


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward of one trajectory, term by term; ``total`` is their weighted sum.

    ``turn_returns`` holds the per-assistant-turn discounted returns R_turn^m (answer turn last);
    ``metrics`` are log-only values as (name, value) pairs.
    """

    accuracy: float
    format: float
    sequence_tool: float
    total: float
    turn_returns: tuple[float, ...] = ()
    metrics: tuple[tuple[str, float], ...] = ()
