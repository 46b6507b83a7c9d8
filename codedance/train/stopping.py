"""Stop SFT or GRPO at a step boundary on SIGTERM or Ctrl-C, with a checkpoint of that step.

What ``timeout``, Slurm and Kubernetes send first is SIGTERM, then SIGKILL after a grace period.
While `stop_requests` is active (the main thread only), the first SIGTERM or SIGINT only records
the request; the Trainer callback `StopAtStepEnd` (SFT) or `GRPOTrainer.train` then has the step
in progress finish and be saved as a checkpoint before training ends, and ``KeyboardInterrupt``
is raised (the command line's "interrupted", rerun to resume). A second signal raises ``KeyboardInterrupt`` at
once (the steps since the last checkpoint are lost, as with SIGKILL). The previous handlers come
back when the block ends. Pinned by ``tests/train/test_resume.py``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """The name of the first stop signal received (``SIGTERM``, ``SIGINT``), or None."""

    def __init__(self) -> None:
        self.signal: str | None = None


@contextmanager
def stop_requests() -> Iterator[StopRequest]:
    """Record the first SIGTERM/SIGINT in the yielded `StopRequest` (a second one interrupts)."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():  # handlers are the main thread's
        yield request
        return

    def record(signum: int, frame: Any) -> None:
        if request.signal is not None:
            raise KeyboardInterrupt
        request.signal = signal.Signals(signum).name

    previous = {sig: signal.signal(sig, record) for sig in SIGNALS}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_at_step_end(request: StopRequest) -> Any:
    """A TrainerCallback: once `request` holds a signal, save the step just finished and stop."""
    from transformers import TrainerCallback

    class StopAtStepEnd(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if request.signal is not None:
                control.should_save = True
                control.should_training_stop = True
            return control

    return StopAtStepEnd()
