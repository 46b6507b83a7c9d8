"""CodeDance on stock verl 0.9.1: the only package that imports verl.

Load it into every verl process with ``VERL_USE_EXTERNAL_MODULES=codedance.integrations.verl``
(verl imports it when ``verl`` is first imported). Importing it registers:

- the agent loop ``codedance`` (`agent_loop.CodeDanceAgentLoop`);
- the advantage estimators ``codedance_paper``, ``codedance_release``, ``codedance_outcome_only``,
  ``codedance_deepeyes`` (`advantage`);
- the trainer mode ``codedance_sync`` (`trainer.CodeDancePPOTrainerSync`).

The reward function is loaded by verl from ``pkg://codedance.integrations.verl.reward``
(``compute_score``). Data preparation: `data` (``codedance verl prepare-data``). See docs/verl.md.
"""

from codedance.integrations.verl import agent_loop, trainer  # noqa: F401  (registration)
from codedance.integrations.verl.advantage import ESTIMATORS, batch_context, register_estimators

register_estimators()

__all__ = ["ESTIMATORS", "batch_context", "register_estimators"]
