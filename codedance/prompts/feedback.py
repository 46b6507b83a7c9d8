"""Turn a sandbox result into the observation the model reads, and build chat messages.

Feedback text marks where each image goes with `IMAGE_PLACEHOLDER` (``<image>``, the ms-swift /
verl convention); `Turn.feedback_text` stores exactly this text and `Turn.feedback_images` the
images in order, so `conversation` rebuilds the messages the model saw. A literal ``<image>``
in the snippet's output is shown as ``<image >`` so that it cannot be taken for an image.

Bounds: stdout and stderr keep their head and tail with the cut marked; the error message is
bounded too; at most ``max_frames`` frames of the user's own code; images beyond the per-turn or
per-trajectory budget are dropped with a note saying so; each image is resized by
`codedance.prompts.vision.fit_image`, and one that cannot be decoded is dropped with a note.

Not handled: the budget counts feedback images only (the task's own images are not charged).
The turn-limit text (`with_turn_limit`) goes after the feedback's closing tag in the same user
message; the release sends it as an extra tool response, which made it look like a tool call.
"""

from __future__ import annotations

from dataclasses import dataclass

from codedance.prompts.profiles import PAPER, PromptProfile, user_text  # noqa: F401  (PAPER: doctest)
from codedance.prompts.vision import VisionLimits, fit_image
from codedance.types import ExecResult, ExecStatus, Image, Message, Trajectory

IMAGE_PLACEHOLDER = "<image>"

_STATUS_ERRORS = {
    ExecStatus.TIMEOUT: ("TimeoutError", "Code execution timed out."),
    ExecStatus.CRASHED: ("ProcessCrashed", "The process running the code died."),
    ExecStatus.OOM: ("MemoryError", "The code ran out of memory."),
    ExecStatus.REFUSED: ("Refused", "The sandbox refused to run or keep this step."),
    ExecStatus.ERROR: ("Error", "The code raised an error."),
    ExecStatus.LOST: ("SandboxLost", "The sandbox was lost; its variables and files are gone."),
}


@dataclass(frozen=True)
class FeedbackLimits:
    """Bounds on what one observation may hold."""

    max_stdout_chars: int = 4000
    max_stderr_chars: int = 2000
    max_error_chars: int = 1000
    max_frames: int = 3
    max_images_per_turn: int = 4
    max_images_per_trajectory: int = 16
    vision: VisionLimits = VisionLimits()


@dataclass(frozen=True)
class Feedback:
    """One observation: text with `IMAGE_PLACEHOLDER` per image, and the images in order."""

    text: str
    images: tuple[Image, ...] = ()
    dropped_images: int = 0


def bound_text(text: str, limit: int) -> str:
    """`text` if it fits in `limit` characters, else its head and tail with the cut marked.

    >>> bound_text("abcdefghij", 4)
    'ab\\n[... 6 characters cut ...]\\nij'
    """
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return (
        f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[len(text) - tail :]}"
    )


def _clean(text: str) -> str:
    return text.replace(IMAGE_PLACEHOLDER, "<image >")


def _images(
    result: ExecResult, limits: FeedbackLimits, images_so_far: int, turn: int
) -> tuple[list[Image], list[str]]:
    budget = max(
        0, min(limits.max_images_per_turn, limits.max_images_per_trajectory - images_so_far)
    )
    kept: list[Image] = []
    notes: list[str] = []
    for index, image in enumerate(result.images):
        if len(kept) >= budget:
            over = len(result.images) - index
            notes.append(
                f"[{over} more image(s) not shown: at most {limits.max_images_per_turn} per turn "
                f"and {limits.max_images_per_trajectory} per conversation]"
            )
            break
        try:
            fitted = fit_image(image, limits.vision)
        except ValueError as exc:
            notes.append(f"[an output image was dropped: {exc}]")
            continue
        kept.append(
            Image(
                png=fitted.png,
                origin=f"turn:{turn}:{index}",
                width=fitted.width,
                height=fitted.height,
            )
        )
    return kept, notes


