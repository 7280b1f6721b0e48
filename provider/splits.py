"""One scan's splits and every reading of them (``SplitBoard``): which split is unclaimed,
claimed, read by a Spark task or by the BE itself, yielded or ended, and how many of its rows
reached the scanner's queue.

A reader that names no split gets one from the board (``claim``): the first split that has
not ended and that no reader holds. The ``arrow`` engine's readers read split after split
that way; the ``sql`` engine's tasks read their own Spark partition.

Every reading of a split is an ``Attempt``. A split read again (Spark retried a failed task,
the split yielded its slot, a task took on what the BE's own reader left) re-reads
deterministically, so the attempt drops the rows delivered before and passes on only the
rest: a retry neither loses nor repeats a row. A newer attempt supersedes an older one still
running (a task Spark gave up on), whose batches are then dropped. A reader that stops
reading makes the split yield when the queue had no room for as long as the scheduler's
``YieldRule`` allows.

The push transport (provider/push/) and the BE's own readers (provider/spark_scan.py) both
read through attempts; the BE's scheduler (provider/scheduler.py) asks the board what is
left to read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

import pyarrow as pa

from starscan.core.errors import MemLimitExceeded, ScanFailed, StarscanError
from starscan.provider.result_queue import PUT_TIMED_OUT, ResultQueue, RoomWait


@dataclass
class SplitState:
    delivered: int = 0          # rows of this split in the scanner's queue
    ended: bool = False
    yielded: bool = False       # the split gave its reader's slot back
    generation: int = 0         # bumped by every new attempt
    failure: str | None = None  # what a task reported when it failed
    losses: int = 0             # attempts that left it without its end, a yield or a report (lost)
    # Its task said it sent every row, and the split waits for its Spark job's success to end
    # (a board that ``ends_with_jobs``: the sql engine).
    awaiting_job: bool = False


class Offer(Enum):
    """What a reader is to do after offering a batch."""

    GO_ON = "go on"
    YIELD = "yield"   # the reader stopped reading: give the slot back, the split goes on later
    STOP = "stop"     # the scan stopped or failed
    DROPPED = "dropped"  # this attempt no longer counts (superseded, yielded or stopped before)


class Attempt:
    """One reading of a split: a task's connection or the BE's own reader."""

    __slots__ = ("board", "split", "generation", "skip", "holder", "sent")

    def __init__(self, board: SplitBoard, split: int, generation: int, skip: int, holder: object):
        self.board, self.split, self.generation, self.skip, self.holder = board, split, generation, skip, holder
        self.sent = 0  # rows the reader offered in all (the push transport checks its task's count with it)

    @property
    def counts(self) -> bool:
        """Whether this attempt's batches still count (not superseded, yielded or stopped)."""
        state = self.board.splits[self.split]
        return state.generation == self.generation and not state.yielded and not self.board.stopped

    def offer(self, batch: pa.RecordBatch, ipc: pa.Buffer | None = None, serialize: bool = False) -> Offer:
        """A batch of the split, in order: what an earlier attempt delivered is dropped, the
        rest goes to the queue. ``ipc``: the batch's IPC body, when it came that way;
        ``serialize``: make one (the queue then holds, and counts, the batch's own bytes, not
        the decoded run it was cut from, and a reply of this one batch sends them as they are)."""
        board = self.board
        self.sent += batch.num_rows
        with board._split_locks[self.split]:
            if not self.counts:
                return Offer.DROPPED
            if self.skip:
                drop = min(self.skip, batch.num_rows)
                self.skip -= drop
                batch = batch.slice(drop)
                ipc = None  # no longer the batch that arrived
                if batch.num_rows == 0:
                    return Offer.GO_ON
            if serialize and ipc is None:
                ipc = batch.serialize()
                batch = pa.ipc.read_record_batch(ipc, batch.schema)
            return board._deliver(self.split, batch, ipc)

    def end(self, rows_sent: int | None = None) -> bool:
        """The reader read the split to its end (``rows_sent``: as the reader counted them,
        checked against what arrived, when given). True when the split ended with it."""
        board = self.board
        with board._split_locks[self.split], board._cond:
            if not self.counts:
                return False
            if rows_sent is not None and rows_sent != self.sent:
                board._fail_locked(ScanFailed(f"split {self.split} ended with {rows_sent} rows sent but "
                                              f"{self.sent} received"))
                return False
            if board.ends_with_jobs:
                board.splits[self.split].awaiting_job = True
                board._cond.notify_all()
                return True
            board.splits[self.split].ended = True
            board.queue.end_split(self.split)
            board._cond.notify_all()
            return True

    def failed(self, reason: str) -> None:
        """The reader failed (a task's report): the driver learns why from the board."""
        with self.board._cond:
            self.board.splits[self.split].failure = reason
            self.board._cond.notify_all()

    def leave(self) -> None:
        """The reader is gone (ended, stopped, failed or lost)."""
        board = self.board
        with board._cond:
            if board._holders.get(self.split) is self.holder:
                del board._holders[self.split]
            board._cond.notify_all()


