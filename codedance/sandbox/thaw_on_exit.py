"""Thaw a service's frozen trajectories when its controller dies, so they die with it.

Why: the jail dies with its controller (bubblewrap's ``--die-with-parent``: every process of its
PID namespace gets SIGKILL), but idle trajectories are frozen, and on cgroup v1 a frozen process
does not act on a signal until it is thawed. Without this, a controller killed with SIGKILL left
its idle trajectories frozen, holding their memory, until the next sweep of leftovers.

How: a small watcher process (ours: root, outside the jail, ``python -I -S`` on this file, which
imports only the standard library) blocks reading a pipe whose only write end the controller
holds (a forked child of the controller lets go of its copy: `forks`). The kernel closes that
end when the controller exits, however it exits; the read then returns and the watcher thaws
every trajectory group under the service's freezer group, then ends. On a normal close the
service stops the watcher first (nothing is frozen by then). Written by hand: no library watches
a parent for this.
"""

from __future__ import annotations

import os
import subprocess
import sys

if __name__ != "__main__":  # the watcher itself imports only the standard library
    from codedance.sandbox import forks

_THAW = {"freezer.state": b"THAWED", "cgroup.freeze": b"0"}  # cgroup v1, v2


def watch(pipe_fd: int, service_freezer_dir: str) -> None:
    """Wait for the controller's end of the pipe to close, then thaw its trajectories."""
    while os.read(pipe_fd, 1):
        pass
    thaw_all(service_freezer_dir)


def thaw_all(service_freezer_dir: str) -> None:
    """Thaw every group under ``service_freezer_dir`` (v2: a trajectory's group and its leaves)."""
    for top, names, _ in os.walk(service_freezer_dir):
        for name in names:
            thaw(os.path.join(top, name))


def thaw(group_dir: str) -> None:
    """Thaw one group, where it has a freezer (v1's ``freezer.state`` or v2's ``cgroup.freeze``)."""
    for name, thawed in _THAW.items():
        try:
            fd = os.open(os.path.join(group_dir, name), os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            os.write(fd, thawed)
        except OSError:
            pass
        finally:
            os.close(fd)


class ThawOnExit:
    """The watcher of one service (started by the service when its trajectories can freeze)."""

    def __init__(self, service_freezer_dir: str):
        read_end, self._write_end = os.pipe()  # neither end is inherited by anyone else
        forks.hold(self._write_end)  # nor by a forked child of the controller (`forks`)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", __file__, str(read_end), service_freezer_dir],
                pass_fds=(read_end,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )  # not in the controller's process group: its kills miss it
        except BaseException:
            forks.close(self._write_end)
            raise
        finally:
            os.close(read_end)

    def stop(self) -> None:
        """End the watcher (the service is closing normally)."""
        self.process.kill()
        self.process.wait()
        forks.close(self._write_end)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2])
