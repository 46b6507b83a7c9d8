"""`ImageTextProcessor`: a Qwen2.5-VL processor without the video part, on the PIL image processor.

Why: transformers' stock ``Qwen2_5_VLProcessor`` builds a video processor and the torchvision
image processor, and torchvision has no CPU wheel beside our torch here. This class pairs any
tokenizer that has Qwen's special tokens with ``Qwen2VLImageProcessorPil`` (the same resizing,
patching and normalisation as the torchvision one) and expands each ``<|image_pad|>`` to the
image's vision-token count, as the stock processor does. It is what `TransformersPolicy`
calls (``apply_chat_template``, ``__call__(text=, images=, return_tensors="pt")``) and what the
trainers use to turn a trajectory's images into ``pixel_values`` / ``image_grid_thw``. It lives
under ``codedance.policy`` so that the policy does not depend on the trainer;
``codedance.train.processor`` re-exports it. Images are processed once per distinct PNG (an LRU
of ``cache_size`` keyed by SHA-256), so a conversation that resends its images every turn does
not re-patch them. `vision_token_ids` lists the placeholder tokens a model must never sample.

``min_pixels`` / ``max_pixels`` bound what the *model* sees; the sandbox keeps the images as the
episode gave them. Not handled: videos; batches of several prompts with images in one call.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from codedance.types import Image

IMAGE_PAD = "<|image_pad|>"
CONFIG = "codedance_processor.json"
VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


def vision_token_ids(tokenizer: Any) -> list[int]:
    """Ids of the `VISION_TOKENS` that `tokenizer` has. A sampled ``<|image_pad|>`` (which an
    untrained model does sample) breaks the image-token count on the next forward pass."""
    vocab = tokenizer.get_vocab()
    return [int(vocab[t]) for t in VISION_TOKENS if t in vocab]


class ImageTextProcessor:
    """Tokenizer + PIL Qwen2-VL image processor; see the module docstring."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        min_pixels: int = 28 * 28,
        max_pixels: int = 112 * 112,
        cache_size: int = 512,
    ) -> None:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil,
        )

        self.tokenizer = tokenizer
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        self.image_processor = Qwen2VLImageProcessorPil(
            min_pixels=min_pixels, max_pixels=max_pixels
        )
        self.merge = int(self.image_processor.merge_size)
        self._cache: OrderedDict[str, tuple[Any, Any]] = OrderedDict()
        self._cache_size = cache_size
        self.chat_template = getattr(tokenizer, "chat_template", None)

    def _one(self, image: Image) -> tuple[Any, Any]:
        key = image.sha256
        hit = self._cache.get(key)
        if hit is None:
            out = self.image_processor(images=[image.to_pil().convert("RGB")], return_tensors="pt")
            hit = (out["pixel_values"], out["image_grid_thw"])
            self._cache[key] = hit
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return hit

    def image_tokens(self, image: Image) -> int:
        """Vision tokens the model gets for `image` (grid t·h·w / merge²)."""
        grid = self._one(image)[1][0]
        return int(grid.prod()) // (self.merge**2)

    def pixel_inputs(self, images: list[Image] | tuple[Image, ...]) -> dict[str, Any]:
        """``pixel_values`` (patches, C·T·P·P) and ``image_grid_thw`` (n, 3) of `images`."""
        import torch

        parts = [self._one(i) for i in images]
        return {
            "pixel_values": torch.cat([p for p, _ in parts]),
            "image_grid_thw": torch.cat([g for _, g in parts]),
        }

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        return self.tokenizer.apply_chat_template(*args, **kwargs)

    def __call__(
        self,
        text: list[str] | str,
        images: list[Any] | None = None,
        return_tensors: str = "pt",
        **_: Any,
    ) -> Any:
        """Tokenize one prompt (a list of one string, as `TransformersPolicy` passes), images
        expanded. ``images`` may be PIL images or `Image`s."""
        from transformers import BatchFeature

        texts = [text] if isinstance(text, str) else list(text)
        if images and len(texts) != 1:
            raise ValueError("ImageTextProcessor takes images for one prompt at a time")
        ours = [i if isinstance(i, Image) else Image.from_pil(i) for i in (images or [])]
        prompt = texts[0]
        if ours:
            pieces = prompt.split(IMAGE_PAD)
            if len(pieces) - 1 != len(ours):
                raise ValueError(
                    f"{len(ours)} images but {len(pieces) - 1} {IMAGE_PAD} placeholders"
                )
            prompt = pieces[0] + "".join(
                IMAGE_PAD * self.image_tokens(i) + rest
                for i, rest in zip(ours, pieces[1:], strict=True)
            )
            texts = [prompt]
        data = dict(
            self.tokenizer(
                texts, return_tensors=return_tensors, padding=True, add_special_tokens=False
            )
        )
        if ours:
            data.update(self.pixel_inputs(ours))
        return BatchFeature(data=data)

    def decode(self, *args: Any, **kwargs: Any) -> str:
        return self.tokenizer.decode(*args, **kwargs)

    def save_pretrained(self, path: str | Path) -> None:
        self.tokenizer.save_pretrained(str(path))
        Path(path, CONFIG).write_text(
            json.dumps({"min_pixels": self.min_pixels, "max_pixels": self.max_pixels})
        )

    @classmethod
    def from_pretrained(cls, path: str | Path) -> ImageTextProcessor:
        from transformers import AutoTokenizer

        settings = json.loads(Path(path, CONFIG).read_text()) if Path(path, CONFIG).exists() else {}
        return cls(AutoTokenizer.from_pretrained(str(path)), **settings)