class SplitBoard:
    """One scan's splits, what its readers claim and deliver, and what its driver asks."""

    def __init__(self, queue: ResultQueue, splits: int, yield_rule: RoomWait | None, ends_with_jobs: bool = False):
        self.queue = queue
        self.yield_rule = yield_rule  # the scheduler's YieldRule (None: never yield)
        # The sql engine's tasks are fed their rows by Spark's JVM, and a task whose JVM died
        # under it (an executor lost) sees the end of its input as the end of its split: it
        # ends the split short, without an error. There a split ends when its Spark job
        # succeeded (``job_succeeded``), not at its task's word; a task Spark runs again
        # meanwhile reads the split on past the rows that arrived.
        self.ends_with_jobs = ends_with_jobs
        self.splits = [SplitState() for _ in range(splits)]
        self._cond = threading.Condition()
        self._holders: dict[int, object] = {}  # split -> the reader reading it now
        self._split_locks = [threading.Lock() for _ in range(splits)]
        self._claimed: set[int] = set()  # handed to a reader (claim) that has not begun it yet
        self._local: set[int] = set()    # read by the BE itself
        self.yields = 0  # times a split gave its reader's slot back (the reader stopped reading)
        self.stopped = False
        self.error: StarscanError | None = None

    # ---- the driver's view ----
    def job_succeeded(self, split: int) -> None:
        """The split's Spark job succeeded (``ends_with_jobs``): a split whose task sent its
        end ends now."""
        with self._split_locks[split], self._cond:
            state = self.splits[split]
            if state.awaiting_job and not state.ended:
                state.awaiting_job = False
                state.ended = True
                self.queue.end_split(split)
                self._cond.notify_all()

    def state(self, split: int) -> SplitState:
        with self._cond:
            return self.splits[split]

    def all_ended(self) -> bool:
        with self._cond:
            return all(s.ended for s in self.splits)

    def _free(self, number: int, split: SplitState) -> bool:
        return (not split.ended and number not in self._holders and number not in self._claimed
                and number not in self._local)

    def claim(self) -> int | None:
        """The split for a reader that names none: the first one that has not ended and that
        no reader holds (the lowest first, a yielded one again first, so the split an ordered
        queue hands out is read before the ones it holds); None when there is none."""
        with self._cond:
            if self.stopped:
                return None
            for number, split in enumerate(self.splits):
                if self._free(number, split):
                    self._claimed.add(number)
                    return number
            return None

    def connections(self) -> int:
        """Spark tasks reading a split now."""
        with self._cond:
            return sum(1 for n in self._holders if n not in self._local)

    def unclaimed(self) -> bool:
        """Whether a split is left that no reader holds (a new reader would get one)."""
        with self._cond:
            return any(self._free(n, s) for n, s in enumerate(self.splits))

    def lost(self) -> list[int]:
        """Splits a reader began and left without their end, a yield or a failure report:
        their rows did not all arrive (checked when no reader runs)."""
        with self._cond:
            return [n for n, s in enumerate(self.splits)
                    if s.generation and s.failure is None and self._free(n, s) and not s.yielded]

    def most_losses(self) -> int:
        """The most times one split's reader was lost (the split read again each time)."""
        with self._cond:
            return max((s.losses for s in self.splits), default=0)

    def total_losses(self) -> int:
        """Readers lost in all: attempts that left a split half-read without a word, each read
        on by a later attempt (the scan's next reader, or Spark's retry of the task)."""
        with self._cond:
            return sum(s.losses for s in self.splits)

    def unended(self) -> list[int]:
        """Splits a reader began that have not ended (being read, or left by a task that died)."""
        with self._cond:
            return [n for n, s in enumerate(self.splits) if s.generation and not s.ended and not s.yielded]

    def failure(self) -> str | None:
        """What a task reported when it failed, if one did."""
        with self._cond:
            return next((s.failure for s in self.splits if s.failure is not None), None)

    def stop(self) -> list[object]:
        """Stop every reader: later attempts are refused. Returns the holders reading now
        (the push transport tells its connections)."""
        with self._cond:
            self.stopped = True
            return list(self._holders.values())

    # ---- a reader ----
    def begin(self, split: int, holder: object, local: bool = False) -> tuple[Attempt | None, object | None]:
        """A reader (``holder``: its connection, or the BE's own reader with ``local``) begins
        ``split``: the attempt, or None when the scan stopped or the split ended; and the
        reader it supersedes, if one still holds the split (to be told to stop)."""
        with self._split_locks[split], self._cond:
            self._claimed.discard(split)
            state = self.splits[split]
            if self.stopped or state.ended:
                return None, None
            superseded = self._holders.get(split)
            if state.generation and not state.yielded and state.failure is None:
                # The attempt before left it half-read without a word (a lost reader), or
                # holds it still: a task Spark runs again whose first attempt's connection
                # is not seen closed yet.
                state.losses += 1
            state.generation += 1
            state.yielded = False
            state.awaiting_job = False  # this attempt's end is the one that counts
            state.failure = None  # an earlier attempt's report; this attempt may yet succeed
            self._holders[split] = holder
            if local:
                self._local.add(split)
            return Attempt(self, split, state.generation, state.delivered, holder), superseded

    def read_here(self, split: int, batches: Iterator[pa.RecordBatch],
                  failure: Callable[[Exception], StarscanError], serialize: bool = True) -> bool:
        """Read a split (from ``claim``) in the BE's own process: its batches (the wire's
        types, the reader's batch size) go to the queue as a task's would, through an attempt
        of their own, so a split left half-read (a yield, a stop) is read on by a task
        without a row lost or repeated. True when the split was read whole; a read error
        fails the scan, with the error ``failure`` makes of it (what a task's would be).
        ``serialize``: each batch's IPC message made here, in the reader's thread (a Thrift
        reply sends it as it is); not for a scan whose front sends batches (Arrow Flight)."""
        attempt, _ = self.begin(split, threading.current_thread(), local=True)
        if attempt is None:
            return False
        try:
            for batch in batches:
                if attempt.offer(batch, serialize=serialize) is not Offer.GO_ON:
                    return False
            return attempt.end()
        except StarscanError as exc:
            self.fail(exc)
            return False
        except Exception as exc:  # noqa: BLE001 - the split's read failed: the scan fails, the BE goes on
            self.fail(failure(exc))
            return False
        finally:
            with self._cond:
                self._local.discard(split)
            attempt.leave()

    def fail(self, error: StarscanError) -> None:
        with self._cond:
            self._fail_locked(error)

    # ---- under the locks ----
    def _deliver(self, split_no: int, batch: pa.RecordBatch, ipc: pa.Buffer | None) -> Offer:
        """Put a batch of split ``split_no`` in the scanner's queue (its split's lock held)."""
        split = self.splits[split_no]
        nbytes = batch.get_total_buffer_size()
        if nbytes > self.queue.max_bytes:
            self.fail(MemLimitExceeded(
                f"one batch of {batch.num_rows} rows needs {nbytes} bytes, more than the scanner's memory limit of "
                f"{self.queue.max_bytes} bytes; raise mem_limit"))
            return Offer.STOP
        outcome = self.queue.put(batch, nbytes, room_wait=self.yield_rule, ipc=ipc, split=split_no)
        if outcome is PUT_TIMED_OUT:
            # The reader has not read for a while: give the slot back; the split is read
            # again later from where it stopped.
            split.yielded = True
            self.yields += 1
            return Offer.YIELD
        if outcome:
            split.delivered += batch.num_rows
            return Offer.GO_ON
        return Offer.STOP  # the queue was closed or failed

    def _fail_locked(self, error: StarscanError) -> None:
        if self.error is None:
            self.error = error
        self.stopped = True
        self._cond.notify_all()
        self.queue.fail(error)
