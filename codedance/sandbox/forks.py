"""Descriptors of the controller that a forked child of it must not keep.

Why: some of the service's descriptors mean "the controller is alive" for as long as they are
open: the thaw-on-exit watcher's pipe write end (`thaw_on_exit`), the service's and its uid
block's ``flock`` locks (`leftovers`), the channels to idle charged-copy helpers
(`charged_copy`). ``O_CLOEXEC`` closes them at ``exec`` only, so a plain ``os.fork()`` of the
controller (multiprocessing's "fork" start method, DataLoader workers, a reward process) kept
them: after the controller was SIGKILLed the watcher never woke (idle trajectories stayed frozen,
their memory held), the helpers stayed, and ``codedance sandbox gc`` took the service for alive
for as long as the child lived.

How: one hook, registered once for the whole process (``os.register_at_fork`` cannot be undone,
so never one per service): in the child of every ``os.fork()``, each descriptor held here is
replaced by ``/dev/null`` (``dup2``, close-on-exec), which lets go of the pipe, the lock or the
socket, while the number stays taken so that a later close by an object the child inherited
(a socket's, say) cannot close some other descriptor the child has opened since. Services add a
descriptor right after opening it (`hold`) and take it out before closing it (`release`).
``subprocess`` does not run the hook; it does not need to (it execs, and ``O_CLOEXEC`` acts).
"""

from __future__ import annotations

import os

_HELD: set[int] = set()  # changed under the GIL only: the hook runs in a child with one thread


def hold(fd: int) -> int:
    """Keep ``fd`` from every child forked from now on; returns it."""
    _HELD.add(fd)
    return fd


def release(fd: int) -> None:
    """Stop keeping ``fd`` from forked children (call before closing it)."""
    _HELD.discard(fd)


def close(fd: int) -> None:
    """`release` ``fd``, then close it."""
    release(fd)
    os.close(fd)


def held() -> frozenset[int]:
    """The descriptors kept from forked children (for tests)."""
    return frozenset(_HELD)


def _let_go_in_child() -> None:
    fds = list(_HELD)
    _HELD.clear()
    if not fds:
        return
    try:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        null = -1
    for fd in fds:
        try:
            if null >= 0:
                os.dup2(null, fd, inheritable=False)
            else:
                os.close(fd)
        except OSError:
            pass
    if null >= 0:
        os.close(null)


os.register_at_fork(after_in_child=_let_go_in_child)
