"""One trajectory's limits, its directories on the host, and the request that starts its holder.

Layout under the service's work root (``t<hex>/``, owned by root, mode 0710 to the trajectory's
group: it may enter, not list or write)::

    work/        the working directory (sticky, 1777): inputs (root-owned, so they cannot be
                 removed) and whatever the snippets write; ``work/.tmp`` is TMPDIR, so it is
                 rolled back with the rest

A step's file descriptors 1 and 2 go to a memfd of its own (in memory, bounded by the memory
limit, gone with the process), or where no memory cgroup counts memfds to unnamed files in
``work/``: nothing of the trajectory lives outside ``work/``.

Without a per-trajectory uid (an unprivileged host) everything is the caller's, mode 0700, and
in the trajectory's private view ``work/`` is a tmpfs of its own (`workdir_tmpfs`) laid out as
the host's directory is.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from codedance.errors import SettingsError
from codedance.sandbox.inputs import ImageInput, write_inputs

# one thread per step: a step that leaves threads alive is refused, and steps are bounded by cores
SINGLE_THREADED = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
}


PAGE = os.sysconf("SC_PAGE_SIZE")  # a tmpfs allocates files in pages
CAPTURE_FILES = 2  # a step's descriptors 1 and 2 (`workdir_tmpfs`)


@dataclass(frozen=True)
class Limits:
    """Per-trajectory resource limits. Sizes in bytes unless the name says otherwise."""

    memory: int = 4 << 30  # cgroup memory (no swap) and the address-space rlimit's headroom
    processes: int = 32  # pids.max and RLIMIT_NPROC for the trajectory's uid
    cpus: float = 1.0  # CPU time per wall second, all of a step's processes together (cgroups)
    file_size: int = 256 << 20  # largest single file (RLIMIT_FSIZE)
    open_files: int = 256
    workdir_bytes: int = 1 << 30
    workdir_files: int = 10_000
    max_images: int = 8  # images returned per step
    max_pixels: int = 4096 * 4096  # larger images are downscaled
    max_image_bytes: int = 48 << 20  # PNG bytes returned per step, all images together
    output_head: int = 20_000  # characters kept from the start of stdout and of stderr
    output_tail: int = 5_000  # and from the end
    error_chars: int = 4_000  # characters kept of an exception's message
    max_message: int = 64 << 20  # a step's whole reply, as the controller accepts it
    recovery_s: float = 10.0  # after the timeout, the most time a failed step's clean-up may take

    def __post_init__(self):
        for name in (
            "memory",
            "processes",
            "file_size",
            "open_files",
            "workdir_bytes",
            "workdir_files",
            "max_pixels",
            "max_image_bytes",
            "max_message",
        ):
            _check_count(name, getattr(self, name), minimum=1)
        for name in ("max_images", "output_head", "output_tail", "error_chars"):
            _check_count(name, getattr(self, name), minimum=0)
        positive_finite("Limits.cpus", self.cpus)
        seconds("Limits.recovery_s", self.recovery_s)
        if self.max_message < self.max_image_bytes + (1 << 20):
            raise SettingsError(
                "max_message must leave room for max_image_bytes plus 1 MiB of text"
            )


def _check_count(name: str, value, minimum: int) -> None:
    if type(value) is not int or value < minimum:
        raise SettingsError(f"Limits.{name} must be an int >= {minimum}, got {value!r}")


MAX_SECONDS = (
    7 * 24 * 3600
)  # the longest timeout taken: every wait below stays within poll()'s int milliseconds


def seconds(name: str, value) -> float:
    """`positive_finite`, and at most ``MAX_SECONDS`` (a week), else a `SettingsError` (a
    ValueError) naming ``name``."""
    value = positive_finite(name, value)
    if value > MAX_SECONDS:
        raise SettingsError(f"{name} must be at most {MAX_SECONDS} seconds (a week), got {value!r}")
    return value


def positive_finite(name: str, value) -> float:
    """``value`` as a float if it is a finite number above 0 (NaN and infinity are refused:
    deadlines and quotas are computed from it), else a `SettingsError` (a ValueError) naming
    ``name``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise SettingsError(f"{name} must be a finite number above 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class TrajectoryDirs:
    root: str
    workdir: str
    images: tuple[str, ...]  # the input files' names inside workdir
    owner: tuple[int, int] | None  # (uid, gid) the trajectory runs as, None: the caller's

    @property
    def protected(self) -> frozenset[str]:
        """Files the trajectory must not change (restored from the inputs, never from a step)."""
        return frozenset(self.images) if self.owner else frozenset()


def prepare(
    root: str, images: list[ImageInput], uid: int | None, inputs_dir: str | None = None
) -> TrajectoryDirs:
    """Create ``root`` and its layout, write the input images, set owners and modes.

    With ``inputs_dir`` (and a uid of its own) the images are written there (a directory the jail
    sees read-only, on disk) and the working directory holds root-owned symlinks to them, which the
    trajectory can neither remove nor replace (sticky directory) nor write through (read-only)."""
    owner = (uid, uid) if uid is not None else None
    workdir = os.path.join(root, "work")
    tmp = os.path.join(workdir, ".tmp")
    os.mkdir(root)
    os.mkdir(workdir)
    if owner and inputs_dir:
        os.mkdir(inputs_dir)
        names = write_inputs(images, inputs_dir)
        for name in names:
            os.symlink(os.path.join(inputs_dir, name), os.path.join(workdir, name))
        os.chown(inputs_dir, 0, owner[1])
        os.chmod(inputs_dir, 0o710)
    else:
        names = write_inputs(images, workdir)
    os.mkdir(tmp, 0o700)
    if owner:
        os.chown(root, 0, owner[1])
        os.chmod(root, 0o710)
        os.chmod(workdir, 0o1777)
        os.chown(tmp, *owner)
    else:
        os.chmod(root, 0o700)
    return TrajectoryDirs(root, workdir, tuple(names), owner)


def holder_request(dirs: TrajectoryDirs, uid: int | None, limits: Limits) -> dict:
    """What the zygote needs to fork this trajectory's holder (sent as JSON)."""
    env = {
        **SINGLE_THREADED,
        "MPLBACKEND": "Agg",
        "HOME": dirs.workdir,
        "TMPDIR": os.path.join(dirs.workdir, ".tmp"),
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
    }
    return {
        "id": os.path.basename(dirs.root), "uid": uid, "gid": uid,
        "workdir": dirs.workdir, "images": list(dirs.images), "env": env,
        "limits": {
            "memory": limits.memory, "file_size": limits.file_size, "open_files": limits.open_files,
            "processes": limits.processes,  # RLIMIT_NPROC where the holder counts alone (runtime)
            "max_images": limits.max_images, "max_pixels": limits.max_pixels,
            "max_image_bytes": limits.max_image_bytes, "error_chars": limits.error_chars,
            "output_head": limits.output_head, "output_tail": limits.output_tail,
        },
        "workdir_tmpfs": workdir_tmpfs(limits, len(dirs.images)),
    }  # fmt: skip


def workdir_tmpfs(limits: Limits, images: int) -> dict:
    """The size of a trajectory's own working directory where it gets one (a tmpfs in its
    private view): what a commit may keep, ``workdir_bytes`` with each of ``workdir_files`` files
    rounded up to a page as the tmpfs allocates them (a step's captured outputs, files there
    where memfds are refused, share that space). Inodes: the entries a commit may keep, the
    inputs, the top directory, ``.tmp``, and two steps' captured outputs (the running step's
    and the spare's)."""
    size = limits.workdir_bytes + limits.workdir_files * PAGE
    inodes = limits.workdir_files + images + 2 + 2 * CAPTURE_FILES
    return {"size_bytes": size, "inodes": inodes, "directories": [".tmp"]}
