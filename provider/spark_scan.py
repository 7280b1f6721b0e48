"""One scanner's Spark job: read the plan's files, filter, project, stream Arrow batches
into the scanner's ResultQueue.

Streaming follows shared/notes/perf-baseline.md ("stream_parts"): the DataFrame's Arrow
batch RDD is served to Python one partition at a time through
``PythonRDD.toLocalIteratorAndServe``; the JVM holds at most a partition or two, Python
one batch, and a full queue stops the reading, which stops the JVM. These are private
Spark APIs: pyspark is pinned and tests cover them. The job runs under a job group named
after the scan context, so close, GC and timeouts cancel it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pyarrow as pa
from pyspark.serializers import NoOpSerializer, read_int, write_int
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.util import _create_local_socket

from starscan.errors import (
    InvalidArgument,
    MemLimitExceeded,
    ScanCancelled,
    ScanFailed,
    ScanTimeout,
    SnapshotGone,
    StarscanError,
)
from starscan.expr import unflatten
from starscan.logs import scan_fields
from starscan.provider.arrow_convert import BatchConverter
from starscan.provider.result_queue import ResultQueue
from starscan.provider.spark_expr import to_column
from starscan.spark import read_parquet_files
from starscan.types import is_supported

log = logging.getLogger("starscan.provider.scan")


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def check_snapshot(plan, plan_tablets: list, tablet_ids: list[int]) -> list[str]:
    """Absolute paths of the requested tablets' files, verified to be the planned ones."""
    location = Path(plan.table_location)
    by_id = {t.tablet_id: t for t in plan_tablets}
    paths = []
    for tid in tablet_ids:
        for f in by_id[tid].files:
            path = location / f.path
            try:
                st = os.stat(path)
            except FileNotFoundError:
                raise SnapshotGone(
                    f"table {plan.database}.{plan.table} version {plan.version} is gone: file {f.path} was removed; "
                    "ask the FE for a new plan"
                ) from None
            if st.st_size != f.size or st.st_mtime_ns != f.mtime_ns:
                raise SnapshotGone(
                    f"table {plan.database}.{plan.table} version {plan.version} is gone: file {f.path} was rewritten; "
                    "ask the FE for a new plan"
                )
            paths.append(str(path))
    return paths


