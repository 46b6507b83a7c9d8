"""`TransformersPolicy`: a local Qwen2.5-VL-family model through Hugging Face transformers.

torch and transformers are imported only when a policy is built or called, never at module
import (``import codedance.rollout`` stays torch-free). Install them with the ``train`` extra.

How a call works: messages become the chat-template format (an image part is
``{"type": "image"}``, the images passed to the processor in order), the processor's chat
template renders the prompt with the generation prompt, the processor expands each
``<|image_pad|>`` to the image's vision-token count and computes ``pixel_values`` /
``image_grid_thw``, ``model.generate`` samples (greedy at temperature 0), and the new tokens are
returned as ``token_ids`` exactly as sampled (the trailing end-of-turn token included, padding
after it dropped), with their log-probabilities (``compute_transition_scores``, normalized: the
distribution sampled from, after temperature / top-p / suppression). ``finish_reason`` is
``length`` when the turn hit ``max_tokens`` without an end-of-turn token. Stop strings use
generate's ``stop_strings``. The vision placeholder tokens (``<|image_pad|>`` and friends, see
`vision_token_ids`) are never sampled unless ``suppress`` says otherwise.

Processors: `ImageTextProcessor` (``codedance.policy.qwen_processor``; the Qwen2.5-VL image path
on transformers' PIL image processor, no torchvision) gets the `Image` objects themselves (no
PNG re-encoding; patches cached per image). Any other processor taking ``text=`` and
``images=`` (the stock ``Qwen2_5_VLProcessor``, which needs torchvision) gets RGB PIL images.

Tested on this machine with a tiny randomly initialised Qwen2.5-VL and `ImageTextProcessor` (no
download; ``tests/policy/test_transformers_qwen.py``): text-only turns, and a loop conversation
with a task image and a feedback image. The stock processor's image path is not tested here
(no CPU torchvision wheel). `acomplete` runs `complete` in a worker thread, one call at a time.
Not handled: batching several conversations in one ``generate`` (``codedance.train.sampler``
does that for training).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codedance.policy.base import Completion, SamplingParams
from codedance.policy.qwen_processor import CONFIG, ImageTextProcessor, vision_token_ids
from codedance.types import Image, Message

DEFAULT_SAMPLING = SamplingParams()


def chat_template_messages(
    messages: tuple[Message, ...],
) -> tuple[list[dict[str, Any]], list[Image]]:
    """Hugging Face chat messages and the images in the order their placeholders appear."""
    chat: list[dict[str, Any]] = []
    images: list[Image] = []
    for message in messages:
        content: list[dict[str, Any]] = []
        for part in message.parts:
            if isinstance(part, Image):
                content.append({"type": "image"})
                images.append(part)
            elif part:
                content.append({"type": "text", "text": part})
        chat.append({"role": message.role, "content": content})
    return chat, images


class TransformersPolicy:
    """A `Policy` over an in-process ``Qwen2_5_VLForConditionalGeneration`` (or any causal VLM
    whose processor takes ``text=`` and ``images=``)."""

    def __init__(
        self,
        model: Any,
        processor: Any,
        sampling: SamplingParams = DEFAULT_SAMPLING,
        suppress: Sequence[int] | None = None,
    ) -> None:
        """``suppress``: token ids never sampled; None means the tokenizer's vision placeholders."""
        self.model = model
        self.processor = processor
        self.sampling = sampling
        self._lock = threading.Lock()
        tokenizer = getattr(processor, "tokenizer", processor)
        self.tokenizer = tokenizer
        self.eos_ids = {
            i
            for i in (
                tokenizer.eos_token_id,
                getattr(model.generation_config, "eos_token_id", None),
            )
            if isinstance(i, int)
        }
        self.pad_id = tokenizer.pad_token_id
        self.suppress = list(vision_token_ids(tokenizer) if suppress is None else suppress)

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        sampling: SamplingParams = DEFAULT_SAMPLING,
        device: str = "cpu",
        dtype: str = "auto",
    ) -> TransformersPolicy:
        """Load a local checkpoint folder (or a hub name, where a hub is reachable): with the
        `ImageTextProcessor` saved there (``codedance_processor.json``), else ``AutoProcessor``.
        For a stock checkpoint without torchvision, build ``ImageTextProcessor(AutoTokenizer…,
        min_pixels=…, max_pixels=…)`` yourself and pass it to the constructor."""
        from transformers import AutoModelForImageTextToText, AutoProcessor

        model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype).to(device).eval()
        if Path(path, CONFIG).exists():
            return cls(model, ImageTextProcessor.from_pretrained(path), sampling)
        return cls(model, AutoProcessor.from_pretrained(path), sampling)

    def complete(self, messages: tuple[Message, ...]) -> Completion:
        import torch

        chat, images = chat_template_messages(messages)
        continued = bool(messages) and messages[-1].continued  # the model goes on writing it
        prompt = self.processor.apply_chat_template(
            chat,
            tokenize=False,
            add_generation_prompt=not continued,
            continue_final_message=continued,
        )
        kwargs: dict[str, Any] = {"text": [prompt], "return_tensors": "pt"}
        if images and isinstance(self.processor, ImageTextProcessor):
            kwargs["images"] = images
        elif images:
            kwargs["images"] = [image.to_pil().convert("RGB") for image in images]
        inputs = self.processor(**kwargs).to(self.model.device)
        s = self.sampling
        generate: dict[str, Any] = {
            "max_new_tokens": s.max_tokens,
            "return_dict_in_generate": True,
            "output_scores": True,
        }
        if s.temperature > 0:
            generate.update(do_sample=True, temperature=s.temperature, top_p=s.top_p)
            if s.top_k is not None:
                generate["top_k"] = s.top_k
        else:
            generate.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if s.repetition_penalty is not None:
            generate["repetition_penalty"] = s.repetition_penalty
        if s.stop:
            generate.update(stop_strings=list(s.stop), tokenizer=self.tokenizer)
        if self.suppress:
            generate["suppress_tokens"] = self.suppress
        with self._lock, torch.no_grad():
            if s.seed is not None:
                torch.manual_seed(s.seed)
            out = self.model.generate(**inputs, **generate)
            scores = self.model.compute_transition_scores(
                out.sequences, out.scores, normalize_logits=True
            )
        prompt_len = inputs["input_ids"].shape[1]
        new_ids = out.sequences[0, prompt_len:].tolist()
        logprobs = scores[0].tolist()
        end = len(new_ids)
        for index, token in enumerate(new_ids):
            if token in self.eos_ids:
                end = index + 1
                break
        new_ids, logprobs = new_ids[:end], logprobs[:end]
        ended = bool(new_ids) and new_ids[-1] in self.eos_ids
        finish = "length" if (len(new_ids) >= s.max_tokens and not ended) else "stop"
        text = self.tokenizer.decode(new_ids, skip_special_tokens=True)
        return Completion(
            text=text,
            finish_reason=finish,
            token_ids=tuple(int(t) for t in new_ids),
            logprobs=tuple(float(x) for x in logprobs),
            prompt_token_ids=tuple(int(t) for t in inputs["input_ids"][0].tolist()),
            model=str(getattr(self.model.config, "name_or_path", "") or "local"),
        )

    async def acomplete(self, messages: tuple[Message, ...]) -> Completion:
        return await asyncio.to_thread(self.complete, messages)
