"""Guards a trajectory's holder process puts on itself before it runs any user code.

Runs inside the jail, in the holder right after it is forked from the zygote, in this order:
rlimits, dropping to the trajectory's own unprivileged uid, ``PR_SET_NO_NEW_PRIVS``,
``PR_SET_DUMPABLE=0``, then the seccomp filter. Every later step process inherits all of them and
cannot undo any of them.

The seccomp filter (libseccomp through PyPI ``pyseccomp``) returns ``EPERM`` for:
- new programs: ``execve``, ``execveat``;
- signals to any process (``kill``, ``tkill``, ``tgkill``, ``rt_*sigqueueinfo``,
  ``pidfd_send_signal``, ``pidfd_open``, ``pidfd_getfd``): user code never needs them, and denying
  them outright avoids comparing ``pid_t`` arguments at all (the kernel's ``kill(-1)`` arrives as
  ``0xFFFFFFFF`` in a 64-bit register, a classic filter bypass);
- debugging and other processes' memory: ``ptrace``, ``process_vm_readv``/``writev``,
  ``kcmp``;
- namespaces and mounts: ``unshare``, ``setns``, ``mount``, ``umount2``, ``pivot_root``,
  ``chroot``, ``clone`` with any ``CLONE_NEW*`` flag (masked to the low 32 bits), and ``clone3``
  (``ENOSYS``, so libc falls back to ``clone``, whose flags can be inspected);
- networking: ``socket`` and ``socketpair`` for every address family except ``AF_UNIX`` (a unix
  socket then reaches nothing), ``connect``, ``bind``, ``listen``, ``accept``/``accept4`` (the
  holder's own socket is an inherited socketpair); ``io_uring_*`` (its operations, sockets and
  connects included, bypass the syscall filter); ``shutdown`` and ``setsockopt`` (a step shares the
  holder's socket: either would break it for the holder too); ``fcntl``/``ioctl`` that arm
  signal-driven I/O (``F_SETOWN``, ``F_SETOWN_EX``, ``F_SETSIG``, ``O_ASYNC``, ``FIOASYNC``,
  ``FIOSETOWN``, ``SIOCSPGRP``: a SIGIO to the holder), ``F_NOTIFY`` (directory notification, the
  old interface to what inotify tells: a SIGIO for each read of a shared read-only tree showed
  which modules a neighbour imported and when the host read a file in ``/etc``) and ``F_SETLEASE``
  (a lease left on a committed file made the controller's checkpoint open fail halfway, and the
  trajectory was lost);
- kernel objects that outlive a process and escape the rollback: System V shared memory,
  semaphores and message queues, POSIX message queues;
- other processes: ``prlimit64`` on any pid but 0 (itself; compared on all 64 bits, so no high
  bits can smuggle another pid), ``process_madvise``, ``migrate_pages``, ``move_pages``; the
  scheduling of any process but the caller: ``sched_setaffinity``, ``sched_setscheduler``,
  ``sched_setparam`` and ``sched_setattr`` on a pid other than 0, ``setpriority`` and
  ``ioprio_set`` other than on the calling process itself (``PRIO_PROCESS``/``IOPRIO_WHO_PROCESS``
  with who 0; ``PRIO_USER`` with who 0 means every process of the caller's uid). Where
  trajectories share a uid (a controller that is not root) a step could otherwise pin a
  neighbour's holder, or the zygote every later holder is forked from, to one CPU at nice 19 under
  ``SCHED_IDLE``; each comparison is on all 64 bits, so high bits only widen what is refused
  (`tests/sandbox/test_hostile_pages.py::test_the_seccomp_filter_alone_refuses_scheduling_others`);
- host-wide write-back: ``sync``, ``syncfs`` (``fsync`` of one's own files stays);
- ``memfd_create`` where no memory cgroup bounds the trajectory (``refuse_memfd``): a memfd's
  pages are memory in no process's address space, so the address-space rlimit, the only memory
  bound there, never sees them (a committed holder kept 768 MiB in unmapped memfds under a
  128 MiB limit). The step's own captured outputs are then files in its working directory
  (`runtime`), and POSIX shared memory has no ``/dev/shm`` in the jail to go to;
- ``memfd_secret`` (its pages are taken out of the kernel's direct map, which fragments it for
  the whole host) and ``modify_ldt`` (a per-process descriptor table: attack surface nothing
  here needs; Chrome's sandbox denies it too);
- Linux AIO: ``io_setup``, ``io_destroy``, ``io_submit``, ``io_cancel``, ``io_getevents``,
  ``io_pgetevents`` (``fs.aio-max-nr`` is one counter for the whole host, not per namespace or
  cgroup: one ``io_setup(32768)`` in a committed holder would take all 65,536 slots of the
  host; glibc's POSIX AIO uses threads, not these calls);
- watching files: ``inotify_init``, ``inotify_init1``, ``inotify_add_watch``, ``fanotify_init``,
  ``fanotify_mark`` (the jail's read-only trees, the Python installation and site-packages, are
  the same inodes for every trajectory and the host: a watch there sees which modules a neighbour
  imports);
- ``prctl(PR_SET_DUMPABLE, ...)`` (the option compared on its low 32 bits, as the kernel reads an
  ``int``): a process made dumpable again that crashes would, where ``kernel.core_pattern`` is a
  pipe (apport, systemd-coredump), have the kernel run that root helper on the host, fed the
  jailed process's memory; ``RLIMIT_CORE`` is also 1, the value at which the
  kernel refuses piped dumps (a step may lower it to 0; it stays non-dumpable);
- moving file pages into pipes: ``splice``, ``tee``, ``vmsplice``, ``sendfile`` (a pipe filled
  from a file holds references to its page-cache pages, which the kernel then cannot reclaim yet
  which the OOM arbiter counts as reclaimable cache: kept by a committed holder, 64 MiB per
  trajectory go uncounted; ``shutil.copyfile`` falls back to read/write
  when its first ``sendfile`` fails; ``copy_file_range`` stays);
- out-of-band data (``MSG_OOB``) on ``sendto``/``sendmsg``/``sendmmsg`` and their ``recv*``
  counterparts: nothing here needs it, and on unix sockets it has been a kernel attack surface
  (CVE-2025-38236; Chrome's sandbox denies it too);
- writable shared mappings of files (``mmap`` with ``PROT_WRITE`` and ``MAP_SHARED`` or
  ``MAP_SHARED_VALIDATE``, not ``MAP_ANONYMOUS``; e.g. ``np.memmap(mode="r+")``): one kept by
  a committed step lives on in later steps, whose writes through it the rollback cannot see
  (on a tmpfs a page already written takes later writes with no new modification time). Anonymous
  shared memory and private or read-only mappings stay. Not closed: ``mprotect`` adding
  ``PROT_WRITE`` to a read-only shared mapping of a file opened for writing (deliberate, and it
  only harms the step's own trajectory; docs/sandbox.md);
- locking memory: ``mlock``, ``mlock2``, ``mlockall`` and ``mmap`` with ``MAP_LOCKED`` (the
  flags compared on their low 32 bits); ``RLIMIT_MEMLOCK`` is also 0 (`apply_rlimits`), which
  alone makes the kernel refuse all of them and ``SHM_LOCK``. A page of a shared read-only file
  (site-packages, the system's libraries) is charged to the memory group of whoever read it
  first: another trajectory, the controller, the host. Locked by a step, it is moved off that
  group's file cache, so nobody can reclaim it, ``memory_total`` never counted it, and the OOM
  arbiter would read it as its first reader's growth. A library that locks memory (a crypto
  library keeping keys out of swap) gets ``EPERM``, which each handles as a host without
  locking; NumPy, Pillow, OpenCV and Matplotlib never lock;
- page-cache residency probes of shared files: ``preadv2``/``pwritev2`` with ``RWF_NOWAIT``
  (their flags, the sixth argument, compared by that bit: with it a read of an uncached page
  fails at once, so probing the shared trees showed which modules a neighbour imported),
  ``cachestat`` (older kernels report the cached pages of any file the caller can read; newer
  ones refuse a file the caller cannot write, as ``mincore`` has since Linux 5.0), and
  ``fadvise64`` with ``POSIX_FADV_DONTNEED`` (it evicts a shared file's cache, the reset that
  turns a one-shot probe into repeated ones, and the host's cache for everyone); reading and
  timing a page stays (docs/sandbox.md);
- extended attributes: ``setxattr``, ``lsetxattr``, ``fsetxattr``, ``setxattrat`` and their
  ``remove`` counterparts (a failing step's ``user.*`` attributes on a committed file survived its
  rollback as kernel memory the OOM arbiter does not count);
- every system call newer than this libseccomp knows (numbers above the highest it can name, up
  to 511) returns ``ENOSYS``, as on an older kernel: a deny list cannot name what it does not know
  (``setxattrat``, 463, is one), and C libraries fall back when a new call is missing;
- kernel surfaces nobody needs here: ``bpf``, ``perf_event_open``, ``userfaultfd``, ``keyctl``,
  ``add_key``, ``request_key``, module loading, ``kexec_*``, ``reboot``, ``swapon``/``swapoff``,
  ``open_by_handle_at``, ``iopl``/``ioperm``, ``personality``.
``fork`` (``clone`` without namespace flags) stays allowed: each step is a fork of the holder;
the number of processes is bounded by ``RLIMIT_NPROC`` on the trajectory's own uid and by the
cgroup's ``pids.max``. ``os.abort()`` therefore cannot signal itself and ends as a crash.

Not handled here: the file system view (the jail's mount namespace does that) and the wall-clock
timeout (the controller kills from outside).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import resource

_PR_SET_DUMPABLE = 4
_PRIO_PROCESS, _IOPRIO_WHO_PROCESS = 0, 1
_CORE_LIMIT = 1  # RLIMIT_CORE: the kernel's "no dump, not even to a pipe" value
_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NAMESPACE_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
    | 0x00000080  # CLONE_NEWTIME
)
_AF_UNIX = 1
_AF_MAX = 64  # above every address family Linux defines (46 in 6.x)

DENIED_SYSCALLS = (
    "execve", "execveat",
    "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "pidfd_send_signal", "pidfd_open", "pidfd_getfd",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot",
    "connect", "bind", "listen", "accept", "accept4",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "shutdown", "setsockopt",
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
    "msgget", "msgsnd", "msgrcv", "msgctl",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "process_madvise", "migrate_pages", "move_pages",
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm",
    "personality", "acct", "quotactl", "uselib", "sync", "syncfs", "memfd_secret", "modify_ldt",
    "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
    "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark",
    "splice", "tee", "vmsplice", "sendfile",
    "setxattr", "lsetxattr", "fsetxattr", "setxattrat",
    "removexattr", "lremovexattr", "fremovexattr", "removexattrat",
    "mlock", "mlock2", "mlockall", "cachestat",
)  # fmt: skip
_SYSCALL_NUMBERS = 512  # x86-64's table is below this (x32 numbers, bit 30 set, are another arch)
_F_SETFL, _F_SETOWN, _F_SETSIG, _F_SETOWN_EX, _F_SETLEASE, _F_NOTIFY = 4, 8, 10, 15, 1024, 1026
_PROT_WRITE = 0x2
_MSG_OOB = 0x1
_MAP_SHARED, _MAP_SHARED_VALIDATE, _MAP_TYPE, _MAP_ANONYMOUS = 0x01, 0x03, 0x03, 0x20
_MAP_LOCKED = 0x2000
_RWF_NOWAIT = 0x8
_POSIX_FADV_DONTNEED = 4
_O_ASYNC = 0o20000
_SIGNAL_IOCTLS = (0x5452, 0x8901, 0x8902)  # FIOASYNC, FIOSETOWN, SIOCSPGRP


_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 2, 4, 8, 32
_CAP_SYS_ADMIN = 21
_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def hide_other_processes() -> str | None:
    """In the zygote, once: remount the jail's ``/proc`` with ``hidepid=invisible`` (each process
    sees only the ``/proc/<pid>`` entries it may trace: its own, since holders and steps are not
    dumpable), then give up ``CAP_SYS_ADMIN``, which only this needed. None when done, else why
    not (the jail then works with a shared view of process ids)."""
    libc = ctypes.CDLL(None, use_errno=True)
    flags = _MS_REMOUNT | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    failure = None
    if libc.mount(b"proc", b"/proc", b"proc", flags, b"hidepid=invisible") != 0:
        failure = f"remounting /proc failed: {os.strerror(ctypes.get_errno())}"
    header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) == 0:
        for field in ("effective", "permitted", "inheritable"):
            setattr(data[0], field, getattr(data[0], field) & ~(1 << _CAP_SYS_ADMIN))
        if libc.capset(ctypes.byref(header), data) != 0:
            raise OSError(ctypes.get_errno(), "could not drop CAP_SYS_ADMIN")
    return failure


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def apply_rlimits(*, address_space: int, file_size: int, open_files: int, processes: int) -> None:
    """Lower soft and hard limits; 0 for any value leaves that limit as it is. ``RLIMIT_CORE``
    is always 1 and ``RLIMIT_MEMLOCK`` always 0."""
    limits = (
        (resource.RLIMIT_AS, address_space),
        (resource.RLIMIT_FSIZE, file_size),
        (resource.RLIMIT_NOFILE, open_files),
        (resource.RLIMIT_NPROC, processes),
        # 1, not 0: no core file fits one byte, and exactly 1 makes the kernel refuse a dump to a
        # piped core_pattern too (fs/coredump.c), which ignores any other limit
        (resource.RLIMIT_CORE, _CORE_LIMIT),
    )
    for which, value in limits:
        if value:
            resource.setrlimit(which, (value, value))
    # always 0: no locked memory at all (the seccomp filter's locking rules say why)
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))


def drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` for good (real, effective and saved ids; no supplementary groups)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid):
        raise OSError(f"could not switch to uid {uid}")


def forbid_new_privileges() -> None:
    """``PR_SET_NO_NEW_PRIVS`` (required before seccomp) and not dumpable (no ptrace, no core,
    /proc/<pid>/mem closed to same-uid siblings). The last ``PR_SET_DUMPABLE`` anything here
    makes: the seccomp filter loaded next refuses it."""
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _prctl(_PR_SET_DUMPABLE, 0)


def install_seccomp(refuse_memfd: bool = False) -> None:
    """Load the filter described in the module docstring (``memfd_create`` refused too with
    ``refuse_memfd``); raises if libseccomp is unusable."""
    import pyseccomp as seccomp

    deny = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENIED_SYSCALLS + (("memfd_create",) if refuse_memfd else ()):
        try:
            rules.add_rule(deny, name)
        except (ValueError, OSError):  # a syscall this architecture does not have
            continue
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for number in range(highest_known_syscall(seccomp) + 1, _SYSCALL_NUMBERS):
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), number)
    low32 = 0xFFFFFFFF
    rules.add_rule(deny, "prlimit64", seccomp.Arg(0, seccomp.NE, 0))
    for call in ("sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr"):
        rules.add_rule(deny, call, seccomp.Arg(0, seccomp.NE, 0))
    for call, self_kind in (("setpriority", _PRIO_PROCESS), ("ioprio_set", _IOPRIO_WHO_PROCESS)):
        rules.add_rule(deny, call, seccomp.Arg(0, seccomp.NE, self_kind))
        rules.add_rule(deny, call, seccomp.Arg(1, seccomp.NE, 0))
    rules.add_rule(deny, "prctl", seccomp.Arg(0, seccomp.MASKED_EQ, low32, _PR_SET_DUMPABLE))
    for command in (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX, _F_SETLEASE, _F_NOTIFY):
        rules.add_rule(deny, "fcntl", seccomp.Arg(1, seccomp.MASKED_EQ, low32, command))
    rules.add_rule(
        deny,
        "fcntl",
        seccomp.Arg(1, seccomp.MASKED_EQ, low32, _F_SETFL),
        seccomp.Arg(2, seccomp.MASKED_EQ, _O_ASYNC, _O_ASYNC),
    )
    for request in _SIGNAL_IOCTLS:
        rules.add_rule(deny, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, low32, request))
    for call, flags_arg in (
        ("sendto", 3),
        ("sendmsg", 2),
        ("sendmmsg", 3),
        ("recvfrom", 3),
        ("recvmsg", 2),
        ("recvmmsg", 3),
    ):
        rules.add_rule(deny, call, seccomp.Arg(flags_arg, seccomp.MASKED_EQ, _MSG_OOB, _MSG_OOB))
    for sharing in (_MAP_SHARED, _MAP_SHARED_VALIDATE):
        rules.add_rule(
            deny,
            "mmap",
            seccomp.Arg(2, seccomp.MASKED_EQ, _PROT_WRITE, _PROT_WRITE),
            seccomp.Arg(3, seccomp.MASKED_EQ, _MAP_TYPE | _MAP_ANONYMOUS, sharing),
        )
    rules.add_rule(deny, "mmap", seccomp.Arg(3, seccomp.MASKED_EQ, _MAP_LOCKED, _MAP_LOCKED))
    for call in ("preadv2", "pwritev2"):
        rules.add_rule(deny, call, seccomp.Arg(5, seccomp.MASKED_EQ, _RWF_NOWAIT, _RWF_NOWAIT))
    rules.add_rule(
        deny, "fadvise64", seccomp.Arg(3, seccomp.MASKED_EQ, low32, _POSIX_FADV_DONTNEED)
    )
    for flag in _bits(_CLONE_NAMESPACE_FLAGS):
        rules.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    for family in range(_AF_MAX):
        if family != _AF_UNIX:
            for call in ("socket", "socketpair"):
                rules.add_rule(
                    seccomp.ERRNO(errno.EAFNOSUPPORT),
                    call,
                    seccomp.Arg(0, seccomp.MASKED_EQ, 0xFFFFFFFF, family),
                )
    rules.load()


@functools.cache
def highest_known_syscall(seccomp) -> int:
    """The highest system call number this libseccomp can name on this architecture (~2 ms:
    the zygote asks once, so holders inherit the answer)."""
    highest = 0
    for number in range(_SYSCALL_NUMBERS):
        try:
            seccomp.resolve_syscall(seccomp.Arch.NATIVE, number)
        except ValueError:
            continue
        highest = number
    return highest


def _bits(mask: int) -> list[int]:
    return [1 << i for i in range(32) if mask & (1 << i)]
