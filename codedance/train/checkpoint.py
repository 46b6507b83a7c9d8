"""Checkpoints of the GRPO trainer: model, optimizer, step, RNG states; resume from the latest.

Layout: ``out_dir/checkpoints/step-N/`` holds the model and processor (`save_policy`),
``optimizer.pt`` and ``state.json`` (step, torch and Python RNG states are in
``rng.pt``). A checkpoint folder is written under a temporary name and renamed when complete,
so a crash mid-save never leaves a half checkpoint that `latest_checkpoint` would pick.
Only the newest ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

from codedance.train.tiny import save_policy


def checkpoint_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "checkpoints"


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The complete checkpoint with the highest step, or None."""
    root = checkpoint_dir(out_dir)
    found = [p for p in root.glob("step-*") if (p / "state.json").exists()] if root.exists() else []
    return max(found, key=lambda p: int(p.name.split("-")[1]), default=None)


def save_checkpoint(
    out_dir: str | Path,
    step: int,
    model: Any,
    processor: Any,
    optimizer: Any,
    keep: int = 2,
    extra: dict[str, Any] | None = None,
) -> Path:
    import torch

    root = checkpoint_dir(out_dir)
    final = root / f"step-{step}"
    tmp = root / f".step-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    save_policy(tmp, model, processor)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **(extra or {})}))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    done = sorted(
        (p for p in root.glob("step-*") if (p / "state.json").exists()),
        key=lambda p: int(p.name.split("-")[1]),
    )
    for old in done[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_training_state(path: Path, optimizer: Any) -> int:
    """Restore the optimizer and RNG states saved at `path`; return its step."""
    import torch

    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    return int(json.loads((path / "state.json").read_text())["step"])
