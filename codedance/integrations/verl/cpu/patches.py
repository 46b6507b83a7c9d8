"""Monkeypatches of verl 0.9.1 for the CPU backend, each where verl offers no seam.

Every patch names the verl code it works around, and ``tests/integrations/verl/
test_cpu_backend.py`` fails when verl changes under it (the patched name disappears, or the
problem it fixes is gone). Applied by `codedance.integrations.verl.cpu.install`, i.e. only with
``VERL_PLATFORM=cpu``.

- `gloo_process_group`: the training worker initialises its process group with
  ``backend=f"cpu:gloo,{device}:{comm}"`` (``verl/utils/distributed.py:89``, called without a
  backend from ``verl/workers/engine_workers.py:89``). With device ``cpu`` that string is
  ``"cpu:gloo,cpu:gloo"``, which torch rejects (``Duplicate device type cpu``). The patch wraps
  the name ``initialize_global_process_group_ray`` in ``verl.workers.engine_workers`` and passes
  ``backend="gloo"`` when the platform is ``cpu`` and no backend was given.
"""

from __future__ import annotations

import functools


def gloo_process_group() -> None:
    from verl.utils.device import get_device_name
    from verl.workers import engine_workers

    original = engine_workers.initialize_global_process_group_ray
    if getattr(original, "__wrapped__", None) is not None:
        return

    @functools.wraps(original)
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        if backend is None and get_device_name() == "cpu":
            backend = "gloo"
        return original(timeout_second=timeout_second, backend=backend)

    engine_workers.initialize_global_process_group_ray = initialize_global_process_group_ray


def apply() -> None:
    gloo_process_group()
