"""The canonical SFT record of a trajectory, and its ms-swift JSONL form (kept for the trainer's
callers; the torch-free implementation is `codedance.sft_records`, which also exports TRL's form).

`sft_record(trajectory)` is the one record every SFT format is converted from:
``{"messages": [{"role", "content", "loss"}], "images": [Image, ...]}`` where ``content`` is the
message text with ``<image>`` where each image goes (in order across the conversation) and
``loss`` is True exactly for the model's (assistant) turns.

`write_swift_jsonl(trajectories, path)` writes it in ms-swift's custom-dataset format (one JSON
object per line: ``messages`` with ``<image>`` placeholders and a per-message ``loss`` flag,
``images`` as PNG paths under ``path.parent/images``, stored once by hash), ready for:

    swift sft --model Qwen/Qwen2.5-VL-7B-Instruct --train_type full --dataset runs/swift.jsonl \\
        --torch_dtype bfloat16 --per_device_train_batch_size 1 --gradient_accumulation_steps 16 \\
        --learning_rate 5e-5 --warmup_ratio 0.05 --num_train_epochs 1 --freeze_vit true \\
        --max_length 10240 --output_dir runs/swift-sft        # 8 GPUs × 1 × 16 = batch 128

Checked with ms-swift 4.6.0 itself (docs/data.md, ``tests/data/test_sft_roundtrip.py``, opt-in):
its dataset loader reads the file and its ``qwen2_5_vl`` template encodes every row with one
vision block per image and labels on exactly the assistant turns. With ``loss`` flags absent,
ms-swift trains on every assistant turn by default, which is the same selection.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from codedance.sft_records import canonical_record, write_records
from codedance.types import Trajectory


def sft_record(trajectory: Trajectory) -> dict[str, object]:
    """The canonical record (see the module docstring); images stay `Image` objects."""
    return canonical_record(trajectory).as_dict()


def write_swift_jsonl(trajectories: Sequence[Trajectory], path: str | Path) -> int:
    """Write ms-swift records for `trajectories` to `path`; return how many."""
    return write_records((canonical_record(t) for t in trajectories), path, "swift")
