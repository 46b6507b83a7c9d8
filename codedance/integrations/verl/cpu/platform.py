"""verl's ``cpu`` platform: the device abstraction verl 0.9.1 resolves through ``PlatformRegistry``.

verl ships platforms for NVIDIA, Ascend and ROCm only (``verl/plugin/platform/platform_manager.py:
172-174``); on a host without an accelerator it falls back to ``nvidia``, so the device is
``cuda`` and the process group ``nccl``. `CPUPlatform` is registered as ``cpu`` and is chosen only
by ``VERL_PLATFORM=cpu`` (its ``is_platform_available`` is False, so auto-detection on a GPU
cluster, including its CPU-only Ray actors, can never pick it). What it answers:

- device ``cpu``, collectives ``gloo``;
- ``current_device()`` is ``torch.device("cpu")``, not an index: verl passes it to
  ``model.to(device=...)`` (``verl/utils/fsdp_utils.py:507``) where an int means a CUDA device;
- Ray resource ``GPU``: verl always asks Ray for accelerator bundles (``verl/single_controller/
  ray/base.py:146-148, 208-241``), so the run declares as many logical GPUs as CPU ranks
  (``ray_kwargs.ray_init.num_gpus``); they only carry the accounting, nothing uses CUDA;
- `CPU_DEVICE`, a ``torch.cuda``-shaped module: ``torch.cpu`` plus the calls verl makes on its
  device module that ``torch.cpu`` lacks (cache and allocator calls are no-ops, memory figures
  come from psutil, RNG state is torch's CPU generator).

Not handled: profiling (no-ops), IPC weight transfer (``is_ipc_supported`` is False).
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

NAME = "cpu"


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


class _CPUDeviceModule(types.ModuleType):
    """``torch.cpu`` with the ``torch.cuda`` calls verl makes on its device module."""

    def __init__(self) -> None:
        super().__init__("codedance_verl_cpu_device")
        self._peak = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> torch.device:
        return torch.device("cpu")

    @staticmethod
    def set_device(device: Any) -> None:
        """One device: nothing to select."""

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """CPU kernels are synchronous."""

    @staticmethod
    def empty_cache() -> None:
        """No caching allocator on CPU."""

    @staticmethod
    def ipc_collect() -> None:
        """No IPC handles on CPU."""

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        """Not enforceable on CPU."""

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        import psutil

        memory = psutil.virtual_memory()
        return int(memory.available), int(memory.total)

    def memory_allocated(self, device: Any = None) -> int:
        rss = _rss()
        self._peak = max(self._peak, rss)
        return rss

    memory_reserved = memory_allocated

    def max_memory_allocated(self, device: Any = None) -> int:
        return max(self._peak, self.memory_allocated())

    max_memory_reserved = max_memory_allocated

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self._peak = 0


CPU_DEVICE = _CPUDeviceModule()


@PlatformRegistry.register(platform=NAME)
class CPUPlatform(PlatformBase):
    """verl's platform interface on the host CPU (see the module docstring)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return CPU_DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # chosen only by VERL_PLATFORM=cpu, never by auto-detection

    def current_device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        """One device: nothing to select."""

    def synchronize(self, device_index: int | None = None) -> None:
        """CPU kernels are synchronous."""

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        """No caching allocator on CPU."""

    def empty_cache(self) -> None:
        """No caching allocator on CPU."""

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the logical GPUs; unused by torch here

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        """No device profiler."""

    def profiler_stop(self) -> None:
        """No device profiler."""

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
