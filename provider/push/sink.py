"""What one scan's tasks push into (``PushSink``): the splits, how many rows of each reached
the scanner's queue, and the connections reading them.

A task that names no split gets one from the sink (``claim``): the first split that has not
ended and that no task reads. The ``arrow`` engine's tasks read split after split that way,
so a scan is one Spark job per task rather than per split; the ``sql`` engine's tasks read
their own Spark partition.

The sink keeps, per split, how many rows reached the scanner's queue. A split read again
(Spark retried a failed task, or the split yielded its slot) re-reads deterministically,
so the sink drops the rows it delivered before and passes on only the rest: a retry
neither loses nor repeats a row. A newer connection for a split supersedes an older one
still open (a task Spark gave up on); the older one's frames are dropped. A reader that
stops reading makes the split yield its task's slot (``yield_after_s``).
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from starscan.core.errors import MemLimitExceeded, ScanFailed, StarscanError
from starscan.provider.push.wire import (
    BATCH,
    END,
    ERROR,
    FRAME,
    GO,
    ROWS,
    SPLIT_NO,
    STOP,
    YIELD,
    drain,
    recv_arrow_buffer,
    recv_exact,
    send_quietly,
)
from starscan.provider.result_queue import PUT_TIMED_OUT, ResultQueue

log = logging.getLogger("starscan.provider.push")


@dataclass
class _Split:
    delivered: int = 0          # rows of this split in the scanner's queue
    ended: bool = False
    yielded: bool = False       # the BE asked the task to give its slot back
    generation: int = 0         # bumped by every new connection for the split
    failure: str | None = None  # what the task reported when it failed


class PushSink:
    """What one scan's tasks push into, and what the scan's driver asks about its splits."""

    def __init__(self, queue: ResultQueue, schema: pa.Schema, splits: int, yield_after_s: float | None):
        self.token = secrets.token_bytes(32)
        self.queue = queue
        self.schema = schema
        self.yield_after_s = yield_after_s
        self.splits = [_Split() for _ in range(splits)]
        self._cond = threading.Condition()
        self._conns: dict[int, socket.socket] = {}
        self._split_locks = [threading.Lock() for _ in range(splits)]
        self._claimed: set[int] = set()  # assigned to a task (claim) and not yet served
        self._local: set[int] = set()    # being read by the BE itself (serve_local)
        self.yields = 0  # times a split gave its task's slot back (the reader stopped reading)
        self.stopped = False
        self.error: StarscanError | None = None

    # ---- the driver's view ----
    def state(self, split: int) -> _Split:
        with self._cond:
            return self.splits[split]

    def all_ended(self) -> bool:
        with self._cond:
            return all(s.ended for s in self.splits)

    def claim(self) -> int | None:
        """The split for a task that names none (``ANY_SPLIT``): the first one that has not
        ended and that no task reads (the lowest first, a yielded one again first, so the
        split an ordered queue hands out is read before the ones it holds); None when there
        is none."""
        with self._cond:
            if self.stopped:
                return None
            for number, split in enumerate(self.splits):
                if not split.ended and number not in self._conns and number not in self._claimed \
                        and number not in self._local:
                    self._claimed.add(number)
                    return number
            return None

    def connections(self) -> int:
        """Tasks connected and reading a split now."""
        with self._cond:
            return len(self._conns)

    def unclaimed(self) -> bool:
        """Whether a split is left that no task reads (a new task would get one)."""
        with self._cond:
            return any(not s.ended and n not in self._conns and n not in self._claimed and n not in self._local
                       for n, s in enumerate(self.splits))

    def lost(self) -> list[int]:
        """Splits a task began and left without their end, a yield or a failure report:
        their rows did not all arrive (checked when no task runs)."""
        with self._cond:
            return [n for n, s in enumerate(self.splits)
                    if s.generation and not s.ended and not s.yielded and s.failure is None
                    and n not in self._conns and n not in self._claimed and n not in self._local]

    def unended(self) -> list[int]:
        """Splits a task began that have not ended (being read, or left by a task that died)."""
        with self._cond:
            return [n for n, s in enumerate(self.splits) if s.generation and not s.ended and not s.yielded]

    def failure(self) -> str | None:
        """What a task reported when it failed, if one did."""
        with self._cond:
            return next((s.failure for s in self.splits if s.failure is not None), None)

    def stop(self) -> None:
        """Tell every task to stop; later connections are told at once."""
        with self._cond:
            self.stopped = True
            conns = list(self._conns.values())
        for sock in conns:
            send_quietly(sock, STOP)

    # ---- a connection ----
    def serve(self, sock: socket.socket, split_no: int, assigned: bool = False) -> None:
        """Take frames from one task until it closes; runs in the listener's handler thread.
        ``assigned``: the split came from ``claim`` and the task learns its number with the go."""
        lock = self._split_locks[split_no]
        with lock, self._cond:
            self._claimed.discard(split_no)
            split = self.splits[split_no]
            if self.stopped or split.ended:
                send_quietly(sock, STOP)
                return
            old = self._conns.get(split_no)
            if old is not None:
                send_quietly(old, STOP)  # a task Spark gave up on: its frames no longer count
            split.generation += 1
            split.yielded = False
            split.failure = None  # an earlier attempt's report; this attempt may yet succeed
            generation = split.generation
            skip = split.delivered
            self._conns[split_no] = sock
        sent = 0  # rows this task sent, as the task counts them
        try:
            sock.sendall(GO + SPLIT_NO.pack(split_no) if assigned else GO)
            while True:
                header = recv_exact(sock, FRAME.size)
                if header is None:
                    return
                kind, size = FRAME.unpack(header)
                if kind == BATCH:
                    if size > max(self.queue.max_bytes, 1 << 16) * 4:
                        self._fail(MemLimitExceeded(
                            f"one batch needs {size} bytes, more than the scanner's memory limit of "
                            f"{self.queue.max_bytes} bytes allows; raise mem_limit"))
                        send_quietly(sock, STOP)
                        drain(sock)
                        return
                    payload = recv_arrow_buffer(sock, size)
                    if payload is None:
                        return
                    try:
                        batch = pa.ipc.read_record_batch(payload, self.schema)
                    except Exception as exc:  # noqa: BLE001 - not a batch of this scan's schema
                        self._fail(ScanFailed(f"split {split_no} sent a batch that is not Arrow of the scan's "
                                              f"schema: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__}"))
                        send_quietly(sock, STOP)
                        return
                    sent += batch.num_rows
                    with lock:
                        if split.generation != generation or split.yielded or self.stopped:
                            continue  # superseded or told to stop: drop until the task closes
                        ipc: pa.Buffer | None = payload
                        if skip:
                            drop = min(skip, batch.num_rows)
                            skip -= drop
                            batch = batch.slice(drop)
                            ipc = None  # no longer the batch that arrived
                            if batch.num_rows == 0:
                                continue
                        outcome = self._deliver(split_no, batch, ipc)
                        if outcome is not None:
                            send_quietly(sock, outcome)
                elif kind == END:
                    payload = recv_exact(sock, size)
                    if payload is None or size != ROWS.size:
                        return
                    (reported,) = ROWS.unpack(payload)
                    with lock, self._cond:
                        if split.generation == generation and not split.yielded and not self.stopped:
                            if reported != sent:
                                self._fail_locked(ScanFailed(
                                    f"split {split_no} ended with {reported} rows sent but {sent} received"))
                            else:
                                split.ended = True
                                self.queue.end_split(split_no)
                            self._cond.notify_all()
                    return
                elif kind == ERROR:
                    payload = recv_exact(sock, size)
                    with self._cond:
                        split.failure = bytes(payload or b"").decode("utf-8", "replace")
                        self._cond.notify_all()
                    return
                else:
                    log.warning("push connection for split %d sent an unknown frame %r: closed", split_no, kind)
                    return
        except OSError:
            return  # the task went away; the driver learns from Spark why
        except Exception as exc:  # noqa: BLE001 - a frame we could not take: the scan fails, the BE goes on
            log.exception("push connection for split %d failed", split_no)
            self._fail(ScanFailed(f"the BE could not take the rows of split {split_no}: {type(exc).__name__}: {exc}"))
        finally:
            with self._cond:
                if self._conns.get(split_no) is sock:
                    del self._conns[split_no]
                self._cond.notify_all()
            try:
                sock.close()
            except OSError:
                pass

    def _deliver(self, split_no: int, batch: pa.RecordBatch, ipc=None) -> bytes | None:
        """Put a batch of split ``split_no`` in the scanner's queue; what its reader is to be
        told: None (go on), YIELD or STOP."""
        split = self.splits[split_no]
        nbytes = batch.get_total_buffer_size()
        if nbytes > self.queue.max_bytes:
            self._fail(MemLimitExceeded(
                f"one batch of {batch.num_rows} rows needs {nbytes} bytes, more than the scanner's memory limit of "
                f"{self.queue.max_bytes} bytes; raise mem_limit"))
            return STOP
        outcome = self.queue.put(batch, nbytes, timeout=self.yield_after_s, ipc=ipc, split=split_no)
        if outcome is PUT_TIMED_OUT:
            # The reader has not read for a while: give the Spark slot back; the split is
            # read again later from where it stopped.
            split.yielded = True
            self.yields += 1
            return YIELD
        if outcome:
            split.delivered += batch.num_rows
            return None
        return STOP  # the queue was closed or failed

    # ---- the BE reading a split itself ----
    def serve_local(self, split_no: int, batches: Iterator[pa.RecordBatch],
                    failure: Callable[[Exception], StarscanError]) -> bool:
        """Read a split (from ``claim``) in the BE's own process: its batches (the wire's
        types, the reader's batch size) go to the queue as a task's would, with the same
        bookkeeping, so a split left half-read (a yield, a stop) is read on by a task
        without a row lost or repeated. True when the split was read whole; a read error
        fails the scan, with the error ``failure`` makes of it (what a task's would be)."""
        lock = self._split_locks[split_no]
        with lock, self._cond:
            self._claimed.discard(split_no)
            split = self.splits[split_no]
            if self.stopped or split.ended:
                return False
            split.generation += 1
            split.yielded = False
            split.failure = None
            generation, skip = split.generation, split.delivered
            self._local.add(split_no)
        try:
            for batch in batches:
                with lock:
                    if split.generation != generation or split.yielded or self.stopped:
                        return False
                    if skip:
                        drop = min(skip, batch.num_rows)
                        skip -= drop
                        batch = batch.slice(drop)
                        if batch.num_rows == 0:
                            continue
                    # Serialized here, as a task's batch comes: the queue then holds (and
                    # counts) the batch's own bytes, not the decoded run it was cut from,
                    # and a reply of this one batch sends them as they are.
                    ipc = batch.serialize()
                    if self._deliver(split_no, pa.ipc.read_record_batch(ipc, batch.schema), ipc) is not None:
                        return False
            with lock, self._cond:
                if split.generation != generation or split.yielded or self.stopped:
                    return False
                split.ended = True
                self.queue.end_split(split_no)
                self._cond.notify_all()
                return True
        except StarscanError as exc:
            self._fail(exc)
            return False
        except Exception as exc:  # noqa: BLE001 - the split's read failed: the scan fails, the BE goes on
            self._fail(failure(exc))
            return False
        finally:
            with self._cond:
                self._local.discard(split_no)
                self._cond.notify_all()

    def _fail(self, error: StarscanError) -> None:
        with self._cond:
            self._fail_locked(error)

    def _fail_locked(self, error: StarscanError) -> None:
        if self.error is None:
            self.error = error
        self.stopped = True
        self._cond.notify_all()
        self.queue.fail(error)
