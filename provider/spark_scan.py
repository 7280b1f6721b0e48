"""One scanner's Spark work: read the plan's files, filter, project, and push the rows into
the scanner's ResultQueue.

Each split (a Spark partition of the scan) is read by one Spark task that pushes its rows
over TCP straight into this BE process (provider/push_wire.py), a batch at a time as Spark
produces them: the first rows arrive within a fraction of a second of the task starting,
no partition is ever collected whole (in the JVM or here), and the JVM never holds a
reader's rows. A scanner keeps at most ``tasks_per_scanner`` tasks running (one until its
first rows arrive), each a Spark job of its own, in a FAIR pool of the scanner's
(starscan.spark.session.scan_pool), so concurrent scanners share the task slots and no scanner waits
for another's whole scan. An ``arrow`` engine task reads split after split as the BE
assigns them (_drive_readers), and ends at a split's end when another scan's job waits for
a slot (the driver then starts it again, behind that scan); a ``sql`` engine task reads its
own partition, one job per split (_drive). A reader that stops reading makes its task yield
its slot after ``yield_after_s``; the split is read again later, from where it stopped.

The jobs run under a job group named after the scan context. Close, GC and timeouts stop
the scan: the push connections say stop, the tasks end normally (no error in Spark's
log), and jobs still running after a grace period are cancelled.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from queue import Empty, SimpleQueue

from pyspark.rdd import RDD
from pyspark.serializers import NoOpSerializer
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from starscan.arrow.filter import NotArrowable
from starscan.arrow.rebase import CalendarRules
from starscan.arrow.wire import BatchConverter
from starscan.core.errors import (
    InvalidArgument,
    ScanCancelled,
    ScanFailed,
    ScanTimeout,
    SnapshotGone,
    StarscanError,
)
from starscan.core.logs import scan_fields
from starscan.expr import unflatten
from starscan.provider.arrow_engine import plan_arrow
from starscan.provider.push_listener import PushListener, PushSink
from starscan.provider.push_task import PushTarget, push_arrow_splits, push_spark_arrow
from starscan.provider.result_queue import ResultQueue
from starscan.spark.columns import column_ref, to_column
from starscan.spark.session import filters_floats, read_parquet_files, scan_session
from starscan.spark.types import is_supported, sql_type
from starscan.storage.stores import LOCAL, Storage
from starscan.tables.tablets import FOOTERS, row_range_problem

log = logging.getLogger("starscan.provider.scan")

#: Seconds a stopped scan's tasks get to notice the stop before their jobs are cancelled.
STOP_GRACE_S = 2.0


def check_snapshot(plan, plan_tablets: list, tablet_ids: list[int], storage: Storage = LOCAL) -> list[str]:
    """Locations of the requested tablets' files, verified to be the planned ones."""
    location = plan.table_location
    by_id = {t.tablet_id: t for t in plan_tablets}
    paths = []
    for tid in tablet_ids:
        for f in by_id[tid].files:
            path = storage.join(location, f.path)
            identity = storage.file_identity(path)
            if identity is None:
                raise SnapshotGone(
                    f"table {plan.database}.{plan.table} version {plan.version} is gone: file {f.path} was removed; "
                    "ask the FE for a new plan"
                )
            if identity != (f.size, f.mtime_ns):
                raise SnapshotGone(
                    f"table {plan.database}.{plan.table} version {plan.version} is gone: file {f.path} was rewritten; "
                    "ask the FE for a new plan"
                )
            paths.append(str(path))
    return paths


