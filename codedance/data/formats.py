"""Content conventions of released multi-turn rows, detected per row and mapped onto one shape.

The CodeDance-SFT card documents only the columns (``messages``: role/content, ``images``:
encoded bytes in order of appearance). Which conventions the rows follow is read from each row,
and every row that fits none of the forms below raises `Unmappable` with a reason (counted and
reported by the importer, never guessed around):

- roles: ``system``, ``user``, ``assistant``; ShareGPT's ``human``/``gpt``; tool results as
  ``tool``/``tool_response``/``observation``/``function`` messages (rendered as Qwen's chat
  template renders a tool message: ``<tool_response>\\n…\\n</tool_response>`` inside a user turn,
  consecutive ones in the same turn); ms-swift's ``tool_call`` messages (folded into the assistant
  turn before them as a hermes ``<tool_call>`` block, as the template renders ``tool_calls``);
- image placeholders: ms-swift's ``<image>``, Qwen's ``<|vision_start|><|image_pad|><|vision_end|>``
  (rewritten to ``<image>``), or none at all with images present (ms-swift then puts every image
  before the first user text; so do we);
- feedback: tool messages, or user messages after an assistant turn (``<tool_response>`` or
  ``<interpreter>`` blocks, or plain text); several in a row form one feedback turn;
- code in the assistant text: whatever `codedance.parsing.parse_message` reads (``<code>`` fence,
  hermes ``<tool_call>`` for ``execute_python_code``, a bare python fence).

A row is unmappable when: a role is unknown, a system message is not first, no user message
precedes the first assistant turn, there is no assistant turn, an assistant turn holds an image
placeholder, a turn with code is followed by another assistant turn or ends the conversation
without an answer (a tool call that never got a response; a last turn with code *and* an answer
is kept, counted as "final turn with code and answer"), the conversation ends on a user message, or
the placeholders and images disagree in number (some placeholders but not one per image).

Image columns: a list of binary (the cards' ``list: binary``) or of ``{bytes, path}`` structs
(``datasets.Image``); a path is resolved against the parquet file's folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from codedance.parsing import parse_message
from codedance.types import Image

IMAGE = "<image>"
QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
ROLE_ALIASES = {
    "human": "user",
    "gpt": "assistant",
    "tool_response": "tool",
    "observation": "tool",
    "function": "tool",
}
ROLES = {"system", "user", "assistant", "tool", "tool_call"}


class Unmappable(ValueError):
    """A row that fits no supported convention; ``reason`` is short and countable."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Step:
    """One assistant turn and the feedback after it (``None``: nothing came back)."""

    text: str
    feedback: str | None


@dataclass(frozen=True)
class Conversation:
    """A row's messages in one shape: ``prompt`` (role, text) up to the first assistant turn,
    then the steps; texts use ``<image>`` for every image, in order. ``conventions`` names the
    forms met (for the summary)."""

    prompt: tuple[tuple[str, str], ...]
    steps: tuple[Step, ...]
    conventions: tuple[str, ...] = field(default=())

    @property
    def placeholders(self) -> int:
        texts = [t for _, t in self.prompt] + [s.feedback or "" for s in self.steps]
        return sum(t.count(IMAGE) for t in texts)


