"""Loading saved weights with every tensor accounted for.

``save_pretrained`` writes a model's tensors under the checkpoint format's names, not the
module's: for Qwen2.5-VL ``model.language_model.layers.0...`` is saved as ``model.layers.0...`` and
``model.visual...`` as ``visual...``, and ``from_pretrained`` maps them back. A raw
``load_state_dict(strict=False)`` of such a file (what transformers' ``Trainer`` does when it
resumes from ``checkpoint-*``) matches none of them, warns, and trains on from the weights the
model happened to have. So every load here goes through ``from_pretrained``, and a tensor
missing, left over or of another shape is a `CheckpointError` naming the folder, never a warning
(pinned by ``tests/train/test_resume.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codedance.errors import CheckpointError


def _problems(info: dict[str, Any]) -> list[str]:
    """The loading report's failures as short phrases (up to 3 names each, then a count)."""
    out = []
    for what in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        items = sorted(str(k) for k in info.get(what) or ())
        if items:
            more = f" and {len(items) - 3} more" if len(items) > 3 else ""
            out.append(f"{what.replace('_', ' ')}: {', '.join(items[:3])}{more}")
    return out


def load_checked(cls: Any, path: str | Path, what_to_do: str, **kwargs: Any) -> Any:
    """``cls.from_pretrained(path)``, refused unless every tensor of the model came from `path`
    and every tensor of `path` went into the model. `what_to_do` ends the error's line."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report table: the error below says it in one line
    try:
        model, info = cls.from_pretrained(str(path), output_loading_info=True, **kwargs)
    except (OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"{path}: not a loadable model ({str(exc).splitlines()[0]}); {what_to_do}"
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    problems = _problems(info)
    if problems:
        raise CheckpointError(
            f"{path}: its weights do not load completely ({'; '.join(problems)}); {what_to_do}"
        )
    return model


def restore_weights(model: Any, path: str | Path, what_to_do: str) -> None:
    """Put the weights saved at `path` into `model` in place (its optimizer keeps pointing at the
    same parameters), refused as in `load_checked`; also refused when `path` holds another
    architecture's tensors (a shape or name that `model` lacks)."""
    saved = load_checked(type(model), path, what_to_do)
    try:
        model.load_state_dict(saved.state_dict(), strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[1].strip() if len(str(exc).splitlines()) > 1 else str(exc)
        raise CheckpointError(
            f"{path}: its weights do not fit this model ({first}); {what_to_do}"
        ) from None
