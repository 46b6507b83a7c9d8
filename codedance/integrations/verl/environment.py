"""What the installed environment can run, for the presets and the launcher.

- flash-attn: verl defaults to ``attn_implementation: flash_attention_2``
  (``verl/workers/config/model.py:185``) and ``use_remove_padding: true`` needs flash-attn for
  Qwen2-VL / Qwen2.5-VL (``verl/models/transformers/qwen2_vl.py:45-59, 331``; otherwise a
  ``NameError`` deep in the forward). The presets read the OmegaConf resolvers
  ``${codedance_flash_attn:}`` (True where ``flash_attn`` imports) and
  ``${codedance_attn_implementation:}`` (``flash_attention_2`` there, else ``sdpa``), registered
  by `register_resolvers` when verl imports the plugin, so a node without flash-attn falls back to
  padded batches with SDPA instead of crashing.
- TRL: verl patches ``AutoModelForCausalLMWithValueHead`` whenever trl is importable
  (``verl/models/transformers/monkey_patch.py:352-356``), and trl 1.x no longer has it, so every
  actor init fails. The ``train`` and ``gpu`` extras pin ``trl==0.27.0`` (verl 0.9.1's own pin in
  its ``fsdp`` extra); `check_trl` turns another trl into a one-line error before a run starts.
"""

from __future__ import annotations

import functools
import importlib.util

from codedance.errors import SettingsError


@functools.cache
def flash_attn_available() -> bool:
    if importlib.util.find_spec("flash_attn") is None:
        return False
    try:
        import flash_attn  # noqa: F401
    except Exception:  # noqa: BLE001  (a wheel built for another torch/CUDA fails at import)
        return False
    return True


def attn_implementation() -> str:
    return "flash_attention_2" if flash_attn_available() else "sdpa"


def register_resolvers() -> None:
    """Register ``codedance_flash_attn`` and ``codedance_attn_implementation`` (idempotent)."""
    from omegaconf import OmegaConf

    for name, fn in (
        ("codedance_flash_attn", flash_attn_available),
        ("codedance_attn_implementation", attn_implementation),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def check_trl() -> None:
    """Raise if an installed trl lacks the class verl's model patch imports."""
    if importlib.util.find_spec("trl") is None:
        return
    import trl

    try:
        from trl.experimental.ppo import AutoModelForCausalLMWithValueHead  # noqa: F401
    except ImportError:
        if not hasattr(trl, "AutoModelForCausalLMWithValueHead"):
            raise SettingsError(
                f"trl {trl.__version__} has no AutoModelForCausalLMWithValueHead, which verl 0.9.1 "
                "imports at every actor init; pip install 'trl==0.27.0' (or uninstall trl)"
            ) from None