def render_feedback(
    result: ExecResult,
    profile: PromptProfile,
    limits: FeedbackLimits = FeedbackLimits(),
    images_so_far: int = 0,
    turn: int = 0,
) -> Feedback:
    """The observation for one sandbox result; `images_so_far` counts earlier feedback images.

    >>> render_feedback(ExecResult(status=ExecStatus.OK, stdout="42\\n"), PAPER).text
    '<interpreter>\\n42\\n</interpreter>'
    """
    parts: list[str] = [profile.feedback_open]
    ok = result.ok
    if ok and result.executed_nothing and profile.executed_nothing:
        parts.append(profile.executed_nothing)
    stdout, stderr = result.stdout.strip(), result.stderr.strip()
    if stdout:
        header = profile.stdout_header if ok else profile.stdout_before_error_header
        parts.append(header + _clean(bound_text(stdout, limits.max_stdout_chars)))
    if stderr:
        body = _clean(bound_text(stderr, limits.max_stderr_chars))
        parts.append(profile.stderr_header + body + profile.stderr_footer)
    images, image_notes = _images(result, limits, images_so_far, turn)
    for _ in images:
        parts.append(profile.image_label + profile.part_separator + IMAGE_PLACEHOLDER)
    parts += image_notes
    if (
        ok
        and not (stdout or stderr or result.images or result.executed_nothing)
        and profile.no_output
    ):
        parts.append(profile.no_output)
    if not ok:
        default_type, default_message = _STATUS_ERRORS[result.status]
        error_type = result.error.type if result.error else default_type
        message = result.error.message if result.error else default_message
        parts.append(
            _clean(
                profile.error_template.format(
                    type=error_type, message=bound_text(message, limits.max_error_chars)
                )
            )
        )
        frames = (
            result.error.frames[-limits.max_frames :] if result.error and limits.max_frames else ()
        )
        if frames and profile.show_frames:
            lines = [f"  line {number}: {source.strip()}" for number, source in frames]
            parts.append(_clean("\n".join([profile.frames_header, *lines])))
        if result.rolled_back and profile.rolled_back:
            parts.append(profile.rolled_back)
    parts += [_clean(note) for note in result.notes]
    if ok and profile.success_suffix:
        parts.append(profile.success_suffix.strip("\n"))
    parts.append(profile.feedback_close)
    text = profile.part_separator.join(part for part in parts if part)
    return Feedback(
        text=text, images=tuple(images), dropped_images=len(result.images) - len(images)
    )


def with_turn_limit(feedback: Feedback, profile: PromptProfile) -> Feedback:
    """`feedback` followed by the profile's turn-limit text (not a tool response)."""
    text = profile.part_separator.join(p for p in (feedback.text, profile.turn_limit) if p)
    return Feedback(text=text, images=feedback.images, dropped_images=feedback.dropped_images)


def split_placeholders(text: str, images: tuple[Image, ...]) -> tuple[str | Image, ...]:
    """Text with `IMAGE_PLACEHOLDER` markers as ordered message parts; the counts must agree."""
    pieces = text.split(IMAGE_PLACEHOLDER)
    if len(pieces) - 1 != len(images):
        raise ValueError(f"{len(pieces) - 1} image placeholders but {len(images)} images")
    parts: list[str | Image] = []
    for index, piece in enumerate(pieces):
        if piece:
            parts.append(piece)
        if index < len(images):
            parts.append(images[index])
    return tuple(parts)


def prompt_messages(
    question: str, images: tuple[Image, ...], profile: PromptProfile
) -> tuple[Message, ...]:
    """System message (if the profile has one) and the first user message: images, then text.
    `images` are used as given: resize them first (`model_images`)."""
    messages = [Message("system", (profile.system,))] if profile.system else []
    messages.append(Message("user", (*images, user_text(profile, question))))
    return tuple(messages)


def model_images(
    images: tuple[Image, ...], vision: VisionLimits = VisionLimits()
) -> tuple[Image, ...]:
    """The task's images as the model gets them (and as the sandbox should get them, so that
    pixel coordinates the model reads off an image are valid in its code)."""
    return tuple(fit_image(image, vision) for image in images)


def conversation(trajectory: Trajectory) -> tuple[Message, ...]:
    """Every message of the episode in order: the prompt, then each assistant turn and the
    feedback that followed it."""
    messages = list(trajectory.prompt)
    for turn in trajectory.turns:
        messages.append(Message("assistant", (turn.text,)))
        if turn.feedback_text or turn.feedback_images:
            messages.append(
                Message("user", split_placeholders(turn.feedback_text, turn.feedback_images))
            )
    return tuple(messages)