def image_bytes(value: object, base: Path | None = None) -> bytes | None:
    """Encoded bytes of one entry of an image column (binary, or ``{bytes, path}``), or None."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value) or None
    if isinstance(value, dict):
        data = value.get("bytes")
        if data:
            return bytes(data)
        path = value.get("path")
        if path and base is not None and (base / str(path)).is_file():
            return (base / str(path)).read_bytes()
    return None


def _role(raw: object) -> str:
    role = ROLE_ALIASES.get(str(raw).strip().lower(), str(raw).strip().lower())
    if role not in ROLES:
        raise Unmappable("unknown role", repr(raw))
    return role


def _tool_response(content: str) -> str:
    return f"<tool_response>\n{content}\n</tool_response>"


def _normalize_images(text: str, seen: set[str]) -> str:
    if QWEN_IMAGE in text:
        seen.add("qwen image tokens")
        text = text.replace(QWEN_IMAGE, IMAGE)
    return text


def _fold_tool_calls(messages: list[tuple[str, str]], seen: set[str]) -> list[tuple[str, str]]:
    folded: list[tuple[str, str]] = []
    for role, text in messages:
        if role != "tool_call":
            folded.append((role, text))
            continue
        seen.add("tool_call messages")
        block = f"<tool_call>\n{text.strip()}\n</tool_call>"
        if folded and folded[-1][0] == "assistant":
            folded[-1] = ("assistant", f"{folded[-1][1]}\n{block}" if folded[-1][1] else block)
        else:
            folded.append(("assistant", block))
    return folded


def _feedback(messages: list[tuple[str, str]], seen: set[str]) -> str:
    parts = []
    for index, (role, text) in enumerate(messages):
        if role == "tool":
            seen.add("tool messages")
            parts.append(_tool_response(text))
        else:
            if "<tool_response>" in text:
                seen.add("tool_response in user turns")
            elif "<interpreter>" in text:
                seen.add("interpreter in user turns")
            parts.append(text)
        if index and "user" in (role, messages[index - 1][0]):
            seen.add("user messages merged into one feedback")
    return "\n".join(parts)


def conversation(messages: Sequence[dict], n_images: int) -> Conversation:
    """`messages` (dicts with ``role`` and ``content``) as a `Conversation` whose placeholders
    match `n_images` (see the module docstring); raises `Unmappable`."""
    seen: set[str] = set()
    raw = []
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise Unmappable("message without a role")
        content = message.get("content")
        raw.append(
            (
                _role(message["role"]),
                _normalize_images("" if content is None else str(content), seen),
            )
        )
    msgs = _fold_tool_calls(raw, seen)
    if any(role == "system" for role, _ in msgs[1:]):
        raise Unmappable("system message after the start")
    first = next((i for i, (role, _) in enumerate(msgs) if role == "assistant"), None)
    if first is None:
        raise Unmappable("no assistant turn")
    prompt = msgs[:first]
    if not any(role == "user" for role, _ in prompt):
        raise Unmappable("no user message before the first assistant turn")
    if any(role == "tool" for role, _ in prompt):
        raise Unmappable("tool message before the first assistant turn")
    steps: list[Step] = []
    i = first
    while i < len(msgs):
        text = msgs[i][1]
        if IMAGE in text:
            raise Unmappable("image placeholder in an assistant turn", f"message {i}")
        j = i + 1
        while j < len(msgs) and msgs[j][0] != "assistant":
            j += 1
        after = msgs[i + 1 : j]
        parsed = parse_message(text) if not after else None
        if parsed is not None and parsed.code is not None:
            if j < len(msgs) or parsed.answer is None:
                raise Unmappable("tool call without a response", f"message {i}")
            seen.add("final turn with code and answer")
        if not after and j < len(msgs):
            raise Unmappable("consecutive assistant messages", f"message {i}")
        steps.append(Step(text, _feedback(after, seen) if after else None))
        i = j
    if steps[-1].feedback is not None:
        raise Unmappable("ends on a user or tool message")
    conv = Conversation(tuple(prompt), tuple(steps))
    placeholders = conv.placeholders
    if placeholders == 0 and n_images:
        seen.add("images without placeholders")
        k = next(k for k, (role, _) in enumerate(prompt) if role == "user")
        prompt[k] = ("user", IMAGE * n_images + prompt[k][1])
    elif placeholders > n_images:
        raise Unmappable(
            "more placeholders than images", f"{placeholders} placeholders, {n_images} images"
        )
    elif placeholders < n_images:
        raise Unmappable(
            "more images than placeholders", f"{placeholders} placeholders, {n_images} images"
        )
    elif n_images:
        seen.add("<image> placeholders")
    return Conversation(tuple(prompt), tuple(steps), tuple(sorted(seen)))


PNG_MODES = {"1", "L", "LA", "I", "P", "RGB", "RGBA"}


def to_image(data: bytes, origin: str) -> Image:
    """An `Image` from encoded bytes: PNG kept byte for byte, any other format Pillow reads
    decoded and stored as PNG (modes PNG cannot hold, such as CMYK, become RGB); raises
    `Unmappable` when the bytes do not decode."""
    import io

    from PIL import Image as PILImage

    try:
        pil = PILImage.open(io.BytesIO(data))
        pil.load()
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types for bad data
        raise Unmappable(
            "image does not decode", f"{origin}: {type(exc).__name__}: {exc}"
        ) from None
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return Image(png=data, origin=origin, width=pil.width, height=pil.height)
    if pil.mode not in PNG_MODES:
        pil = pil.convert("RGB")
    return Image.from_pil(pil, origin=origin)
