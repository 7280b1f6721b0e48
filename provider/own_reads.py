"""A scan's readers in the BE's own process (the arrow engine only): split after split read
with the kernel's reader (starscan.arrow.read) and put in the scan's queue through its board
(``SplitBoard.read_here``), as a Spark task would push them. Such a reader costs no Spark job,
task, Python worker or push connection.

Two kinds, both started by what the scheduler (provider/scheduler.py) decides:

* the reader **before Spark** (``before_spark``): a scan's first splits, until a Spark task
  of the scan has connected, a reader of the scan runs in one of the BE's own slots, or none
  is left. A scan's first rows then wait for no Spark slot: with more scanners than slots, or
  Spark's workers still starting, the first get_next would otherwise wait seconds (beyond a
  Flink reader's 1 s timeout);
* readers in the BE's **own read slots** (``in_slot``): split after split until none is left
  for it or it yields; the slot is given back as it ends.

A split such a reader yields (the scan's reader stopped reading) is read on by another from
where it stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from queue import SimpleQueue
from typing import Any

from starscan.arrow.chunk_cache import ChunkSource
from starscan.arrow.read_stats import ReadStats
from starscan.arrow.wire import BatchConverter
from starscan.core.errors import StarscanError
from starscan.provider.push.sink import PushSink
from starscan.provider.scheduler import Ask, SlotScheduler


class OwnReads:
    """The BE's own readers of one scan over its arrow engine's ``read`` and ``splits``;
    ``failure(exc)`` is the error a split read here fails the scan with, ``stopped()``
    whether the scan was cancelled."""

    def __init__(self, scheduler: SlotScheduler, read: Any, splits: list[Any], columns: Sequence[Any],
                 arrow_types_tz: str | None, batch_rows: int, chunk_cache: ChunkSource | None,
                 failure: Callable[[Exception], StarscanError], stopped: Callable[[], bool]):
        self.scheduler = scheduler
        self.read, self.splits = read, splits
        self.columns, self.arrow_types_tz, self.batch_rows = columns, arrow_types_tz, batch_rows
        self.chunk_cache = chunk_cache  # the BE's decoded column chunks (starscan.arrow.chunk_cache)
        self.failure, self.stopped = failure, stopped
        self._lock = threading.Lock()
        self.local_splits = 0  # splits read whole here
        self.running = 0       # readers in the BE's own slots, running now
        self.runs = 0          # and ever started

    def before_spark(self, sink: PushSink) -> None:
        """The reader before Spark (module docstring)."""
        self.read_splits(sink, lambda: self.scheduler.reads_before_spark(sink, self.running))

    def in_slot(self, sink: PushSink, finished: SimpleQueue, partition: int) -> Callable[[], None]:
        """A reader in one of the BE's own slots (taken by the scan's driver), counted as
        running now; when it ends, the slot is given back first, then ``finished`` is told,
        as of a Spark job of ``partition``."""
        with self._lock:
            self.running += 1
            self.runs += 1

        def run() -> None:
            error: BaseException | None = None
            try:
                self.read_splits(sink, lambda: True)
            except BaseException as exc:  # noqa: BLE001 - handed to the driver loop
                error = exc
            finally:
                with self._lock:
                    self.running -= 1
                self.scheduler.give_own_slot()
            finished.put((partition, error, False))

        return run

    def read_splits(self, sink: PushSink, go_on: Callable[[], bool]) -> None:
        """Split after split (``claim``, as a task gets them) while ``go_on()`` says so before
        each, until none is left, the scan stops, or a split yields."""
        from starscan.arrow.read import read_split
        from starscan.provider.push.task import rechunk

        converter = BatchConverter(list(self.columns), self.arrow_types_tz)
        while not self.stopped() and not sink.stopped and go_on():
            number = self.scheduler.split_for(sink, Ask.IN_TURN)
            if number is None:
                return
            # Converted as decoded (runs of up to 64 Ki rows), then cut to the reader's batches.
            stats = ReadStats()
            decoded = read_split(self.read, self.splits[number], self.batch_rows, cut=False, chunks=self.chunk_cache,
                                 stats=stats)
            batches = rechunk((converter.convert(b) for b in decoded if b.num_rows), self.batch_rows)
            # A scan read in Arrow's own types is sent by the Flight front, which writes the
            # batches itself: no IPC message of each made here.
            whole = sink.read_here(number, batches, self.failure, serialize=self.arrow_types_tz is None)
            sink.read_from_files(stats.rows_read)
            if not whole:
                return
            with self._lock:
                self.local_splits += 1
