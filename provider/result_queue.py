"""The bounded hand-off between a Spark scan (producer) and `get_next` (consumer).

Bounded in bytes: ``put`` blocks while the queue holds ``max_bytes`` or more (a single
batch is always admitted, so a large batch cannot deadlock). A batch's bytes are released
only when its last row has been taken, which is what the process really holds.

``take`` hands out replies of the size the reader asked for, whatever size the producer's
batches have: rows of several small queued batches are joined into one (one reply's worth
of extra memory), and a batch larger than a reply is cut. A batch of exactly a reply's size
is never cut to fill the rest of another reply: it goes whole into the next one, so
a short batch (the end of a split) costs one short reply instead of cutting every batch
after it in two, which joined two batches per reply (copied, and serialized again instead
of passing the producer's IPC on) until the scan ended. A reply is also shorter at the end
of the scan, when the producer waits for room (the queue cannot fill further), or when the
rows there have waited ``fill_wait_s`` for the rest, so a slow producer never holds a
reader's reply back for long.

An ordered queue (``ordered=True``, a scan whose rows come in a fixed order) takes batches of
several splits at once and hands them out split after split: a batch of the split being
handed out (the lowest that has not ended) is queued as above; a batch of a later split is
held until every split before it has ended (``end_split``). So a scan reads its splits in
parallel, as an unordered one does, and its rows still come in split order, each split's in
the order its reader sent them. Held batches take at most half of ``max_bytes`` (and one
batch), and the queue as a whole stays within ``max_bytes`` as above: a later split's reader
waits for room, while the reader of the split being handed out always finds room once the
reader takes (the held half is never all of it), so the two never wait on each other.

How long a producer waits for room before it gives up (``put``'s ``room_wait``) is the
scheduler's ``YieldRule`` (provider/scheduler.py), asked with when the reader last took:
the queue decides no time of its own.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Protocol

import pyarrow as pa

from starscan.core.errors import ScanCancelled, StarscanError

EOS = object()  # returned by take() when the scan finished and everything was taken
PUT_TIMED_OUT = None  # returned by put() when its timeout passed with the queue still full


class RoomWait(Protocol):
    """How long a producer waits for room (provider/scheduler.py ``YieldRule``)."""

    def deadline(self, waited_from: float, last_take: float, held: bool) -> float:
        """The monotonic time at which a producer waiting since ``waited_from`` gives up."""


class _Turn:
    """What ``_hold`` returns when the batch's split became the one handed out while it waited."""


_ITS_TURN = _Turn()


class QueueBudget:
    """Bytes held by all result queues together (``total_queue_max_bytes``).

    A queue over the shared budget pauses its producer unless it is empty: every scanner
    can always hold one batch, so a budget filled by idle scanners slows the others
    instead of stopping them (the bound is the budget plus one batch per scanner)."""

    POLL_S = 0.05

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self.used = 0

    def would_exceed(self, nbytes: int) -> bool:
        return self.used + nbytes > self.max_bytes

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.used += nbytes