class SparkScan:
    """Checked at open_scanner (plan, columns, planned files); the Spark work, from building
    the DataFrame on, happens in the producer thread, so open_scanner answers in
    milliseconds however busy Spark is. An error found there reaches the reader at get_next."""

    def __init__(self, spark, plan, plan_tablets: list, tablet_ids: list[int], queue: ResultQueue, context_id: str,
                 listener: PushListener, tasks_per_scanner: int = 2, yield_after_s: float | None = 2.0,
                 pool: str = "default", engine: str = "auto", storage: Storage = LOCAL, ordered: bool = False):
        self._setup(spark, queue, context_id, listener, tasks_per_scanner, yield_after_s, pool)
        self.storage = storage
        self.ordered = ordered
        self.engine_setting = engine
        self.plan = plan
        self.description = f"{plan.database}.{plan.table}"
        self.log_fields = scan_fields(context_id=context_id, query_id=plan.query_id, user=plan.user,
                                      table=self.description)

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
        check_snapshot(plan, plan_tablets, tablet_ids, storage)
        self._table_schema, self._resolve, self._out_cols = table_schema, resolve, out_cols
        self.df = None  # built by the producer thread: open_scanner does only the checks
        self.columns = tuple((name, sql_type(f.dataType), f.nullable) for name, f in out_cols)
        self.converter = BatchConverter(list(self.columns))

    def _build_dataframe(self):
        """The scan as a Spark DataFrame (py4j work: the file index, the plan's analysis)."""
        plan = self.plan
        check_snapshot(plan, self._plan_tablets, self._tablet_ids, self.storage)
        df = self._read_tablets()
        if plan.predicate is not None:
            try:
                df = df.filter(to_column(unflatten(plan.predicate), self._resolve))
            except StarscanError:
                raise
            except Exception as exc:  # noqa: BLE001 - AnalysisException: types that do not fit, etc.
                raise InvalidArgument(f"the predicate cannot be evaluated on {plan.database}.{plan.table}: {_short(exc)}") from None
        return df.select(*[column_ref(field.name) for _, field in self._out_cols])

    def _read_tablets(self):
        """The planned tablets' rows: whole files read as they are; a tablet that is a run of
        a file's row groups selects the rows those groups hold by their index in the file
        (Spark's ``_metadata.row_index``), since Spark cannot be told which row groups to read."""
        plan, storage = self.plan, self.storage
        location = plan.table_location
        by_id = {t.tablet_id: t for t in self._plan_tablets}
        whole: list[str] = []
        cuts: list[tuple[str, int, int]] = []
        for tid in self._tablet_ids:
            t = by_id[tid]
            if t.first_row_group is None:
                whole.extend(storage.spark_path(storage.join(location, f.path)) for f in t.files)
            else:
                f = t.files[0]
                path = storage.join(location, f.path)
                problem = row_range_problem(FOOTERS.row_groups(path, f.size, f.mtime_ns, storage),
                                            t.first_row_group, t.row_groups or 0, t.first_row, t.rows)
                if problem is not None:
                    raise ScanFailed(f"table {plan.database}.{plan.table}: file {f.path} does not hold the planned "
                                     f"tablet {tid}: {problem}")
                cuts.append((storage.spark_path(path), t.first_row or 0, t.rows or 0))
        frames = []
        folders = plan.partition_columns is None  # else the partition values are in the files
        predicate = unflatten(plan.predicate) if plan.predicate is not None else None
        spark = scan_session(self.spark, ordered=self.ordered, exact_floats=filters_floats(predicate, self._table_schema))
        if whole:
            frames.append(read_parquet_files(spark, self._table_schema, storage.spark_path(location), whole,
                                             folders, plan.file_format or "parquet"))
        for path, first_row, rows in cuts:
            index = F.col("_metadata.row_index")
            frames.append(read_parquet_files(spark, self._table_schema, storage.spark_path(location), [path],
                                             folders, plan.file_format or "parquet")
                          .filter((index >= first_row) & (index < first_row + rows)))
        df = frames[0]
        for more in frames[1:]:
            df = df.unionByName(more)
        return df

    @classmethod
    def of_dataframe(cls, spark, df, queue: ResultQueue, context_id: str, listener: PushListener,
                     description: str, tasks_per_scanner: int = 2) -> SparkScan:
        """A scan of any DataFrame through the same push path (the start-up warm-up)."""
        scan = cls.__new__(cls)
        scan._setup(spark, queue, context_id, listener, tasks_per_scanner, None, "default")
        scan.plan = None
        scan.description = description
        scan.log_fields = scan_fields(context_id=context_id, table=description)
        scan.df = df
        scan.columns = tuple((f.name, sql_type(f.dataType), f.nullable) for f in df.schema.fields)
        scan.converter = BatchConverter(list(scan.columns))
        return scan

    def _setup(self, spark, queue, context_id, listener, tasks_per_scanner, yield_after_s, pool) -> None:
        self.spark = spark
        self.queue = queue
        self.context_id = context_id
        self.listener = listener
        self.tasks_per_scanner = max(1, tasks_per_scanner)
        self.yield_after_s = yield_after_s
        self.pool = pool
        self._cancelled: StarscanError | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._sink: PushSink | None = None
        self.splits = 0
        self.done = threading.Event()
        self.engine_setting = "sql"
        self.batch_rows = 4096  # the reader's batch_size: what the tasks send a batch of
        self.engine: str | None = None       # the engine the scan runs on, once chosen
        self.engine_reason: str | None = None  # why not the arrow engine
        self._arrow_splits: list | None = None  # the arrow engine's splits (ArrowSplit), for messages
        self.on_engine: Callable[[str], None] | None = None  # called with the engine once chosen
        self.time_zone = spark.conf.get("spark.sql.session.timeZone")
        self.storage = LOCAL  # where the plan's files are
        self.ordered = False  # splits one at a time, in order (protocol_extensions.ORDERED_PROPERTY)


    # ---- lifecycle ----
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"scan-{self.context_id[:8]}", daemon=True)
        self._thread.start()

    def cancel(self, reason: StarscanError | None = None) -> None:
        """Stop the scan. Safe to call more than once, from any thread.

        A cancel is a normal end (close before eos, GC, timeout), so it must not look like a
        failure in Spark's log: the tasks are told to stop and end normally; only jobs still
        running after STOP_GRACE_S (a task that finds no row to send for long) are cancelled."""
        with self._lock:
            if self._cancelled is not None:
                return
            self._cancelled = reason or ScanCancelled("the scan was cancelled")
            sink = self._sink
        if sink is not None:
            sink.stop()
        self.queue.fail(self._cancelled)
        if not self.done.is_set():
            timer = threading.Timer(STOP_GRACE_S, self._cancel_running_jobs)
            timer.daemon = True
            timer.start()

    def _cancel_running_jobs(self) -> None:
        if self.done.is_set():
            return
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

    @property
    def rows_produced(self) -> int:
        sink = self._sink
        return sum(s.delivered for s in sink.splits) if sink is not None else 0

    # ---- producer ----
    def _run(self) -> None:
        sink = None
        try:
            sc = self.spark.sparkContext
            rdd, source_schema, task_function, splits = self._choose_engine(sc)
            self.splits = rdd.getNumPartitions() if splits is None else splits
            sink = PushSink(self.queue, self.converter.schema, self.splits, self.yield_after_s)
            with self._lock:
                self._sink = sink
                cancelled = self._cancelled is not None
            if cancelled:
                return
            self.listener.register(sink)
            target = PushTarget(self.listener.advertised_host, self.listener.port, sink.token,
                                source_schema, self.columns, self.batch_rows, self.listener.local_path)
            mapped = rdd.mapPartitions(task_function(target))
            if splits is None:
                self._drive(sc, mapped, sink)
            else:
                self._drive_readers(sc, mapped, sink, rdd.getNumPartitions())
            if self._cancelled is None:
                if sink.error is not None:
                    raise sink.error
                self.queue.finish()
        except Exception as exc:  # noqa: BLE001 - every failure is handed to the reader
            if self._cancelled is None:
                error = exc if isinstance(exc, StarscanError) else self._failure(exc, sink)
                log.warning("scan %s failed: %s", self.context_id, error, extra=self.log_fields)
                if sink is not None:
                    sink.stop()
                self.queue.fail(error)
        finally:
            if sink is not None:
                self.listener.unregister(sink)
            self.done.set()

    def _choose_engine(self, sc):
        """For the engine this scan runs on: the RDD of its tasks, the Arrow schema they
        produce, the partition function's factory, and the number of splits when the tasks
        take their splits from the sink (the ``arrow`` engine: one partition per task the
        scanner runs at once, push_task.push_arrow_splits) or None (the ``sql`` engine: a
        partition is a split, one job each)."""
        if self.plan is not None and self.engine_setting in ("auto", "arrow"):
            try:
                read, splits = plan_arrow(self.plan, self._plan_tablets, self._tablet_ids, self.time_zone,
                                          self.tasks_per_scanner, self.storage, CalendarRules.of_session(self.spark))
            except NotArrowable as why:
                if self.engine_setting == "arrow":
                    raise InvalidArgument(f"scan_engine = arrow cannot run this scan: {why}; "
                                          "scan_engine = auto runs it on the sql engine") from None
                self.engine_reason = str(why)
            else:
                self._set_engine("arrow")
                self._arrow_splits = splits
                readers = min(self.tasks_per_scanner, len(splits))
                rdd = sc.parallelize(range(readers), readers) if splits else sc.emptyRDD()
                return (rdd, read.output_schema, lambda target: push_arrow_splits(target, read, tuple(splits)),
                        len(splits))
        self._set_engine("sql")
        if self.df is None:
            self.df = self._build_dataframe()
        schema = to_arrow_schema(self.df.schema, timezone=self.time_zone, prefers_large_types=False)
        rdd = RDD(self.df._jdf.toArrowBatchRdd().toJavaRDD(), sc, NoOpSerializer())
        return rdd, schema, push_spark_arrow, None

    def _set_engine(self, engine: str) -> None:
        self.engine = engine
        if self.plan is None:
            return  # the start-up warm-up: not a reader's scan
        log.info("scan %s engine=%s%s", self.context_id, engine,
                 f" ({self.engine_reason})" if engine == "sql" and self.engine_reason else "", extra=self.log_fields)
        if self.on_engine is not None:
            self.on_engine(engine)

    def _reading(self, sink: PushSink | None) -> str:
        """The files an arrow task was reading when Spark lost it without a word from the task
        (a Python worker killed, an executor gone): the splits whose connection ended without
        their end, else the splits begun and not ended."""
        if sink is None or self._arrow_splits is None:
            return ""  # the sql engine: Spark's own reason names the file where one is at fault
        splits = sink.lost() or sink.unended()
        if not splits:
            return ""
        more = f"; and {len(splits) - 2} more" if len(splits) > 2 else ""
        return f" (reading {'; '.join(self._arrow_splits[n].describe(files=3) for n in splits[:2])}{more})"

    def _job_runner(self, sc, mapped, finished: SimpleQueue):
        """A function that runs one Spark job over one partition of ``mapped``, in this scan's
        job group and pool, and puts ``(partition, None or the exception)`` in ``finished``."""
        description = f"starscan scan {self.description}"

        def run(partition: int) -> None:
            try:
                sc.setJobGroup(self.context_id, description, True)
                sc.setLocalProperty("spark.scheduler.pool", self.pool)
                _run_job(sc, mapped, partition)
                finished.put((partition, None))
            except BaseException as exc:  # noqa: BLE001 - handed to the driver loop
                finished.put((partition, exc))

        return run

    def _job_turn(self, sink: PushSink, wants: bool) -> bool:
        """Whether the driver, which ``wants`` to start a Spark job, starts one now: when it is
        this scan's turn (PushListener.may_submit; a scan that wants none leaves the line).
        True counts the job as waiting for a slot until its task says hello."""
        if not wants:
            self.listener.withdraw(sink)
            return False
        if not self.listener.may_submit(sink):
            return False
        sink.job_submitted()
        return True

    def _drive(self, sc, mapped, sink: PushSink) -> None:
        """Run one Spark job per split, at most ``tasks_per_scanner`` at once, until every
        split has ended at the sink. A split that yielded waits for room in the queue."""
        pending = deque(range(self.splits))
        finished: SimpleQueue = SimpleQueue()
        in_flight = 0
        yielded: set[int] = set()
        run_split = self._job_runner(sc, mapped, finished)
        any_finished = False
        with ThreadPoolExecutor(self.tasks_per_scanner, thread_name_prefix=f"scan-{self.context_id[:8]}-job") as jobs:
            while True:
                # One task until the first rows arrive (or a split ends without rows: a
                # selective filter), then tasks_per_scanner: scanners opened together get
                # their first replies sooner when each starts with one task.
                allowed = self.tasks_per_scanner if self.queue.rows_in or any_finished else 1
                while self._job_turn(sink, self._cancelled is None and in_flight < allowed and bool(pending) and not (
                        pending[0] in yielded and self.queue.bytes > self.queue.max_bytes // 2)):  # no room yet
                    in_flight += 1
                    jobs.submit(run_split, pending.popleft())
                if in_flight == 0 and (not pending or self._cancelled is not None):
                    return
                try:
                    split, exc = finished.get(timeout=0.02 if allowed < self.tasks_per_scanner else 0.1)
                except Empty:
                    continue
                in_flight -= 1
                sink.jobs_running(in_flight)
                any_finished = True
                if self._cancelled is not None:
                    continue
                state = sink.state(split)
                if exc is not None:
                    raise self._failure(exc, sink, state.failure)
                if state.ended:
                    continue
                if sink.error is not None:
                    raise sink.error
                if state.yielded:
                    yielded.add(split)
                    if self.ordered:
                        pending.appendleft(split)  # it goes on before any later split starts
                    else:
                        pending.append(split)
                    continue
                raise ScanFailed(f"Spark finished split {split} of the scan, but its rows did not all reach the BE")

    def _drive_readers(self, sc, mapped, sink: PushSink, readers: int) -> None:
        """Run the ``arrow`` engine's tasks, each a Spark job of one task that reads the splits
        the sink assigns it until none is left, at most ``readers`` at once, until every split
        has ended. A task whose split yielded ends; another starts when the queue has room."""
        if readers == 0:
            return  # no splits: nothing to read
        free = deque(range(readers))  # the RDD's partitions: one per task that can run
        finished: SimpleQueue = SimpleQueue()
        run_reader = self._job_runner(sc, mapped, finished)
        with ThreadPoolExecutor(readers, thread_name_prefix=f"scan-{self.context_id[:8]}-job") as jobs:
            try:
                self._run_readers(jobs, run_reader, finished, free, sink, readers)
            except BaseException:
                sink.stop()  # the other tasks stop now, not after reading every split left
                raise

    def _run_readers(self, jobs, run_reader, finished: SimpleQueue, free: deque, sink: PushSink, readers: int) -> None:
        in_flight = 0
        any_finished = False
        while True:
            # One task until the first rows arrive (as _drive). Once a split has yielded (the
            # reader stopped reading for a while), a task starts only when the reader has
            # made room: a task started into a full queue would only hold a slot and yield.
            # Scans start jobs in turns while slots are short (PushListener.may_submit).
            allowed = readers if self.queue.rows_in or any_finished else 1
            while self._job_turn(sink, self._cancelled is None and in_flight < allowed and bool(free)
                                 and sink.unclaimed() and not (
                                     sink.yields and self.queue.bytes > self.queue.max_bytes // 2)):  # no room yet
                in_flight += 1
                jobs.submit(run_reader, free.popleft())
            if in_flight == 0:
                if self._cancelled is not None or sink.all_ended():
                    return
                if sink.error is not None:
                    raise sink.error
                lost = sink.lost()
                if lost:
                    raise ScanFailed(f"Spark finished the scan's tasks, but the rows of split {lost[0]} did not "
                                     "all reach the BE")
            try:
                partition, exc = finished.get(timeout=0.02 if allowed < readers else 0.1)
            except Empty:
                continue
            in_flight -= 1
            sink.jobs_running(in_flight)
            free.append(partition)
            any_finished = True
            if self._cancelled is not None:
                continue
            if exc is not None:
                raise self._failure(exc, sink, sink.failure())
            if sink.error is not None:
                raise sink.error

    def _failure(self, exc: BaseException, sink: PushSink | None = None, task_reason: str | None = None) -> StarscanError:
        """The error a reader gets when Spark failed: "version ... is gone" when the planned
        files were removed or rewritten under the scan, else the task's own reason."""
        if sink is not None and sink.error is not None:
            return sink.error
        try:
            if self.plan is not None:
                check_snapshot(self.plan, self._plan_tablets, self._tablet_ids, self.storage)
        except SnapshotGone as gone:
            return SnapshotGone(gone.message.replace(" was removed;", " was removed during the scan;")
                                .replace(" was rewritten;", " was rewritten during the scan;"))
        except Exception:  # noqa: BLE001 - the original failure is what matters
            pass
        if task_reason is not None:
            reason = task_reason
        else:
            reason, raised = _spark_reason(exc)
            if not raised:  # Spark lost the task: say what it was reading
                reason += self._reading(sink)
        no_filesystem = "No FileSystem for scheme" in reason or ("ClassNotFoundException" in reason and "FileSystem" in reason)
        if no_filesystem and not self.storage.is_local:
            return ScanFailed(f"this scan of {self.description} needs the sql engine ({self.engine_reason}), and this "
                              f"server's Spark has no filesystem for {self.storage.spark_path(self.plan.table_location)}: "
                              "add Hadoop's cloud connector jars to Spark (docs/storage.md), or ask for a scan the arrow "
                              "engine can read")
        if f"table {self.description}" in reason:
            return ScanFailed(f"Spark scan failed: {reason}")
        return ScanFailed(f"Spark scan of table {self.description} failed: {reason}")


def _run_job(sc, mapped, split: int) -> None:
    """One Spark job over one partition of ``mapped`` (what ``SparkContext.runJob`` does,
    without building a new Python RDD per call); the partition function returns nothing."""
    from pyspark.util import _load_from_socket

    sock_info = sc._jvm.PythonRDD.runJob(sc._jsc.sc(), mapped._jrdd, [split])
    with _load_from_socket(sock_info, mapped._jrdd_deserializer) as stream:
        for _ in stream:
            pass


def _spark_reason(exc: BaseException) -> tuple[str, bool]:
    """The root cause of a Py4J error (its own text is only "An error occurred while calling
    ..."): the deepest cause that says something, and whether it is an exception a Python task
    raised. A bare ``java.io.EOFException`` under "Python worker exited unexpectedly (crashed)"
    says less than the error around it."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            texts: list[str] = []
            cause = java
            while cause is not None and len(texts) < 20:
                texts.append(str(cause.toString()).strip())
                cause = cause.getCause()
            for text in reversed(texts):
                first = text.splitlines()[0] if text else ""
                if ": " in first:  # Throwable.toString is "class: message", or the class alone
                    raised = _python_error(text)
                    return (raised, True) if raised else (first.split(" Consider setting ")[0][:500], False)
            if texts and texts[-1]:
                return texts[-1].splitlines()[0][:500], False
        except Exception:  # noqa: BLE001 - the gateway may be gone
            pass
    raised = _python_error(str(exc))
    return (raised, True) if raised else (_short(exc), False)


def _python_error(text: str) -> str | None:
    """The exception line of the last Python traceback inside an error's text (what a
    Python task raised: "ConnectionError: ..."), or None when the text holds no traceback.
    Spark's own first line ("An exception was thrown from the Python worker") says nothing.
    In a Java exception's text the first traceback follows the class name on its line."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.endswith("Traceback (most recent call last):")]
    if not starts:
        return None
    for line in lines[starts[-1] + 1:]:
        if line.strip() and not line[0].isspace():
            return line.strip()[:500]
    return None


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:500]


__all__ = ["SparkScan", "check_snapshot"]
