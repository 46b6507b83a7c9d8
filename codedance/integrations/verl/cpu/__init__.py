"""A CPU backend for stock verl 0.9.1: one GRPO step end to end on a machine without a GPU.

Active only with ``VERL_PLATFORM=cpu`` (set by ``codedance verl train --preset cpu-smoke`` and
passed to every Ray worker); otherwise nothing here is imported, and GPU runs are untouched.
`install` is called by ``codedance.integrations.verl`` (which verl imports in every process
through ``VERL_USE_EXTERNAL_MODULES``) before anything else of verl is imported, because verl
resolves its platform once per process and ``verl/workers/engine/fsdp/transformer_impl.py:89``
reads it at import time. It registers, through verl's own registries:

- the ``cpu`` platform (``PlatformRegistry``; `platform`): gloo, a ``torch.cuda``-shaped device
  module, logical Ray GPUs for the accounting;
- verl's FSDP engines (``fsdp``/``fsdp2``, actor and critic) for device ``cpu``
  (``EngineRegistry``; verl registers them for ``cuda``/``npu`` only, ``transformer_impl.py:
  1143, 1594``);
- the ``hf`` rollout (`hf_rollout`): ``RolloutReplicaRegistry.register("hf", ...)`` for the
  server replica and, for the hybrid worker's adapter, one entry in
  ``verl.workers.rollout.base._ROLLOUT_REGISTRY`` (a private dict: verl has no register function
  for it, ``base.py:89-93``);
- the monkeypatches of `patches` (only where verl has no seam).

Config the run needs besides (``codedance/presets/verl/cpu_smoke.yaml``): ``strategy: fsdp2``
(FSDP1 hard-codes ``sync_module_states=True``, which needs a GPU, ``transformer_impl.py:444``),
``attn_implementation: sdpa`` and ``use_remove_padding: false`` (no flash-attn), logical GPUs and
16 logical CPUs for Ray (TransferQueue's actors each take one), one TransferQueue storage unit.
Not handled: FSDP1, a reference model (its FSDP2 offload policy pins memory, which needs an
accelerator: ``transformer_impl.py:459-462``; the presets use no KL), Megatron, multi-node.
"""

from __future__ import annotations

import os

PLATFORM_ENV = "VERL_PLATFORM"
_installed: list[bool] = []


def selected() -> bool:
    """Whether this process runs verl on the CPU platform."""
    return os.environ.get(PLATFORM_ENV, "").strip().lower() == "cpu"


def install() -> None:
    """Register the CPU backend with verl (once per process; see the module docstring)."""
    if _installed:
        return
    _installed.append(True)
    from codedance.integrations.verl.cpu import platform  # noqa: F401  (registers 'cpu' first)

    _register_engines()
    _register_rollout()
    from codedance.integrations.verl.cpu import patches

    patches.apply()


def _register_engines() -> None:
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import (
        FSDPEngineWithLMHead,
        FSDPEngineWithValueHead,
    )

    for model_type, engine in (
        ("language_model", FSDPEngineWithLMHead),
        ("value_model", FSDPEngineWithValueHead),
    ):
        EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device=["cpu"])(
            engine
        )


def _load_replica():
    from codedance.integrations.verl.cpu.hf_rollout import HFReplica

    return HFReplica


def _register_rollout() -> None:
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from codedance.integrations.verl.cpu.hf_rollout import NAME

    RolloutReplicaRegistry.register(NAME, _load_replica)
    base._ROLLOUT_REGISTRY[(NAME, "async")] = (
        "codedance.integrations.verl.cpu.hf_rollout.HFServerAdapter"
    )
