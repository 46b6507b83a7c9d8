"""Who pays when the service's memory runs out: a userspace OOM arbiter for ``memory_total``.

Why it exists: a trajectory's files on the tmpfs work root are charged to its memory cgroup but
sit in no process's RSS, and the kernel's OOM killer ranks processes by RSS. When all the
trajectories together reach ``memory_total`` it would kill whichever process is largest: an
honest neighbour's running step, or an idle neighbour's holder (its whole state), for another
trajectory's files. So the service keeps the kernel's killer from choosing at its parent group
and this thread decides instead (`cgroup_memory.arbitrate_oom`):
- cgroup v1: the killer is switched off at the parent group (each trajectory's own group keeps
  it, so a trajectory over its *own* limit still loses only its step); allocations past
  ``memory_total`` wait in the kernel's OOM wait until the arbiter frees memory.
- cgroup v2, which has no such switch: ``memory.high`` ``margin`` below ``memory_total`` (the
  parent's ``memory.max``) makes the kernel throttle allocations there (reclaim, then a sleep
  on the way back to user space, longer the further past) instead of killing, and wakes the
  arbiter (``memory.events.local``, a PSI trigger on ``memory.pressure``): the group slows down
  while the arbiter stops the grower, and reaches ``memory.max`` only if one allocation jumps
  the whole margin at once (a single write of that size). Should the kernel's killer fire
  there after all, it finds holders and spares at ``oom_score_adj`` -1000 (never killed) and
  steps at 1000, and ``memory.oom.group`` on each trajectory's group kills the chosen step with
  every process it made: a step pays, never committed state, though not always the largest
  grower (the kernel ranks by RSS).

While the parent group is out of memory, processes that allocate wait (a page fault sleeps; a
write to a file fails with ENOMEM, and wakes no one). The kernel signals an eventfd when a process
starts waiting, and when the group's charge crosses ``memory_total`` less a margin (3 %, at least
16 MiB). The arbiter then picks the live trajectory whose unreclaimable memory grew most since
its last committed step answered (`Sandbox.memory_growth`: what its running step added, and
anything after that answer or between steps; committed state is never taken; tmpfs files and
the rest each count alone, so files a step deletes never hide what its holder takes as
anonymous memory) and makes it give memory back (`Sandbox.yield_memory`). The mark is lowered to
what the trajectory holds after each run, and whenever it is idle (a run's start, the idle
freezer's look, the arbiter's): a holder replaced by a commit frees its memory only when it exits,
after the mark was taken, and that is no credit to grow by. The measure leaves out kernel memory
(`TrajectoryCgroup.memory_measure`: cgroup v1 does not tell its reclaimable cache, such as
negative dentries, from what is not, such as the inodes of files that exist); a running step's
kernel memory gained (when positive) is added only for ranking while the group is out of memory,
when the kernel has already reclaimed what cache it could (otherwise a step filling
the service with empty files, ~1 KiB of inode and dentry each, reads as growing).
Who may be picked (`rank_victims`):
- while the group is *out of memory*: any running step (ranked by its growth with kernel
  memory), and any idle trajectory grown past ``IDLE_FLOOR_BYTES`` (8 MiB, kernel memory left
  out; an honest idle trajectory shows at most 2.6 MiB, its fresh spare's pages), ranked together
  by growth: several idle trajectories each keeping growth under 32 MiB do not make a
  neighbour's smaller step pay;
- while it is merely *nearly full* (what it holds less its file cache and kernel memory within
  the margin; nothing waits yet, nothing has been reclaimed, a write may fail with ENOMEM): only
  a trajectory grown past ``SLACK_BYTES`` (32 MiB), kernel memory left out.
No decision that loses a trajectory counts kernel memory (what a rollback must give back, the
escalation below, an idle trajectory's growth): some of it is cache that outlives a step.
What the victim gives:
- a step running: every process of the step is killed; its `run` returns ``oom`` with the state
  rolled back, and if the rollback does not give the growth back (more than ``SLACK_BYTES`` left:
  its holder, or a process the step left, kept it), the trajectory is lost;
- no step running (only a patched holder grows between steps): the trajectory is lost.
A restore whose copy the full group refuses (ENOMEM: a write, which wakes no one) holds
`restore_waiting` while it tries again: meanwhile, while the group is charged past its margin,
it counts as out of memory, so the out of memory ranking applies (the restoring step's own failure
freed the pages the restore needs, and a neighbour's step may have taken them). Before any ranking,
though, a trajectory whose waiting restore would leave it holding more than its committed state by
over ``SLACK_BYTES`` (`Sandbox.restore_excess`: what the restore still needs, less what the
trajectory holds below its mark; committed files its holder still has open or mapped are left out,
as deleting them freed nothing) is lost at once: its step took memory that outlives the step's
processes (shared memory its holder keeps or takes, while the step deleted committed files), which
nets out in every measure by kind.
While closed sandboxes' files are being removed in the background (`remover`) the arbiter waits
for them, up to ``FREEING_WAIT_S`` each time it is woken, before it chooses anyone (an
honest step is not stopped for memory that is on its way back).
While the victim is rolled back (its files are freed only by the restore) the arbiter waits for
it rather than choosing someone else (a run between those moments, "wait", too); if it is still
the largest grower ``ESCALATE_S`` after that, with more than ``SLACK_BYTES`` of growth and at
least 90 % of what it had (it gave nothing back: its holder, or a process stuck in the kernel,
keeps it), every process of it is killed and the trajectory is lost (thawed after the kill, as
its restore may have frozen it; no one else is chosen until its run has unwound and its
processes have exited). An answered step may be
stopped until its files are being saved (the trajectory then frozen); its commit fails as
``oom`` and nothing of it is kept. A victim chosen again in a later `run` is stopped again (when the
service is full of committed state, every growing step ends as ``oom``). While pressure remains
with no one to choose, it looks again every ``NO_ONE_LOOK_S`` rather than spinning.

Bounds left: a step waits (up to 1 s, before its code is sent, overlapping its spare's fork)
for the holder the previous commit replaced to exit, and the mark is lowered then; a replaced
holder that takes longer than that to exit still gives what it frees as credit during that step.
Memory taken as shared memory (a memfd, an unlinked file: by a patched holder, or by its step
into one the holder keeps) while the step deletes committed files nets out against them until
the trajectory's restore waits (above): a neighbour's step that grew meanwhile may be stopped
first (rolled back, never lost).
Kernel cache a trajectory held at its mark and the kernel
reclaims during a step offsets that step's kernel memory gained (never its other growth). A
step filling the group with kernel memory alone while nobody faults (nothing waits; the group is
not *nearly full* by the measure) makes neighbours' writes and forks fail with ENOMEM (their
steps fail, rolled back) until an allocation waits or a restore is refused.
k hostile idle trajectories can each keep up to ``IDLE_FLOOR_BYTES`` uncommitted, and
then a neighbour's step that grew less than that pays for their k x 8 MiB. While the group is only
nearly full they can keep up to k x 32 MiB, and a neighbour's writes and forks then fail with
ENOMEM (that step fails and is rolled back; nothing is stopped) until an allocation waits and the
group is out of memory: nearly full can last (committed state alone can fill the group), so a
floor set too low for some host's noise would there lose idle trajectories one after another.
On cgroup v2 "out of memory" is an allocation throttled now (`ThrottledServiceMemory.under_oom`)
and "nearly full" as on v1; kernel memory is kept apart as on v1 (`cgroup_memory.v2_kernel`:
v2's unreclaimable slab holds cache too, such as the long names of negative dentries).
Not handled: hosts where the parent group's files cannot be written. Written by hand because no
tool does this: systemd-oomd and earlyoom act on whole services or the host, not on one
trajectory's rollback.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from codedance.sandbox.memory.cgroup_memory import ServiceMemory, ThrottledServiceMemory
from codedance.sandbox.protocol import wait_any

SETTLE_S = 0.005  # between two looks at the group while a victim gives its memory back
NO_ONE_LOOK_S = 0.5  # between two looks while the group stays under pressure with no one to choose
WATCH_S = (
    0.02  # between two looks while charged past the threshold but not nearly full (3 reads each)
)
# growth acted on while the group is only nearly full (nothing waits yet), and what a stopped
# step's rollback may leave behind without its trajectory being lost
SLACK_BYTES = 32 << 20
# growth an idle trajectory may show while the group is out of memory without being lost: an
# honest one shows a fresh spare's pages, at most 2.6 MiB measured across numpy, PIL, matplotlib,
# failing, timed-out, over-limit, 100 MiB-state and million-object steps
# (benchmarks/sandbox_idle_growth.py, cgroup v1); three times that, so noise is never
# taken for growth, and k hostile idle trajectories keep at most k x 8 MiB past a smaller step
IDLE_FLOOR_BYTES = 8 << 20
ESCALATE_S = (
    5.0  # a victim that gave nothing back this long after its step was stopped loses its holder
)
FREEING_WAIT_S = (
    10.0  # the longest the arbiter waits, each time it is woken, for closed sandboxes' files to go
)


def _wait_for(watched: list[tuple[int, int]], deadline: float | None) -> set[int]:
    """The descriptors of ``watched`` (descriptor, poll events) that have an event; empty at the
    deadline. A cgroup file polls readable always: it is watched for POLLPRI alone."""
    poller = select.poll()
    for fd, events in watched:
        poller.register(fd, events)
    timeout = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000) + 1)
    return {fd for fd, _ in poller.poll(timeout)}


def idle_floor(out_of_memory: bool) -> int:
    """How much an idle trajectory must have grown to be made to give memory back (its loss)."""
    return IDLE_FLOOR_BYTES if out_of_memory else SLACK_BYTES


def rank_victims(growths: Iterable[tuple[object, int, int, bool]], *, out_of_memory: bool) -> list:
    """The trajectories that may give memory back, largest growth first (``(sandbox, growth in
    bytes, growth with the kernel memory gained, running)``). Out of memory: any running one,
    ranked by its growth with kernel memory (the kernel has reclaimed what cache it could), and
    an idle one grown past ``IDLE_FLOOR_BYTES`` (else it holds committed state and noise; kernel
    memory left out), ranked together; only nearly full: any grown past ``SLACK_BYTES``, kernel
    memory left out (nothing has been reclaimed yet)."""
    eligible = [
        (with_kernel if out_of_memory and running else growth, n, sandbox)
        for n, (sandbox, growth, with_kernel, running) in enumerate(growths)
        if growth > SLACK_BYTES or (out_of_memory and (running or growth > IDLE_FLOOR_BYTES))
    ]
    return [sandbox for _, _, sandbox in sorted(eligible, key=lambda item: (-item[0], item[1]))]


class OomArbiter:
    """A daemon thread that waits on the kernel's word about the service's parent group (out of
    memory, or nearly full) and makes the trajectory that grew most give memory back."""

    def __init__(
        self,
        memory: ServiceMemory | ThrottledServiceMemory,
        sandboxes: Callable[[], list],
        freeing: Callable[[], bool] = lambda: False,
    ):
        self._memory = memory
        self._sandboxes = sandboxes
        self._freeing = freeing  # closed sandboxes' files are being removed (`remover`)
        self._stop = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self.victims = 0  # how many times a trajectory was made to give memory back
        self._restores_waiting = (
            0  # restores whose copy the full group refused (see `restore_waiting`)
        )
        self._waiting_lock = threading.Lock()
        self.last_error: str | None = None  # the last failure while settling (kept for inspection)
        self._thread = threading.Thread(
            target=self._loop, name="codedance-oom-arbiter", daemon=True
        )
        self._thread.start()

    @contextlib.contextmanager
    def restore_waiting(self) -> Iterator[None]:
        """Held by a restore while the full group refuses its copy (ENOMEM, which wakes no one):
        meanwhile, while the group is charged past its margin (below it, the next try fits), it
        counts as out of memory, so the out-of-memory ranking applies (the largest grower may
        hold the very pages the restoring step freed)."""
        with self._waiting_lock:
            self._restores_waiting += 1
        os.eventfd_write(self._memory.event, 1)  # look now
        try:
            yield
        finally:
            with self._waiting_lock:
                self._restores_waiting -= 1

    def commit_takes_what_is_owed(
        self, committing, grown: int, page_tables: Callable[[], int], running: Iterable
    ) -> bool:
        """Whether committing the step of ``committing`` (which grew by ``grown``, and made
        ``page_tables()`` bytes of page tables, kernel memory the group's `held` leaves out; read
        only when something is owed) would take memory that
        another running step freed from its own committed state (it deleted committed files) and
        needs back if it is rolled back: the service would then hold more than ``memory_total``
        once those rollbacks are done. Memory a step frees counts as committed until that step
        commits (otherwise a neighbour commits what an honest failing step has freed, whose
        restore then finds no memory and loses the trajectory).
        Pinned by
        `tests/sandbox/test_charged_restores.py::test_a_neighbour_cannot_commit_what_a_failing_step_freed`."""
        owed = sum(other.memory_owed() for other in running if other is not committing)
        if owed <= 0:
            return False
        # page tables counted, never the rest of kernel memory: page tables filled what a
        # neighbour's rollback needed, and counting all of v1's kernel
        # memory let a step's negative dentries, cache, refuse every neighbour's commit
        tables = page_tables()
        return grown + tables > 0 and self._memory.held() + tables + owed > self._memory.limit

    def stop(self) -> None:
        os.eventfd_write(self._stop, 1)
        self._thread.join(timeout=5)
        self._memory.close()
        os.close(self._stop)

    def _loop(self) -> None:
        look_again = None
        while True:
            # the kernel says "out of memory" once per episode and "charged past the threshold"
            # only when crossing it: while either holds, look again now and then
            # poll, not select: a controller holding over 1,024 descriptors (a pool of a few
            # hundred sandboxes) would get a ValueError, and no arbiter
            # pinned by `tests/sandbox/test_memory_arbiter.py::`
            # `test_the_arbiter_runs_in_a_controller_that_holds_over_1024_descriptors`
            readable = _wait_for(
                [*self._memory.watched(), (self._stop, select.POLLIN)],
                None if look_again is None else time.monotonic() + look_again,
            )
            if self._stop in readable:
                return
            if readable:
                self._memory.drain()
            try:
                look_again = self._settle()
            except Exception as exc:  # noqa: BLE001 - e.g. a trajectory closed under it: look again soon
                self.last_error, look_again = f"{type(exc).__name__}: {exc}", NO_ONE_LOOK_S

    def _restore_past_its_state(self):
        """A trajectory whose waiting restore would leave it holding more than its committed
        state by over ``SLACK_BYTES`` (`Sandbox.restore_excess`), if any."""
        return next(
            (sandbox for sandbox in self._sandboxes() if sandbox.restore_excess() > SLACK_BYTES),
            None,
        )

    def _stopping(self) -> bool:
        return bool(wait_any((self._stop,), time.monotonic()))

    def _settle(self) -> float | None:
        """Act while the group is out of memory or nearly full (`rank_victims` says on whom);
        returns when to look again (None: at the kernel's next word)."""
        waiting_for, since, escalated = None, 0.0, False  # waiting_for: (victim, its run number)
        settled_by = 0.0  # how long to wait for an escalated victim to give everything back
        freeing_until = (
            time.monotonic() + FREEING_WAIT_S
        )  # how long to wait for closed sandboxes' files
        growth_then = 0
        while not self._stopping():
            charged_past, nearly_full = self._memory.fullness()
            # a restore the full group refused tries again within FULL_RETRY_S: once the group is
            # charged below the margin again, its next try fits (counting it longer stopped an
            # honest step in the moment between a victim's kill and that try)
            out_of_memory = self._memory.under_oom() or (
                self._restores_waiting > 0 and charged_past
            )
            if not out_of_memory and not nearly_full:
                return WATCH_S if charged_past else None  # cache or kernel memory: may be reclaimed
            if (
                waiting_for is not None
                and waiting_for[0].giving_back()
                and time.monotonic() < settled_by
            ):
                # the victim's processes were all killed: until its run has unwound and they have
                # exited, what they free is not free yet, and whoever ranks next would pay for it
                time.sleep(SETTLE_S)
                continue
            culprit = self._restore_past_its_state() if self._restores_waiting else None
            if culprit is not None and not (escalated and waiting_for == (culprit, culprit.runs)):
                # its rollback would hold more than its committed state: it pays, whatever the
                # ranking by growth says (its own growth can net out to nothing)
                culprit.yield_memory(idle_floor(True), whole_trajectory=True)
                self.victims += 1
                waiting_for, since, escalated = (culprit, culprit.runs), time.monotonic(), True
                settled_by = time.monotonic() + ESCALATE_S
                time.sleep(SETTLE_S)
                continue
            if self._freeing() and time.monotonic() < freeing_until:
                # closed sandboxes' files are on their way back: no one pays for them
                time.sleep(SETTLE_S)
                continue
            growths = {}  # sandbox -> (growth, growth with kernel memory, running)
            for sandbox in self._sandboxes():
                running = sandbox.running
                if not running:
                    sandbox.settle_idle_mark()  # a replaced holder's exit is no credit
                measured = sandbox.memory_growths()
                if measured is not None:
                    growths[sandbox] = (*measured, running)
            idle_past, victim = idle_floor(out_of_memory), None
            ranked = rank_victims(
                [(sandbox, *value) for sandbox, value in growths.items()],
                out_of_memory=out_of_memory,
            )
            for candidate in ranked:
                if waiting_for == (
                    candidate,
                    candidate.runs,
                ):  # stopped or busy already: wait for it
                    victim = candidate
                    break
                answer = candidate.yield_memory(idle_past)
                if answer != "no":  # stopped, or a moment away from being stoppable: wait for it
                    self.victims += answer == "stopped"
                    victim, waiting_for, since, escalated = (
                        candidate,
                        (candidate, candidate.runs),
                        time.monotonic(),
                        False,
                    )
                    growth_then = growths[candidate][0]
                    break
            if victim is None:
                return NO_ONE_LOOK_S
            growth = growths[victim][0]
            if (
                not escalated
                and time.monotonic() - since > ESCALATE_S
                and growth > SLACK_BYTES
                and growth > growth_then * 0.9
            ):  # it kept its growth (kernel memory left out)
                escalated = victim.yield_memory(idle_past, whole_trajectory=True) == "stopped"
                settled_by = time.monotonic() + ESCALATE_S
            time.sleep(SETTLE_S)
        return None
