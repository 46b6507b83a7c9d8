"""Where the trainer's model runs: the ``device`` setting (``auto``: the GPU when torch sees one,
else the CPU; ``cpu``; ``cuda`` or ``cuda:N``) and moving a batch to the model's device.

The trainers stay device-agnostic: the pipeline places the model once (`place`) and every
batch follows the model (`to_model`), so on the CPU nothing moves and results are the CPU's.
"""

from __future__ import annotations

from typing import Any

from codedance.errors import SettingsError


def check_device(name: str) -> str:
    """`name` when it is a device name this setting takes; a `SettingsError` otherwise.

    >>> check_device("cuda:1")
    'cuda:1'
    """
    base, colon, index = name.partition(":")
    if name in ("auto", "cpu") or (base == "cuda" and (not colon or index.isdigit())):
        return name
    raise SettingsError(f"device: {name!r} is not auto, cpu, cuda or cuda:N")


def resolve_device(name: str) -> str:
    """The torch device `name` means here: ``auto`` is ``cuda`` when torch sees a GPU, else
    ``cpu``; a named GPU torch cannot see is a `SettingsError` (before any work)."""
    import torch

    check_device(name)
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SettingsError(f"device={name}: torch sees no GPU here; use device=cpu or auto")
    return name


def place(model: Any, device: str) -> Any:
    """`model` moved to `device` (a `resolve_device` name or ``auto``); returns it."""
    return model.to(resolve_device(device))


def model_device(model: Any) -> Any:
    return next(model.parameters()).device


def to_model(batch: dict[str, Any], model: Any) -> dict[str, Any]:
    """`batch` with every tensor on `model`'s device (the others as they are)."""
    device = model_device(model)
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}
