"""A trajectory as one token sequence: ids, loss mask, assistant-turn spans, images in order.

`encode_trajectory` renders the conversation with the tokenizer's (or processor's) chat template
exactly as `TransformersPolicy` rendered it when it sampled, and cuts it into pieces:

- every non-model piece (system, user prompt with its images, feedback with its images, the
  template's role headers and the generation prompt) is tokenized from the rendered text,
  loss mask 0;
- every assistant turn is the model's tokens, loss mask 1: the *sampled* ids when the turn kept
  them (``Turn.token_ids``, never re-tokenized; RL), else the turn's text tokenized plus the
  end-of-turn token (SFT on teacher trajectories, which have no ids).

Each ``<|image_pad|>`` placeholder is expanded to the number of vision tokens its image gets
(`image_tokens`), as Qwen2.5-VL's processor does. ``turn_spans[m]`` is the [start, end) of turn
m's model tokens, one per assistant turn (what `codedance.advantages.token_advantages` needs).

Not handled: templates that rewrite an assistant message (Qwen3's think stripping): the rendered
assistant text must start with the turn's text followed by the end-of-turn token, else
`TemplateMismatch` says so. Truncation at ``max_length`` cuts before the first image whose
placeholder would not fit whole, and marks ``truncated``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from codedance.errors import SettingsError
from codedance.policy.transformers_qwen import chat_template_messages
from codedance.types import Image, Message, Trajectory

IMAGE_PAD = "<|image_pad|>"


class TemplateMismatch(SettingsError):
    """The chat template does not render an assistant turn as ``text + end-of-turn``."""


@dataclass(frozen=True)
class EncodedTrajectory:
    """One trajectory as the model reads it. ``input_ids``/``loss_mask``: (L,);
    ``turn_spans``: one [start, end) per assistant turn; ``images``: in placeholder order;
    ``image_token_counts``: vision tokens per image."""

    input_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    turn_spans: tuple[tuple[int, int], ...]
    images: tuple[Image, ...]
    image_token_counts: tuple[int, ...]
    truncated: bool = False
    sampled_ids: bool = False

    def __len__(self) -> int:
        return len(self.input_ids)


def _render(template_owner: Any, messages: list[Message], generation_prompt: bool) -> str:
    chat, _ = chat_template_messages(tuple(messages))
    return template_owner.apply_chat_template(
        chat, tokenize=False, add_generation_prompt=generation_prompt
    )


def _conversation_steps(trajectory: Trajectory) -> list[tuple[Message, Message | None]]:
    steps = []
    for turn in trajectory.turns:
        from codedance.prompts import split_placeholders

        feedback = None
        if turn.feedback_text or turn.feedback_images:
            feedback = Message("user", split_placeholders(turn.feedback_text, turn.feedback_images))
        steps.append((Message("assistant", (turn.text,)), feedback))
    return steps


def encode_trajectory(
    trajectory: Trajectory,
    tokenizer: Any,
    *,
    template: Any | None = None,
    image_tokens: Callable[[Image], int] | None = None,
    use_sampled_ids: bool = True,
    max_length: int | None = None,
) -> EncodedTrajectory:
    """Encode `trajectory` (see the module docstring). ``template`` owns ``apply_chat_template``
    (default: the tokenizer); ``image_tokens(image)`` is the vision-token count of one image
    (needed when the conversation has images)."""
    owner = template if template is not None else tokenizer
    eos = tokenizer.eos_token
    eos_id = tokenizer.convert_tokens_to_ids(eos)

    def tok(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    ids: list[int] = []
    mask: list[int] = []
    spans: list[tuple[int, int]] = []
    messages = list(trajectory.prompt)
    rendered = _render(owner, messages, True)
    ids += tok(rendered)
    mask += [0] * len(ids)
    sampled = True
    for turn, (assistant, feedback) in zip(
        trajectory.turns, _conversation_steps(trajectory), strict=True
    ):
        messages.append(assistant)
        with_turn = _render(owner, messages, False)
        if not with_turn.startswith(rendered):
            raise TemplateMismatch("the chat template re-renders earlier messages differently")
        chunk = with_turn[len(rendered) :]
        if not chunk.startswith(turn.text + eos):
            raise TemplateMismatch(
                f"assistant chunk {chunk[:60]!r} does not start with the turn's text + {eos!r}"
            )
        if use_sampled_ids and turn.token_ids:
            model = list(turn.token_ids)
        else:
            sampled = False
            model = tok(turn.text) + [eos_id]
        spans.append((len(ids), len(ids) + len(model)))
        ids += model
        mask += [1] * len(model)
        tail = chunk[len(turn.text) + len(eos) :]
        if feedback is not None:
            messages.append(feedback)
            after = _render(owner, messages, True)
            if not after.startswith(with_turn):
                raise TemplateMismatch("the chat template re-renders earlier messages differently")
            tail += after[len(with_turn) :]
            rendered = after
        else:
            rendered = with_turn
        piece = tok(tail)
        ids += piece
        mask += [0] * len(piece)
    images = [p for m in messages for p in m.parts if isinstance(p, Image)]
    return _expand_and_cut(
        ids,
        mask,
        spans,
        images,
        tokenizer,
        image_tokens,
        max_length,
        sampled and bool(trajectory.turns),
    )


def _expand_and_cut(
    ids: list[int],
    mask: list[int],
    spans: list[tuple[int, int]],
    images: list[Image],
    tokenizer: Any,
    image_tokens: Callable[[Image], int] | None,
    max_length: int | None,
    sampled: bool,
) -> EncodedTrajectory:
    pad = tokenizer.convert_tokens_to_ids(IMAGE_PAD) if images else None
    counts = []
    out_ids: list[int] = []
    out_mask: list[int] = []
    shift = [0] * (len(ids) + 1)  # new index of old position i
    k = 0
    for i, (t, m) in enumerate(zip(ids, mask, strict=True)):
        shift[i] = len(out_ids)
        if pad is not None and t == pad and m == 0:
            if image_tokens is None:
                raise ValueError("the conversation has images: pass image_tokens")
            if k >= len(images):
                raise ValueError("more image placeholders than images in the conversation")
            n = int(image_tokens(images[k]))
            counts.append(n)
            out_ids += [pad] * n
            out_mask += [0] * n
            k += 1
        else:
            out_ids.append(t)
            out_mask.append(m)
    shift[len(ids)] = len(out_ids)
    if k != len(images):
        raise ValueError(
            f"{len(images)} images but {k} image placeholders in the rendered conversation"
        )
    new_spans = [(shift[a], shift[b]) for a, b in spans]
    truncated = False
    n_images = len(images)
    if max_length is not None and len(out_ids) > max_length:
        truncated = True
        cut = max_length
        starts = [
            j
            for j in range(len(out_ids))
            if out_ids[j] == pad and (j == 0 or out_ids[j - 1] != pad)
        ]
        for index, (start, n) in enumerate(zip(starts, counts, strict=True)):
            if start + n > cut:
                cut, n_images = start, index
                break
        out_ids, out_mask = out_ids[:cut], out_mask[:cut]
        new_spans = [(min(a, cut), min(b, cut)) for a, b in new_spans]
    return EncodedTrajectory(
        tuple(out_ids),
        tuple(out_mask),
        tuple(new_spans),
        tuple(images[:n_images]),
        tuple(counts[:n_images]),
        truncated,
        sampled,
    )
