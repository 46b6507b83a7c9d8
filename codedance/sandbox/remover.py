"""Removing closed sandboxes' working directories without holding up ``close()``.

Why: a failed step may leave its working directory as large as the work root allows (half a
million directories of mode 000, each opened up before it can be emptied), and ``close()``
removed it before returning: 39 s of a `SandboxPool`'s caller waiting on one hostile trajectory.
`Remover.discard` removes for up to ``INLINE_S`` and hands what is left to
one daemon thread of the service, which removes it in the background, oldest first.

Until they are removed the files stay charged to the service's memory, and the OOM arbiter waits
for them (up to ``arbiter.FREEING_WAIT_S``) before it stops anyone's step (so that an
honest step is not stopped for memory that is on its way back).

Not handled: what the thread has not removed when the service closes is left to the service's
own removal of its work root (an unmount, on a tmpfs work root) or, after a crash, to the sweep
of leftovers (``codedance sandbox gc``).
"""

from __future__ import annotations

import queue
import threading
import time

from codedance.sandbox.files import DeadlinePassed, remove_tree

INLINE_S = 0.5  # removed within close() before the rest is handed to the thread


class Remover:
    """One service's background removal of closed sandboxes' directories."""

    def __init__(self, inline_s: float = INLINE_S) -> None:
        self.inline_s = inline_s
        self._pending: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._left = 0  # directories handed to the thread and not yet removed (`busy`)
        self._left_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._stopping = False

    def discard(self, path: str, inline_s: float | None = None) -> None:
        """Remove ``path`` (a directory the controller made) within ``inline_s`` (the remover's
        own by default), and what is left in the background; all of it at once after `stop`."""
        if self._stopping:
            remove_tree(path)
            return
        try:
            remove_tree(path, time.monotonic() + (self.inline_s if inline_s is None else inline_s))
        except DeadlinePassed:
            with self._left_lock:
                self._left += 1
            self._pending.put(path)
            self._start()

    def busy(self) -> bool:
        """Whether the thread is still removing directories (their memory is being given back)."""
        return self._left > 0

    def stop(self) -> None:
        """Stop removing (what is left stays for the caller's removal of the whole root)."""
        self._stopping = True
        self._pending.put(None)
        if self._thread is not None:
            self._thread.join()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="codedance-remover", daemon=True
                )
                self._thread.start()

    def _loop(self) -> None:
        while (path := self._pending.get()) is not None:
            try:
                remove_tree(path, stop=lambda: self._stopping)
            except InterruptedError:
                return
            except OSError:  # gone already, or the root unmounted under it
                pass
            finally:
                with self._left_lock:
                    self._left -= 1
