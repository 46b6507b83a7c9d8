"""One trajectory's memory as the OOM arbiter ranks it (``arbiter``): its growth since its last
committed step answered.

The mark is the trajectory's (unreclaimable bytes, kernel bytes) when its last committed step
answered, lowered to what it holds after each run and while idle (a replaced holder exits after
the mark): growth since counts, idle growth and growth after answering included (only a patched
runtime does either). `Sandbox` moves the mark at a step's answer (`answered`), puts it back if
that step is not committed (`not_committed`), and keeps it at the commit (`committed`); this class
holds no lock and kills nothing: `Sandbox` calls it under its own locks and acts on its answers.
"""

from __future__ import annotations

import contextlib

from codedance.sandbox import procs
from codedance.sandbox.cgroups import TrajectoryCgroup
from codedance.sandbox.files import WorkdirSnapshot
from codedance.sandbox.memory.cgroup_memory import MemoryMeasure


class TrajectoryMemory:
    """The marks and measures of one trajectory's memory cgroup (none: nothing is measured)."""

    def __init__(self) -> None:
        self.cgroup: TrajectoryCgroup | None = None  # set once the trajectory's cgroup is made
        self.mark: MemoryMeasure | None = None
        self.mark_before_answer: MemoryMeasure | None = (
            None  # put back if the answered step is not committed
        )
        self.restore_excess = 0  # while a restore waits for memory: see `measure_restore_excess`
        self.victim = False  # the arbiter stopped this run's step
        self.escalated = False  # ... and then killed its holder too

    def set_mark(self) -> None:
        if self.cgroup is not None:
            self.mark = self.cgroup.memory_measure()

    def lower_mark(self) -> None:
        """After each run, and whenever the trajectory is idle (`Sandbox._settle_mark`), the mark
        is at most what the trajectory holds: memory it gave up or that a replaced holder held
        until it exited is no credit to grow by later.
        Lowering never forgives growth: what is counted afterwards is at least what was before."""
        if self.cgroup is not None and self.mark is not None:
            now = self.cgroup.memory_measure()
            if now is not None:
                self.mark = self.mark.lowered_to(now)

    def answered(self) -> None:
        """The step answered: its growth so far is what it answered with (the mark moves here)."""
        self.mark_before_answer = self.mark
        self.set_mark()

    def committed(self) -> None:
        self.mark_before_answer = None

    def not_committed(self) -> None:
        """An answered step failed (refused): the mark goes back to before its answer."""
        if self.mark_before_answer is not None:
            self.mark, self.mark_before_answer = self.mark_before_answer, None

    def growths(self) -> tuple[int, int] | None:
        """(growth, growth with kernel memory) since the mark. Growth: the unreclaimable memory
        gained (anonymous and tmpfs files, each kind counted alone: files deleted never offset what
        a holder allocates; kernel memory left out); the second adds the kernel memory gained, when
        positive (inodes and dentries, page tables, buffers, some of it cache the kernel can
        reclaim). None without a memory cgroup."""
        since = self._since(self.mark)
        return None if since is None else since[:2]

    def owed(self) -> int:
        """Unreclaimable memory held less than at the mark (the running step deleted committed
        files): what its rollback would need back beyond what killing the step frees (0 without
        a memory cgroup)."""
        # an answered step whose commit is refused is rolled back too: until then it owes what
        # it freed before its answer moved the mark
        since = self._since(self.mark_before_answer or self.mark)
        return 0 if since is None else since[2]

    def _since(self, mark: MemoryMeasure | None) -> tuple[int, int, int] | None:
        """`MemoryMeasure.growth_since` ``mark``."""
        if self.cgroup is None or mark is None:
            return None
        now = self.cgroup.memory_measure(kept_open=False)
        return None if now is None else now.growth_since(mark)

    def step_growth(self) -> int:
        """What the answered step grew (its mark at the answer less the one before; kernel
        memory left out: most of it is cache, such as negative dentries)."""
        if self.mark is None or self.mark_before_answer is None:
            return 0
        return self.mark.growth_since(self.mark_before_answer)[0]

    @staticmethod
    def page_table_growth(step_pid: int | None, holder_pid: int | None) -> int:
        """The page tables the answered step's process holds beyond its holder's, twice (its
        spare, forked from it, copies them): kernel memory that no reclaim gives back, which a
        step made ~450 MiB of and committed into what a neighbour's rollback needed; v1 counts it
        with the rest of kernel memory, most of it cache."""
        step, holder = procs.page_table_bytes(step_pid), procs.page_table_bytes(holder_pid)
        return 2 * max(0, step - holder) if step is not None and holder is not None else 0

    def measure_restore_excess(
        self, holder_pid: int | None, files: WorkdirSnapshot, deadline: float
    ) -> None:
        """(The restore's thread, when the full service first refuses a write.) An honest
        rollback needs back what its step freed of the committed state, no more: held below the
        mark by as much as the restore still needs. Memory its step took in a form that outlives
        the step's processes (a memfd or unlinked file its holder holds, or the holder itself
        taking what the step freed, as shared memory) nets out against deleted files in every
        measure by kind, and shows here (otherwise a neighbour's honest step is stopped
        for it); the arbiter makes such a trajectory pay first (`arbiter`)."""
        with contextlib.suppress(
            Exception
        ):  # (a failure here only leaves the arbiter's ranking as it was)
            measure = (
                self.cgroup.memory_measure(kept_open=False) if self.cgroup is not None else None
            )
            if measure is None or self.mark is None:
                return
            # the trajectory's only process now is its holder (the step and what it left are dead)
            held_open = procs.open_inodes(holder_pid, files.device)
            needed = files.bytes_to_restore(deadline, frozenset(held_open))
            self.restore_excess = needed - max(0, self.mark.held - measure.held)
