"""The BE's one scheduler: every decision of when a split is read, by whom and where.

* **Which split** a reader gets (``split_for``): the first one no reader holds (the scan's
  split board, provider/splits.py, keeps their states); a task whose turn on its slot is over
  gets none while another scan waits for a slot (the hand-over, below).
* **How many readers** a scan runs, and when another starts (``ScanReaders``: one until its
  first rows arrive, then ``tasks_per_scanner``; a new one only when a split is left for it
  and, once a split has yielded, the queue has room).
* **Where** a reader runs (``next_reader``): in one of the BE's own read slots when the scan's
  files are large enough and a slot is free, else as a Spark job when this scan's turn comes;
  before Spark's first task of the scan connects, the BE reads the arrow engine's splits
  itself (``reads_before_spark``).
* **Turns** among the scans for Spark's task slots, **hand-over** of a slot after a task's
  turn (``SLOT_TURN_S``), and a bound on how long a waiting job holds the others back.
* **Yields**: when a reader that finds no room in its scan's queue gives its slot back
  (``YieldRule``, ``scan_yield_after_s``); the queue waits as long as the rule says and
  decides no time of its own.

The push transport (provider/push/) carries the frames of these decisions and decides none;
SparkScan (provider/spark_scan.py) runs the readers it is told to start.

Why a scheduler of our own on top of Spark's FAIR pools: Spark's FAIR scheduler gives a free
slot to a pool that has no task running, and breaks ties between such pools by their
names, not by who waited longest; a job queued by the scan that just handed a slot over
would take it straight back. So the BE keeps the order itself:

* **Turns.** No more than one scan has jobs waiting for a slot at a time. The scans whose
  drivers would start a job take turns in the order they came; a scan already waiting
  starts no second job while another is in line (``turn``).
* **Hand-over.** A task of the arrow engine, its turn on its slot over, asks for its next
  split (``Ask.TURN_OVER``); while another scan's job waits for a slot, it is told to stop
  and its slot goes to that scan. The sql engine's tasks end at every split.
* **A bound.** A job waits from its start until its task first asks for a split
  (``task_asked``); one that has waited ``WAIT_COUNTS_S`` (a cluster without free
  executors, a task that cannot reach the BE) no longer holds the others back, and the
  scans share slots as Spark alone would.

It also keeps the BE's own read slots (``scan_local_read_slots``, the machine's cores by
default): how many of the arrow engine's readers the BE runs in its own process at once, for
all scans. A scan takes one, when one is free, before it asks for a Spark job; its reader
gives it back when the scan has no split left for it or it yields. Such a reader costs no
Spark job, task, Python worker or push connection: on a warm scan of TPC-H lineitem about a
third less CPU per row (bench/RESULTS.md, issue 39). A scan that finds them all taken runs
on Spark's slots as before, with the turns above.

One lock guards the slots and turns; a scan's split states are its board's.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from starscan.core.errors import ScanFailed, StarscanError
from starscan.provider.result_queue import ResultQueue
from starscan.provider.spark_failures import lost_task
from starscan.provider.splits import SplitBoard

#: How long a scan's job waiting for a Spark slot holds the other scans back.
WAIT_COUNTS_S = 30.0
#: A task's turn on its Spark slot: after it, the task asks with ``Ask.TURN_OVER`` and hands
#: its slot over at the next split's end when another scan waits. Each hand-over costs a
#: Spark job (~50-80 ms of a slot, and JVM work); a turn of half a second keeps that under
#: about a tenth of a slot while a waiting scan waits at most a turn and a split.
SLOT_TURN_S = 0.5
#: The smallest mean file size of a scan whose readers run in the BE's own read slots. A
#: large file's time is pyarrow's decoding, which does not hold the interpreter lock; a small
#: file's is Python around it (opening it, its footer, its batches), which does: two readers
#: in the BE's one process then read half as fast as two Spark tasks in two processes
#: (bench/small_files.py: 50,000 files of 10 rows, 0.43x pyarrow.dataset in the BE's slots).
OWN_READ_MIN_FILE_BYTES = 1 << 20
#: Times one split's reader may be lost (a Python worker that crashed or was killed, an
#: executor lost) before the scan fails: as ``spark.task.maxFailures`` (4 attempts), which
#: only a cluster's Spark applies to its tasks.
MAX_SPLIT_LOSSES = 3


@dataclass(frozen=True)
class YieldRule:
    """When a reader that finds no room in its scan's queue gives its slot back: the split
    yields (it is read again later from where it stopped) after ``after_s`` seconds of
    waiting (``scan_yield_after_s``). A batch of a later split than the one being handed out
    (an ordered scan) waits for the splits before it, not for this reader's own slowness:
    its wait counts only while the scan's reader takes nothing."""

    after_s: float

    def deadline(self, waited_from: float, last_take: float, held: bool) -> float:
        """When a producer waiting since ``waited_from`` gives up (the reader last took at
        ``last_take``; ``held``: the batch is of a later split)."""
        return (max(waited_from, last_take) if held else waited_from) + self.after_s

    @classmethod
    def of(cls, after_s: float | None) -> YieldRule | None:
        """The rule for ``scan_yield_after_s`` (None: a reader never yields, as the warm-up's)."""
        return None if after_s is None else cls(after_s)


