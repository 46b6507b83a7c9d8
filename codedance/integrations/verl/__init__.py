"""CodeDance on stock verl 0.9.1: the only package that imports verl.

Load it into every verl process with ``VERL_USE_EXTERNAL_MODULES=codedance.integrations.verl``
(verl imports it when ``verl`` is first imported). Importing it:

- with ``VERL_PLATFORM=cpu``, first installs the CPU backend (`cpu`: platform, FSDP engine on
  gloo, the ``hf`` rollout server), before anything else resolves verl's platform;
- wraps verl's processor loading so Qwen2-VL / Qwen2.5-VL work without torchvision
  (`processor`);
- registers the OmegaConf resolver ``codedance_flash_attn`` the presets use to turn on
  flash-attn features only where flash-attn imports (`environment`);
- registers the agent loop ``codedance`` (`agent_loop.CodeDanceAgentLoop`), the advantage
  estimators ``codedance_paper``, ``codedance_release``, ``codedance_outcome_only``,
  ``codedance_deepeyes`` (`advantage`), and the trainer mode ``codedance_sync``
  (`trainer.CodeDancePPOTrainerSync`).

The reward function is loaded by verl from ``pkg://codedance.integrations.verl.reward``
(``compute_score``). Data preparation: `data` (``codedance verl prepare-data``); a CPU run:
`launch` (``codedance verl train --preset cpu-smoke``). See docs/verl.md.
"""

from codedance.integrations.verl import cpu as _cpu

if _cpu.selected():
    _cpu.install()

from codedance.integrations.verl import agent_loop, environment, processor, trainer  # noqa: F401
from codedance.integrations.verl.advantage import (
    ESTIMATORS,
    batch_context,
    register_estimators,
)

processor.install()
environment.register_resolvers()
register_estimators()

__all__ = ["ESTIMATORS", "batch_context", "register_estimators"]
