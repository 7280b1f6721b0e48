"""Warm the JVM before the first reader comes.

A freshly started JVM runs the first scan far slower than the next ones: Spark's Parquet
reader, whole-stage code generation and the Arrow writer are still being class-loaded and
JIT-compiled (bench/RESULTS.md, issue 6: the first SF1 full scan after start gave its first
batch after 9.0 s and ran at 56.6 MB/s, the next one 1.3 s and 117.5 MB/s). So before the
server says it is ready, it writes a small throw-away Parquet table with one column of each
type family a StarRocks reader sees (with pyarrow: Spark's writer is not what a reader
runs, and would take the cores a first plan needs), and scans it back through the same path a scan takes
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
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from starscan.provider.push.listener import PushListener
from starscan.provider.result_queue import EOS, ResultQueue
from starscan.provider.scan_sources import FrameRead
from starscan.provider.spark_scan import SparkScan
from starscan.storage.hadoop_paths import literal

log = logging.getLogger("starscan.warmup")

#: How long a stopped warm-up waits for its scan's Spark work to end before removing its files.
STOPPED_SCAN_WAIT_S = 30.0

WARMUP_DIR = ".starscan-warmup"  # under the warehouse; hidden names are not tables (catalog.py)

_DAYS_TO_1992 = 8035  # 1992-01-01, in days since 1970-01-01


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
        sc.setJobGroup("starscan-warmup", "starscan warm-up", True)  # the scans' jobs join this group
        if stop.is_set():
            raise WarmUpStopped()
        _write(path, rows)
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


#: Rows the warm-up table's writer holds at once (a row group).
_WRITE_CHUNK_ROWS = 1 << 20


def _columns(ids: np.ndarray) -> dict[str, pa.Array]:
    """The warm-up table's columns for row numbers ``ids``: one of each type family a
    StarRocks reader sees (docs/protocol.md section 5)."""
    return {
        "c_int": pa.array(ids.astype(np.int32)),
        "c_bigint": pa.array(ids),
        "c_tinyint": pa.array((ids % 100).astype(np.int8)),
        "c_double": pa.array(ids * 1.5),
        "c_float": pa.array((ids * 0.25).astype(np.float32)),
        "c_decimal": _hundredths(ids),
        "c_string": pc.binary_join_element_wise("warm-", pc.cast(pa.array(ids % 1000), pa.string()), ""),
        "c_date": pa.array((ids % 2500 + _DAYS_TO_1992).astype(np.int32)).cast(pa.date32()),
        "c_timestamp": pa.array(ids * 1_000_000).cast(pa.timestamp("us", tz="UTC")),
        "c_boolean": pa.array(ids % 2 == 0),
    }


def _hundredths(ids: np.ndarray) -> pa.Array:
    """``ids / 100`` as decimal(15, 2): each id is the unscaled value (128 bits, low word
    first; the ids are not negative)."""
    words = np.zeros((len(ids), 2), dtype=np.int64)
    words[:, 0] = ids
    return pa.Array.from_buffers(pa.decimal128(15, 2), len(ids), [None, pa.py_buffer(words)])


def _write(path: Path, rows: int) -> None:
    """Write the warm-up table: two Parquet files (two splits), written by pyarrow in this
    process. Spark's own writer would take seconds of both cores at the BE's start, and a
    reader's first plan or scan needs them; its scans, not its writer, are what readers run."""
    path.mkdir(parents=True, exist_ok=True)
    halves = ((0, rows // 2), (rows // 2, rows))
    schema = pa.table(_columns(np.arange(0, 1, dtype=np.int64))).schema
    for number, (first, end) in enumerate(halves):
        with pq.ParquetWriter(path / f"part-{number:05d}.parquet", schema) as writer:
            for at in range(first, end, _WRITE_CHUNK_ROWS):
                writer.write_table(pa.table(_columns(np.arange(at, min(at + _WRITE_CHUNK_ROWS, end), dtype=np.int64))))


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