class ResultQueue:
    def __init__(self, max_bytes: int, budget: QueueBudget | None = None, ordered: bool = False):
        self.max_bytes = max_bytes
        self.budget = budget
        self.ordered = ordered
        # One lock, two conditions: producers wait for room, the reader for rows, and each
        # side wakes only the other (one shared condition woke every waiter on every put and
        # take: ~18 context switches per batch in the BE, bench/RESULTS.md, issue 15, third session).
        lock = threading.Lock()
        self._room = threading.Condition(lock)    # producers wait here
        self._rows_cv = threading.Condition(lock)  # the reader waits here
        self._items: deque[list] = deque()  # [batch, nbytes, rows_taken]
        self._bytes = 0
        self._rows = 0             # rows queued and not yet taken
        self._puts_waiting = 0     # producers waiting for room in what is handed out
        # An ordered queue: the split being handed out, the splits after it that have ended,
        # and the batches of later splits held until their turn (module docstring).
        self._head = 0
        self._ended: set[int] = set()
        self._held: dict[int, list[list]] = {}
        self._held_bytes = 0
        self._last_take = time.monotonic()
        self._finished = False
        self._error: StarscanError | None = None
        self._closed = False
        self.rows_in = 0
        self.peak_bytes = 0
        self.largest_batch = 0
        # Profiles: seconds the producer (Spark) waited for room, and the reader for a batch.
        self.put_wait_s = 0.0
        self.take_wait_s = 0.0

    # ---- producer side ----
    def put(self, batch: pa.RecordBatch, nbytes: int, room_wait: RoomWait | None = None, ipc=None,
            split: int = 0) -> bool | None:
        """Add a batch; blocks while full. False when the queue was closed or failed,
        PUT_TIMED_OUT (None) when ``room_wait`` gave up with no room (nothing added; None: wait
        as long as it takes).
        ``ipc``: the batch's IPC message as it arrived, handed out again when a reply is
        exactly this batch (no serializing it a second time). ``split``: the split the batch
        belongs to (an ordered queue hands splits out in their order)."""
        with self._room:
            if self.ordered and split != self._head:
                held = self._hold(batch, nbytes, room_wait, ipc, split)
                if not isinstance(held, _Turn):
                    return held
            waited_from = time.monotonic()
            deadline = None if room_wait is None else room_wait.deadline(waited_from, self._last_take, False)
            self._puts_waiting += 1
            woke_reader = False
            try:
                while self._items and not self._stopped:
                    full = self._bytes + nbytes > self.max_bytes
                    if not full and not (self.budget is not None and self.budget.would_exceed(nbytes)):
                        break
                    if not woke_reader:  # a reader waiting to fill its reply gets what is here
                        self._rows_cv.notify()
                        woke_reader = True
                    wait = None if full else QueueBudget.POLL_S  # others free the budget: no shared wake-up
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            self.put_wait_s += time.monotonic() - waited_from
                            return PUT_TIMED_OUT
                        wait = left if wait is None else min(wait, left)
                    self._room.wait(wait)
            finally:
                self._puts_waiting -= 1
            self.put_wait_s += time.monotonic() - waited_from
            if self._stopped:
                return False
            self._items.append([batch, nbytes, 0, ipc])
            self._added(batch, nbytes)
            self._rows += batch.num_rows
            self._rows_cv.notify()
            return True

    def _hold(self, batch: pa.RecordBatch, nbytes: int, room_wait: RoomWait | None, ipc,
              split: int) -> bool | None | _Turn:
        """``put`` of a batch of a later split than the one handed out (an ordered queue;
        the lock is held): held until its turn, waiting while the held batches fill their
        half of the bound or the queue its whole bound, or _ITS_TURN when the split became
        the one handed out meanwhile. ``room_wait`` is asked again as the reader takes."""
        waited_from = time.monotonic()
        while not self._stopped and split != self._head and (
                (self._held_bytes and self._held_bytes + nbytes > self.max_bytes // 2)
                or (self._bytes and self._bytes + nbytes > self.max_bytes)):
            left = None
            if room_wait is not None:
                left = room_wait.deadline(waited_from, self._last_take, True) - time.monotonic()
                if left <= 0:
                    self.put_wait_s += time.monotonic() - waited_from
                    return PUT_TIMED_OUT
            self._room.wait(left)
        self.put_wait_s += time.monotonic() - waited_from
        if self._stopped:
            return False
        if split == self._head:
            return _ITS_TURN  # its turn came while it waited: put as any batch of that split
        self._held.setdefault(split, []).append([batch, nbytes, 0, ipc])
        self._held_bytes += nbytes
        self._added(batch, nbytes)
        return True

    def _added(self, batch: pa.RecordBatch, nbytes: int) -> None:
        self._account(nbytes)
        self.rows_in += batch.num_rows
        self.peak_bytes = max(self.peak_bytes, self._bytes)
        self.largest_batch = max(self.largest_batch, nbytes)

    def end_split(self, split: int) -> None:
        """Every row of ``split`` has been put. In an ordered queue the splits after it whose
        turn this is are handed out now: their held batches first, in the order they came."""
        if not self.ordered:
            return
        with self._room:
            self._ended.add(split)
            moved = False
            while self._head in self._ended:
                self._ended.discard(self._head)
                self._head += 1
                moved = self._release(self._head) or moved
            if moved:
                self._rows_cv.notify()
            self._room.notify_all()  # a held split's reader may be the one handed out now

    def _release(self, split: int) -> bool:
        """Hand out ``split``'s held batches, in the order they came (the lock is held);
        whether it had any."""
        items = self._held.pop(split, ())
        for item in items:
            self._items.append(item)
            self._held_bytes -= item[1]
            self._rows += item[0].num_rows
        return bool(items)

    @property
    def producers_waiting(self) -> int:
        """Producers blocked in ``put`` for want of room: the bound holding them back."""
        with self._room:
            return self._puts_waiting

    def finish(self) -> None:
        with self._room:
            for split in sorted(self._held):  # every split ended (the scan is over): none stays held
                self._release(split)
            self._finished = True
            self._wake_all()

    def fail(self, error: StarscanError) -> None:
        """Mark the scan failed; the first failure wins. Queued data is dropped."""
        with self._room:
            if self._error is None and not self._closed:
                self._error = error
            self._drop()
            self._wake_all()

    # ---- consumer side ----
    def take(self, max_rows: int, timeout: float | None = None, fill_wait_s: float = 0.0):
        """``max_rows`` rows as one RecordBatch (fewer: see the module's docstring), or EOS.
        Waits for the first row at most ``timeout`` seconds (None: no bound; then None is
        returned), then at most ``fill_wait_s`` more for the rest. Raises the scan's error."""
        out = self.take_reply(max_rows, timeout, fill_wait_s)
        return out[0] if isinstance(out, tuple) else out

    def take_reply(self, max_rows: int, timeout: float | None = None, fill_wait_s: float = 0.0):
        """As ``take``, but a batch comes as ``(batch, ipc)``: ``ipc`` is the IPC message the
        batch arrived as when the reply is exactly one whole queued batch, else None."""
        with self._rows_cv:
            if not self._wait_for_rows(max_rows, timeout, fill_wait_s):
                return None
            if self._error is not None:
                raise self._error
            if self._closed:
                raise ScanCancelled("the scanner was closed")
            if not self._items:
                return EOS
            return self._cut_reply(max_rows)

    def _wait_for_rows(self, max_rows: int, timeout: float | None, fill_wait_s: float) -> bool:
        """Under the lock: wait until ``max_rows`` rows are queued, the scan ends or stops,
        the producer waits for room, or ``fill_wait_s`` has passed since the first row came.
        False when ``timeout`` passed with no row."""
        waited_from = time.monotonic()
        fill_deadline = None
        while not self._stopped and not self._finished and self._rows < max_rows:
            now = time.monotonic()
            if self._rows and self._puts_waiting:
                break  # the producer waits for room: the queue cannot fill further
            if self._rows:
                if fill_deadline is None:
                    fill_deadline = now + fill_wait_s
                if now >= fill_deadline:
                    break
                wait = fill_deadline - now
            elif timeout is not None:
                wait = waited_from + timeout - now
                if wait <= 0:
                    self.take_wait_s += now - waited_from
                    return False
            else:
                wait = None
            self._rows_cv.wait(wait)
        self.take_wait_s += time.monotonic() - waited_from
        return True

    def _cut_reply(self, max_rows: int) -> tuple[pa.RecordBatch, object]:
        """Under the lock: up to ``max_rows`` queued rows as one batch, and the IPC message of
        the one whole queued batch the reply is (else None)."""
        parts: list[pa.RecordBatch] = []
        wanted = max_rows
        whole = None  # the IPC of the one batch the reply is, when it is one whole batch
        while wanted and self._items:
            item = self._items[0]
            batch, nbytes, taken, ipc = item
            left = batch.num_rows - taken
            if parts and left > wanted and batch.num_rows == max_rows:
                break  # a reply-sized batch is not cut to fill this reply (module docstring)
            rows = min(wanted, left)
            if not parts and taken == 0 and rows == batch.num_rows:
                whole = ipc
            parts.append(batch.slice(taken, rows) if rows != batch.num_rows else batch)
            wanted -= rows
            item[2] = taken + rows
            if item[2] >= batch.num_rows:
                self._items.popleft()
                self._account(-nbytes)
        self._rows -= max_rows - wanted
        self._last_take = time.monotonic()
        self._room.notify_all()  # both producers may fit now; one that does not waits again
        if len(parts) == 1:
            return parts[0], whole
        return pa.concat_batches(parts), None

    def close(self) -> None:
        """Drop everything and wake both sides (close_scanner, GC, timeout)."""
        with self._room:
            self._closed = True
            self._drop()
            self._wake_all()

    # ---- state ----
    @property
    def _stopped(self) -> bool:
        return self._closed or self._error is not None

    def _wake_all(self) -> None:
        self._room.notify_all()
        self._rows_cv.notify_all()

    def _drop(self) -> None:
        self._items.clear()
        self._held.clear()
        self._held_bytes = 0
        self._rows = 0
        self._account(-self._bytes)

    def _account(self, delta: int) -> None:
        self._bytes += delta
        if self.budget is not None and delta:
            self.budget.add(delta)

    @property
    def error(self) -> StarscanError | None:
        return self._error

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def ready_bytes(self) -> int:
        """The bytes of what can be handed out now (an ordered queue's held batches not counted)."""
        return self._bytes - self._held_bytes

    @property
    def depth(self) -> int:
        return len(self._items)
