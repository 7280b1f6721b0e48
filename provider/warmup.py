"""Warm the JVM before the first reader comes.

A freshly started JVM runs the first scan far slower than the next ones: Spark's Parquet
reader, whole-stage code generation and the Arrow writer are still being class-loaded and
JIT-compiled (bench/RESULTS.md, issue 6: the first SF1 full scan after start gave its first
batch after 9.0 s and ran at 56.6 MB/s, the next one 1.3 s and 117.5 MB/s). So before the
server says it is ready, it writes a small throw-away Parquet table with one column of each
type family a StarRocks reader sees, and scans it back through the same path a scan takes
(Parquet -> filter -> Arrow batches -> Spark's Python workers -> push into this process),
which also starts the Python workers and their imports. The table lives under the warehouse (a
hidden directory the catalog ignores) so that executors of a Spark cluster can read it too,
and it is removed afterwards. A warm-up that fails (a read-only warehouse, say) only costs
the first reader its speed: the server logs why and starts anyway.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
import uuid

from starscan.provider.push.listener import PushListener
from starscan.provider.result_queue import EOS, ResultQueue
from starscan.provider.scan_sources import FrameRead
from starscan.provider.spark_scan import SparkScan
from starscan.storage.hadoop_paths import literal

log = logging.getLogger("starscan.warmup")

#: How long a stopped warm-up waits for its scan's Spark work to end before removing its files.
STOPPED_SCAN_WAIT_S = 30.0

WARMUP_DIR = ".starscan-warmup"  # under the warehouse; hidden names are not tables (catalog.py)

# Column expressions over spark.range's `id`: the type families of docs/protocol.md section 5.
_COLUMNS = (
    "cast(id as int) as c_int",
    "id as c_bigint",
    "cast(id % 100 as tinyint) as c_tinyint",
    "cast(id * 1.5 as double) as c_double",
    "cast(id * 0.25 as float) as c_float",
    "cast(id / 100 as decimal(15,2)) as c_decimal",
    "concat('warm-', cast(id % 1000 as string)) as c_string",
    "date_add(date'1992-01-01', cast(id % 2500 as int)) as c_date",
    "timestamp_seconds(id) as c_timestamp",
    "id % 2 = 0 as c_boolean",
)


class WarmUpStopped(Exception):
    """The warm-up was told to stop (a reader's scan came first, or the server stops)."""


def warm_up(spark, warehouse, rows: int, listener: PushListener, stop: threading.Event | None = None) -> float:
    """Write ``rows`` rows under ``warehouse`` and scan them back twice; returns seconds.
    ``stop`` set: the warm-up ends at its next step (its running scan cancelled) with
    WarmUpStopped; the first reader's scan warms the JVM as well as this would."""
    stop = stop or threading.Event()
    started = time.monotonic()
    parent = warehouse / WARMUP_DIR
    path = parent / uuid.uuid4().hex[:12]
    sc = spark.sparkContext
    try:
        sc.setJobGroup("starscan-warmup", "starscan warm-up: write", True)  # the scans' jobs join this group
        if stop.is_set():
            raise WarmUpStopped()
        spark.range(rows, numPartitions=2).selectExpr(*_COLUMNS).write.mode("overwrite").parquet(str(path))
        for _ in range(2):
            if stop.is_set():
                raise WarmUpStopped()
            df = spark.read.parquet(literal(str(path))).where("c_bigint >= 0 and c_date >= date'1992-01-01'")
            _drain(spark, df, listener, stop)
    finally:
        try:
            sc.setJobGroup(None, None)
        except Exception:  # noqa: BLE001 - the context may be stopping
            pass
        shutil.rmtree(path, ignore_errors=True)
        try:
            parent.rmdir()  # only when empty: another server may be warming up in it
        except OSError:
            pass
    return time.monotonic() - started


def _drain(spark, df, listener: PushListener, stop: threading.Event) -> int:
    """Scan the DataFrame the way a scanner does and drop what arrives; returns the rows."""
    queue = ResultQueue(64 << 20)
    scan = SparkScan(spark, FrameRead(df, "warm-up"), queue, "starscan-warmup", listener, yield_after_s=None)
    scan.start()
    rows = 0
    while True:
        if stop.is_set():
            scan.cancel()
            # Its files are removed next: not while a task of it still reads them (Spark
            # would log the missing file as a task failure, with its stack trace).
            scan.done.wait(STOPPED_SCAN_WAIT_S)
            raise WarmUpStopped()
        batch = queue.take(65536, timeout=0.2)
        if batch is None:
            continue
        if batch is EOS:
            return rows
        rows += batch.num_rows