class Ask(Enum):
    """How a reader that names no split asks for one."""

    FIRST = "first"          # a task's first ask: its job waits for a slot no more
    IN_TURN = "in turn"      # a task still in its turn on its slot: never handed over
    TURN_OVER = "turn over"  # a task whose turn is over: its slot goes to a waiting scan


class Start(Enum):
    """Where the next reader of a scan runs."""

    OWN_SLOT = "own slot"    # in the BE's own process, in one of its read slots
    SPARK = "spark"          # as a Spark job of one task


def own_slots_for(configured: int | None) -> int:
    """The BE's own read slots: ``scan_local_read_slots``, or the machine's cores."""
    return (os.cpu_count() or 1) if configured is None else configured


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

    # ---- a scan's readers ----
    def next_reader(self, board: SplitBoard, wants: bool, own_reads: bool, holds_own_slot: bool,
                    own_readers: int, spark_started: bool) -> Start | None:
        """Where the scan whose driver ``wants`` another reader starts it now, if anywhere: in
        an own slot (``holds_own_slot``: one its driver took already) when its readers may run
        there (``own_reads``), else as a Spark job when its turn comes. While Spark starts, a
        scan whose own reader runs waits for no Spark job."""
        if wants and own_reads and (holds_own_slot or self.take_own_slot()):
            return Start.OWN_SLOT
        if self.turn(board, wants and (not own_readers or spark_started)):
            return Start.SPARK
        return None

    def opening(self, readers: ScanReaders, may_read_first: bool) -> tuple[bool, bool]:
        """A scan's start: whether its first reader has one of the BE's own slots (taken
        now, when its readers may run there and one is free: then no reader waits for Spark,
        and none before it is needed), and else whether the BE reads its splits itself until
        Spark's first task connects (``may_read_first``: the arrow engine's scan, with
        ``scan_local_reads`` on; ``reads_before_spark``)."""
        own_slot = readers.own_reads and self.take_own_slot()
        return own_slot, may_read_first and not own_slot

    @staticmethod
    def reads_before_spark(board: SplitBoard, own_readers: int) -> bool:
        """Whether the BE's reader of an arrow-engine scan before its Spark tasks goes on to
        another split: until a Spark task of the scan has connected or a reader of the scan
        runs in one of the BE's own slots. A scan's first rows then wait for no Spark slot
        (with more scanners than slots, or Spark's workers still starting, the first get_next
        would otherwise wait seconds, beyond a Flink reader's 1 s timeout)."""
        return not (board.connections() or own_readers)

    def split_for(self, board: SplitBoard, ask: Ask) -> int | None:
        """The split for a reader that names none (a task of the arrow engine, or the BE's
        own reader): None when none is left, the scan stopped, or the reader's turn on its
        slot is over and another scan waits for a slot (its slot goes there)."""
        if ask is Ask.FIRST:
            self.task_asked(board)
        if ask is Ask.TURN_OVER and self.hands_over(board):
            return None
        return board.claim()

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


# ---- how a scan's readers go ---------------------------------------------------------------
class ScanReaders:
    """How a scan's readers go, for its driver (SparkScan): ``workers`` at most at once."""

    splits: int   # the splits the board counts
    workers: int  # readers at once, at most
    own_reads = False  # whether its readers may run in the BE's own slots
    lost = 0      # readers lost (their Spark task died without an error of its own), the scan read on

    def allowed(self, rows_arrived: bool) -> int:
        """Readers at once now: one until the first rows arrive or a reader ends without rows
        (scanners opened together get their first replies sooner when each starts with one)."""
        return self.workers if rows_arrived else 1

    def can_start(self, queue: ResultQueue, board: SplitBoard) -> bool:
        """Whether another reader would have something to read now."""
        raise NotImplementedError

    def take(self) -> int:
        """The partition of the next reader."""
        raise NotImplementedError

    def finished(self, partition: int, exc: BaseException | None, board: SplitBoard,
                 failure: Callable[..., StarscanError]) -> str | None:
        """A reader ended (``exc``: how it failed): raise what the scan fails with, if anything;
        the reason, when the reader was lost and the scan reads on without it."""
        raise NotImplementedError

    def all_read(self, board: SplitBoard) -> bool:
        """With no reader running: whether the scan is read (raise what is wrong if it cannot be)."""
        raise NotImplementedError


