"""Keeps Spark's Python workers started, so a burst of new scanners does not wait for them.

Every scan task runs in a Spark Python worker; a task that finds no idle worker makes
Spark start one, one at a time, each taking a few hundred milliseconds on a busy machine
(bench/RESULTS.md, issue 22: four scanners opened at once waited up to 3.5 s for their
first reply, 1.4 s once workers existed). Spark stops a worker that has been idle for a
minute. So at start, and then every ``interval_s``, this runs one small job with a task per
slot that holds its worker for a moment (slots busy with scans take it when they are free):
every slot keeps a started worker ready.

A worker's first scan task was still slow: on a busy machine its first batch took
0.4-1.0 s from the task's start against 0.07-0.25 s for the same task in a worker that had
scanned before (first uses of pyarrow's Parquet reader, compute kernels and IPC writer in
a freshly forked process). So the keeper's task, the first time it runs in a worker, also
runs a small scan of an in-memory Parquet file through the same reader, conversion and
IPC calls a scan task makes.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("starscan.provider.workers")

GROUP = "starscan-python-workers"
HOLD_S = 0.1  # long enough for every slot's task to run at once, so each takes its own worker


class PythonWorkerKeeper:
    def __init__(self, spark, interval_s: float = 20.0):
        """Workers of free slots die after a minute idle even while other slots scan, so the
        keeper runs whether scanners are open or not."""
        self.spark = spark
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def slots(self) -> int:
        return max(1, int(self.spark.sparkContext.defaultParallelism))

    def fill(self) -> float:
        """Start (or touch) a worker for every task slot; returns the seconds it took."""
        sc = self.spark.sparkContext
        started = time.monotonic()
        n = self.slots()
        sc.setJobGroup(GROUP, "starscan: keep Python workers started", True)
        try:
            sc.parallelize(range(n), n).foreachPartition(_hold)
        finally:
            sc.setJobGroup(None, None)
        return time.monotonic() - started

    def start(self) -> PythonWorkerKeeper:
        self._thread = threading.Thread(target=self._loop, name="python-workers", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.fill()
            except Exception:  # noqa: BLE001 - Spark stopping, or busy: the next tick tries again
                log.debug("keeping Python workers started failed", exc_info=True)

    def stop(self) -> None:
        self._stop.set()


_exercised = False  # per worker process: the keeper's first task there ran _exercise()


def _hold(_rows) -> None:
    global _exercised
    if not _exercised:
        _exercised = True
        try:
            _exercise()
        except Exception:  # noqa: BLE001 - only a warm-up; a scan reports its own failures
            log.debug("exercising a Python worker failed", exc_info=True)
    time.sleep(HOLD_S)


def _exercise() -> None:
    """Read, convert and serialize a small Parquet file as a scan task would."""
    import datetime as dt
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    from starscan.arrow.wire import BatchConverter
    from starscan.core.sql_types import SqlType

    n = 2000
    table = pa.table({
        "i": pa.array(range(n), pa.int64()),
        "d": pa.array([Decimal(i) / 100 for i in range(n)], pa.decimal128(15, 2)),
        "day": pa.array([dt.date(2000, 1, 1) + dt.timedelta(days=i % 500) for i in range(n)], pa.date32()),
        "s": pa.array([f"value {i}" for i in range(n)], pa.string()),
        "ts": pa.array([dt.datetime(2000, 1, 1) + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("us", "UTC")),
    })
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=n // 2)
    columns = [("i", SqlType("long"), True), ("d", SqlType("decimal", precision=15, scale=2), True),
               ("day", SqlType("date"), True), ("s", SqlType("string"), True), ("ts", SqlType("timestamp"), True)]
    converter = BatchConverter(columns)
    for batch in pq.ParquetFile(pa.BufferReader(sink.getvalue())).iter_batches(batch_size=n // 4, use_threads=False):
        out = converter.convert(batch.filter(pc.greater_equal(batch.column("i"), 1)))
        stream = pa.BufferOutputStream()
        with ipc.new_stream(stream, out.schema) as writer:
            writer.write_batch(out)