class SparkScan:
    """Prepared at open_scanner (errors surface there), run in a producer thread."""

    def __init__(self, spark, plan, plan_tablets: list, tablet_ids: list[int], queue: ResultQueue, context_id: str,
                 prefetch: bool = True):
        self.spark = spark
        self.plan = plan
        self.queue = queue
        self.context_id = context_id
        self.prefetch = prefetch
        self._cancelled: StarscanError | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.rows_produced = 0
        self.done = threading.Event()

        table_schema = T.StructType.fromJson(json.loads(plan.table_schema))
        by_lower = {f.name.lower(): f for f in table_schema.fields}

        def resolve(name: str) -> str:
            field = by_lower.get(name.lower())
            if field is None:
                raise InvalidArgument(f"column {name!r} does not exist in {plan.database}.{plan.table}")
            return field.name

        out_cols = []
        for c in plan.columns:
            if not c.is_slot_ref:
                raise InvalidArgument("output expr is not slot ref")
            field = by_lower.get(c.source.lower())
            if field is None:
                raise InvalidArgument(f"column {c.source!r} does not exist in {plan.database}.{plan.table}")
            if not is_supported(field.dataType):
                raise InvalidArgument(
                    f"column {c.name} has Spark type {field.dataType.simpleString()}, which StarRocks clients cannot read"
                )
            out_cols.append((c.name, field))

        self._plan_tablets, self._tablet_ids = plan_tablets, tablet_ids
        paths = check_snapshot(plan, plan_tablets, tablet_ids)
        df = read_parquet_files(self.spark, table_schema, plan.table_location, paths)
        if plan.predicate is not None:
            try:
                df = df.filter(to_column(unflatten(plan.predicate), resolve))
            except StarscanError:
                raise
            except Exception as exc:  # AnalysisException: types that do not fit, etc.
                raise InvalidArgument(f"the predicate cannot be evaluated on {plan.database}.{plan.table}: {_short(exc)}") from None
        df = df.select(*[F.col(quoted(field.name)) for _, field in out_cols])
        self.df = df
        tz = self.spark.conf.get("spark.sql.session.timeZone")
        self.spark_arrow_schema = to_arrow_schema(df.schema, timezone=tz, prefers_large_types=False)
        self.converter = BatchConverter([(name, f.dataType, f.nullable) for name, f in out_cols])

    # ---- lifecycle ----
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"scan-{self.context_id[:8]}", daemon=True)
        self._thread.start()

    def cancel(self, reason: StarscanError | None = None) -> None:
        """Stop the Spark job and the producer. Safe to call more than once, from any thread.

        A cancel is a normal end (close before eos, GC, timeout), so it must not look like a
        failure in Spark's log: the running jobs of the scan are cancelled (a job waiting to
        be served ends with an error the producer reads and drops), and the producer reads
        the rest of a partition the JVM is writing before it says stop, instead of cutting
        the socket under the JVM's writer (which logs "ERROR Utils: Aborting task ...
        Broken pipe")."""
        with self._lock:
            if self._cancelled is not None:
                return
            self._cancelled = reason or ScanCancelled("the scan was cancelled")
        if not self.done.is_set():
            self._cancel_running_jobs()
        self.queue.fail(self._cancelled)

    def _cancel_running_jobs(self) -> None:
        sc = self.spark.sparkContext
        try:
            tracker = sc.statusTracker()
            running = [j for j in tracker.getJobIdsForGroup(self.context_id)
                       if (info := tracker.getJobInfo(j)) is not None and info.status == "RUNNING"]
            if running:  # cancelling a group without jobs makes Spark warn
                sc.cancelJobGroup(self.context_id)
        except Exception:  # the SparkContext may be stopping
            log.debug("cancelJobGroup failed for %s", self.context_id, exc_info=True)

    def timeout(self, seconds: int) -> None:
        if not self.done.is_set():
            self.cancel(ScanTimeout(f"the scan exceeded query_timeout of {seconds} s and was cancelled"))

    # ---- producer ----
    def _run(self) -> None:
        sc = self.spark.sparkContext
        sockfile = sock = None
        try:
            sc.setJobGroup(self.context_id, f"starscan scan {self.plan.database}.{self.plan.table}", True)
            jrdd = self.df._jdf.toArrowBatchRdd()
            port, secret, server = sc._jvm.PythonRDD.toLocalIteratorAndServe(jrdd, self.prefetch)
            sockfile, sock = _create_local_socket((port, secret))
            self._pump(sockfile, server)
            if self._cancelled is None:
                self.queue.finish()
        except Exception as exc:
            if self._cancelled is None:
                error = exc if isinstance(exc, StarscanError) else self._failure(exc)
                log.warning("scan %s failed: %s", self.context_id, error, extra=scan_fields(
                    context_id=self.context_id, query_id=self.plan.query_id, user=self.plan.user,
                    table=f"{self.plan.database}.{self.plan.table}"))
                self.queue.fail(error)
        finally:
            self.done.set()
            try:
                sc.setJobGroup(None, None)  # type: ignore[arg-type]
            except Exception:
                pass
            for closable in (sockfile, sock):
                try:
                    if closable is not None:
                        closable.close()
                except OSError:
                    pass

    def _failure(self, exc: BaseException) -> StarscanError:
        """The error a reader gets when Spark failed: "version ... is gone" when the planned
        files were removed or rewritten under the scan, else Spark's own reason."""
        try:
            check_snapshot(self.plan, self._plan_tablets, self._tablet_ids)
        except SnapshotGone as gone:
            return SnapshotGone(gone.message.replace(" was removed;", " was removed during the scan;")
                                .replace(" was rewritten;", " was rewritten during the scan;"))
        except Exception:  # noqa: BLE001 - the original failure is what matters
            pass
        return ScanFailed(f"Spark scan failed: {_spark_reason(exc)}")

    def _pump(self, sockfile, server) -> None:
        """Ask the JVM for one partition at a time and queue its batches. After a cancel the
        rest of the partition being written is read and dropped, then the JVM is told to
        stop: its writer ends normally."""
        serializer = NoOpSerializer()
        schema = self.spark_arrow_schema
        limit = self.queue.max_bytes
        while self._cancelled is None:
            write_int(1, sockfile)
            sockfile.flush()
            status = read_int(sockfile)
            if status == 0:
                return
            if status == -1:
                if self._cancelled is not None:
                    return  # the job was cancelled on purpose: its error is expected
                server.getResult()  # raises the JVM's error
                raise ScanFailed("Spark ended the scan with an error")
            for raw in serializer.load_stream(sockfile):
                if self._cancelled is not None:
                    continue  # drain the partition the JVM is writing
                batch = pa.ipc.read_record_batch(pa.py_buffer(raw), schema)
                if batch.num_rows == 0:
                    continue
                out = self.converter.convert(batch)
                nbytes = out.get_total_buffer_size()
                if nbytes > limit:
                    raise MemLimitExceeded(
                        f"one batch of {batch.num_rows} rows needs {nbytes} bytes, more than the scanner's memory limit "
                        f"of {limit} bytes; raise mem_limit"
                    )
                if self.queue.put(out, nbytes):
                    self.rows_produced += out.num_rows
                elif self._cancelled is None:  # the queue was closed without a cancel
                    self.cancel()
        try:
            write_int(0, sockfile)  # cancelled between partitions: stop serving
            sockfile.flush()
        except OSError:
            pass


def _spark_reason(exc: BaseException) -> str:
    """The root cause of a Py4J error (its own text is only "An error occurred while calling ...")."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            root, seen = java, 0
            while root.getCause() is not None and seen < 20:
                root, seen = root.getCause(), seen + 1
            text = str(root.toString()).strip()
            if text:
                return text.splitlines()[0][:500]
        except Exception:  # noqa: BLE001 - the gateway may be gone
            pass
    return _short(exc)


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:500]


__all__ = ["SparkScan", "check_snapshot"]