class SqlSplitReaders(ScanReaders):
    """The ``sql`` engine: one job per split (a partition of Spark's own scan), in order. A
    split that yielded (its reader stopped reading) goes again, when the queue has room:
    before any later split in an ordered scan."""

    def __init__(self, splits: int, workers: int, ordered: bool):
        self.splits, self.workers, self.ordered = splits, workers, ordered
        self.pending = deque(range(splits))
        self.yielded: set[int] = set()

    def can_start(self, queue: ResultQueue, board: SplitBoard) -> bool:
        return bool(self.pending) and not (self.pending[0] in self.yielded and queue.ready_bytes > queue.max_bytes // 2)

    def take(self) -> int:
        return self.pending.popleft()

    def finished(self, partition: int, exc: BaseException | None, board: SplitBoard,
                 failure: Callable[..., StarscanError]) -> str | None:
        state = board.state(partition)
        if exc is not None:
            # Not run again here, unlike the arrow engine's readers: Spark retries a task
            # whose worker died (spark.task.maxFailures; local Spark as local[N,F],
            # starscan.spark.session), and the retry reads the split on past the rows that
            # arrived. A job that fails has failed that many times. (Running the job again
            # here was tried: when one job failed, Spark cancelled a sibling job's stage,
            # and the sibling's task, fed by the JVM, ended its split short without an error.)
            raise failure(exc, board, state.failure)
        board.job_succeeded(partition)  # the split ends with its job, not at its task's word
        if state.ended:
            return None
        if board.error is not None:
            raise board.error
        if state.yielded:
            self.yielded.add(partition)
            if self.ordered:
                self.pending.appendleft(partition)  # it goes on before any later split starts
            else:
                self.pending.append(partition)
            return None
        raise ScanFailed(f"Spark finished split {partition} of the scan, but its rows did not all reach the BE")

    def all_read(self, board: SplitBoard) -> bool:
        return not self.pending


class ArrowReaders(ScanReaders):
    """The ``arrow`` engine: ``workers`` readers, each reading the splits the board assigns
    it until none is left (a Spark job of one task over the RDD's partitions, or a reader in
    one of the BE's own slots). A reader whose split yielded ends; another starts when a
    split is unclaimed and (once a split has yielded) the queue has room: a reader started
    into a full queue would only hold a slot and yield."""

    def __init__(self, splits: int, workers: int, own_reads: bool = True):
        self.splits, self.workers, self.own_reads = splits, workers, own_reads
        self.free = deque(range(workers))
        #: Why a reader's failure lost it (None: the failure is the scan's): a task whose
        #: Python worker died; the scan adds a JVM that died (spark_failures.jvm_gone).
        self.lost_reason: Callable[[BaseException], str | None] = lost_task
        #: Why a reader's failure came with Spark's JVM dying under it (None: it did not).
        #: Then what its task reported on the way (its Python worker losing the JVM in the
        #: middle of a split) is not the scan's failure either: the split is read again.
        self.jvm_died: Callable[[BaseException], str | None] = lambda exc: None

    @classmethod
    def for_splits(cls, splits: list, workers: int) -> ArrowReaders:
        """The readers of these splits (ArrowSplit): in the BE's own slots only when their
        files are ``OWN_READ_MIN_FILE_BYTES`` on average or larger."""
        files = sum(len(split.parts) for split in splits)
        own_reads = bool(files) and sum(part.size for split in splits for part in split.parts) \
            >= OWN_READ_MIN_FILE_BYTES * files
        return cls(len(splits), workers, own_reads)

    def can_start(self, queue: ResultQueue, board: SplitBoard) -> bool:
        return bool(self.free) and board.unclaimed() and not (board.yields and queue.ready_bytes > queue.max_bytes // 2)

    def take(self) -> int:
        return self.free.popleft()

    def finished(self, partition: int, exc: BaseException | None, board: SplitBoard,
                 failure: Callable[..., StarscanError]) -> str | None:
        """A reader whose Spark task died without an error of its own (its Python worker
        crashed or was killed, its executor was lost: local Spark retries no task) is a lost
        reader, not a failed scan: the split it left half-read is free again, and the next
        reader reads it on from where its rows stopped (its attempt skips what arrived). The
        scan fails when one split was lost ``MAX_SPLIT_LOSSES`` times, or its readers were
        lost more than that many times each, or a task raised an error of its own."""
        self.free.append(partition)
        if exc is not None:
            jvm = self.jvm_died(exc)
            reason = jvm or self.lost_reason(exc)
            reported = None if jvm else board.failure()
            if (reason is not None and reported is None and board.error is None
                    and board.most_losses() < MAX_SPLIT_LOSSES and self.lost < MAX_SPLIT_LOSSES * self.workers):
                self.lost += 1
                return reason
            raise failure(exc, board, board.failure())
        if board.error is not None:
            raise board.error
        return None

    def all_read(self, board: SplitBoard) -> bool:
        if board.all_ended():
            return True
        if board.error is not None:
            raise board.error
        lost = board.lost()
        if lost:
            raise ScanFailed(f"Spark finished the scan's tasks, but the rows of split {lost[0]} did not all reach the BE")
        return False
