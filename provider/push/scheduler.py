"""The BE's one scheduler of Spark task slots among its running scans: whose driver may
start a Spark job now, and whose task gives its slot up after its turn.

Why a scheduler of our own on top of Spark's FAIR pools: Spark's FAIR scheduler gives a free
slot to a pool that has no task running, and breaks ties between such pools by their
names, not by who waited longest; a job queued by the scan that just handed a slot over
would take it straight back. So the BE keeps the order itself:

* **Turns.** No more than one scan has jobs waiting for a slot at a time. The scans whose
  drivers would start a job take turns in the order they came; a scan already waiting
  starts no second job while another is in line (``turn``).
* **Hand-over.** A task of the arrow engine, its turn on its slot over, asks for its next
  split (``NEXT_SPLIT``); while another scan's job waits for a slot, it is told to stop and
  its slot goes to that scan (``hands_over``). The sql engine's tasks end at every split.
* **A bound.** A job waits from its start until its task first asks for a split
  (``task_asked``); one that has waited ``WAIT_COUNTS_S`` (a cluster without free
  executors, a task that cannot reach the BE) no longer holds the others back, and the
  scans share slots as Spark alone would.

It also keeps the BE's own read slots (``scan_local_read_slots``): how many of the arrow
engine's readers the BE runs in its own process at once, for all scans. A scan's driver
takes one, when one is free, before it asks for a Spark job (``take_own_slot``); its reader
gives it back when the scan has no split left for it or it yields (``give_own_slot``).
Such a reader costs no Spark job, task, Python worker or push connection: on a warm scan of
TPC-H lineitem about a third less CPU per row (bench/RESULTS.md, issue 39). A scan that
finds them all taken runs on Spark's slots as before, with the turns above.

The scans are the BE's push sinks (provider/push/sink.py): the driver of a scan asks
``turn`` and reports its unfinished jobs, the listener reports a task's first ask and asks
``hands_over``. One lock guards all of it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

#: How long a scan's job waiting for a Spark slot holds the other scans back.
WAIT_COUNTS_S = 30.0


class Scan(Protocol):
    """What the scheduler needs of a scan: whether it has stopped (a stopped scan's jobs
    wait for nothing)."""

    @property
    def stopped(self) -> bool: ...


@dataclass
class _Waiting:
    jobs: int = 0        # started by the driver, their task not asked yet
    since: float = 0.0   # when the first of them started (the clock's time)


class SlotScheduler:
    def __init__(self, clock: Callable[[], float] = time.monotonic, wait_counts_s: float = WAIT_COUNTS_S,
                 own_slots: int = 0):
        self.own_slots = own_slots
        self._own_taken = 0
        self._clock = clock
        self._wait_counts_s = wait_counts_s
        self._lock = threading.Lock()
        self._scans: dict[Scan, _Waiting] = {}
        self._line: deque[Scan] = deque()  # scans whose driver wants a job and waits for its turn

    # ---- scans come and go ----
    def add(self, scan: Scan) -> None:
        with self._lock:
            self._scans.setdefault(scan, _Waiting())

    def remove(self, scan: Scan) -> None:
        with self._lock:
            self._scans.pop(scan, None)
            self._leave_line(scan)

    # ---- a scan's driver ----
    def turn(self, scan: Scan, wants: bool) -> bool:
        """Whether the driver of ``scan``, which ``wants`` to start a Spark job, starts one now.
        True counts the job as waiting for a slot until its task asks (``task_asked``). False:
        the scan is in line (or leaves it, when it wants none) and its driver asks again."""
        with self._lock:
            if not wants:
                self._leave_line(scan)
                return False
            live = [s for s in self._line if s in self._scans and not s.stopped]
            if len(live) != len(self._line):
                self._line = deque(live)
            others_in_line = any(s is not scan for s in self._line)
            first_in_line = not self._line or self._line[0] is scan
            if (self._another_waits(scan) or not first_in_line
                    or (self._waits(scan) and others_in_line)):
                if scan not in self._line:
                    self._line.append(scan)
                return False
            self._leave_line(scan)
            waiting = self._scans.setdefault(scan, _Waiting())
            if waiting.jobs == 0:
                waiting.since = self._clock()
            waiting.jobs += 1
            return True

    def jobs_unfinished(self, scan: Scan, jobs: int) -> None:
        """The driver of ``scan`` has ``jobs`` jobs unfinished: no more than those can wait (a
        task that failed before it asked, or a retried one that asked twice, leaves no count
        behind)."""
        with self._lock:
            waiting = self._scans.get(scan)
            if waiting is not None:
                waiting.jobs = min(waiting.jobs, jobs)

    # ---- the BE's own readers ----
    def take_own_slot(self) -> bool:
        """Whether a reader may run in the BE's own process now (a slot is taken: give it back)."""
        with self._lock:
            if self._own_taken >= self.own_slots:
                return False
            self._own_taken += 1
            return True

    def give_own_slot(self) -> None:
        with self._lock:
            self._own_taken = max(0, self._own_taken - 1)

    @property
    def own_slots_taken(self) -> int:
        with self._lock:
            return self._own_taken

    # ---- the listener ----
    def task_asked(self, scan: Scan) -> None:
        """A task of ``scan`` asked for its first split: its job waits no more."""
        with self._lock:
            waiting = self._scans.get(scan)
            if waiting is not None:
                waiting.jobs = max(0, waiting.jobs - 1)

    def hands_over(self, scan: Scan) -> bool:
        """Whether a task of ``scan`` whose turn is over gives its slot up: another running
        scan has a job waiting for a slot."""
        with self._lock:
            return self._another_waits(scan)

    # ---- what tests and operations may look at ----
    def waiting_jobs(self, scan: Scan) -> int:
        """Jobs of ``scan`` started and waiting for a slot (counted ones only)."""
        with self._lock:
            waiting = self._scans.get(scan)
            return waiting.jobs if waiting is not None else 0

    # ---- under the lock ----
    def _waits(self, scan: Scan) -> bool:
        waiting = self._scans.get(scan)
        return (waiting is not None and waiting.jobs > 0 and not scan.stopped
                and self._clock() - waiting.since < self._wait_counts_s)

    def _another_waits(self, scan: Scan) -> bool:
        return any(self._waits(s) for s in self._scans if s is not scan)

    def _leave_line(self, scan: Scan) -> None:
        try:
            self._line.remove(scan)
        except ValueError:
            pass
