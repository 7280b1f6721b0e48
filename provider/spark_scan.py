"""One scanner's Spark work: read the plan's files, filter, project, and push the rows into
the scanner's ResultQueue.

Each split (a Spark partition of the scan) is read by one Spark task that pushes its rows
over TCP straight into this BE process (provider/push/wire.py), a batch at a time as Spark
produces them: the first rows arrive within a fraction of a second of the task starting,
no partition is ever collected whole (in the JVM or here), and the JVM never holds a
reader's rows. Every decision of when a reader starts, where (a Spark job, or one of the
BE's own read slots) and on which split is the BE's scheduler's (provider/scheduler.py); a
scan's split states are its board's (provider/splits.py). This module runs what they decide:
the scan's Spark jobs, each in a FAIR pool of the scanner's (starscan.spark.session.scan_pool),
its readers in the BE's own slots, and its reader before Spark's first task (``_drive``).

The jobs run under a job group named after the scan context. Close, GC and timeouts stop
the scan: the push connections say stop, the tasks end normally (no error in Spark's
log), and jobs still running after a grace period are cancelled.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from queue import Empty, SimpleQueue
from typing import Any

from starscan.arrow.chunk_cache import ChunkSource
from starscan.arrow.wire import BatchConverter
from starscan.core.errors import ScanCancelled, ScanTimeout, StarscanError
from starscan.core.logs import scan_fields
from starscan.provider.own_reads import OwnReads
from starscan.provider.push.listener import PushListener
from starscan.provider.push.sink import PushSink
from starscan.provider.push.task import PushTarget
from starscan.provider.result_queue import ResultQueue
from starscan.provider.scan_engines import Engine, choose_engine
from starscan.provider.scan_sources import Source
from starscan.provider.scheduler import SLOT_TURN_S, ScanReaders, Start, YieldRule
from starscan.provider.spark_failures import scan_failure
from starscan.spark import pyspark_internals
from starscan.spark.handle import conf_value, started

log = logging.getLogger("starscan.provider.scan")

#: Seconds a stopped scan's tasks get to notice the stop before their jobs are cancelled.
STOP_GRACE_S = 2.0

class SparkScan:
    """One scanner's Spark work over a ``source`` (provider/scan_sources.py), checked when
    the source was made; the Spark work, from building the DataFrame on, happens in the
    producer thread, so open_scanner answers in milliseconds however busy Spark is. An error
    found there reaches the reader at get_next. Which scan may start a Spark job when is the
    BE's scheduler's to say (the listener's ``scheduler``)."""

    def __init__(self, spark: Any, source: Source, queue: ResultQueue, context_id: str, listener: PushListener,
                 tasks_per_scanner: int = 2, yield_after_s: float | None = 2.0, pool: str = "default",
                 engine: str = "auto", local_reads: bool = False,
                 chunk_cache: ChunkSource | None = None, arrow_types: bool = False):
        self.spark = spark
        self.source = source
        self.queue = queue
        self.context_id = context_id
        self.listener = listener
        self.scheduler = listener.scheduler
        self.tasks_per_scanner = max(1, tasks_per_scanner)
        self.yield_rule = YieldRule.of(yield_after_s)
        self.pool = pool
        self.engine_setting = engine if source.planned else "sql"
        self.description = source.description
        self.log_fields = scan_fields(context_id=context_id, query_id=source.query_id, user=source.user,
                                      table=self.description)
        self.columns = source.columns
        self.chunk_cache = chunk_cache  # the BE's decoded column chunks (starscan.arrow.chunk_cache), for its own reads
        self.batch_rows = 4096  # the reader's batch_size: what the tasks send a batch of
        self.time_zone = conf_value(spark, "spark.sql.session.timeZone") or "UTC"  # no wait for a Spark still starting
        # Arrow's own types (the Flight SQL front) or StarRocks' wire forms: what every reader converts to.
        self.arrow_types_tz = self.time_zone if arrow_types else None
        self.converter = BatchConverter(list(self.columns), self.arrow_types_tz)
        self.splits = 0
        self.done = threading.Event()
        # Every split delivered whole while Spark jobs of the scan still wind down (a task that
        # has yet to start, to hear "nothing left" and end): the reader got its eos already.
        self.ended_early = False
        self.engine: str | None = None       # the engine the scan runs on, once chosen
        self.engine_reason: str | None = None  # why not the arrow engine
        self.on_engine: Callable[[str], None] | None = None  # called with the engine once chosen
        self._arrow_splits: list[Any] | None = None  # the arrow engine's splits (ArrowSplit), for messages
        # Read the arrow engine's splits in this process until a Spark task connects (or a
        # reader of the scan gets one of the BE's own slots).
        self.local_reads = local_reads
        self._own: OwnReads | None = None  # the BE's own readers (provider/own_reads.py), on the arrow engine
        self._readers: ScanReaders | None = None  # how its readers go, once the engine is chosen
        self.on_reader_lost: Callable[[], None] | None = None  # called as each is lost (metrics)
        self._cancelled: StarscanError | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._sink: PushSink | None = None

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
    def sink(self) -> PushSink | None:
        """What the scan's tasks push into, once the scan has started (None before)."""
        return self._sink

    @property
    def local_splits(self) -> int:
        """Splits the BE read whole itself."""
        return self._own.local_splits if self._own is not None else 0

    @property
    def own_readers(self) -> int:
        """Readers of this scan in the BE's own slots, running now."""
        return self._own.running if self._own is not None else 0

    @property
    def own_reader_runs(self) -> int:
        """Readers of this scan ever started in the BE's own slots."""
        return self._own.runs if self._own is not None else 0

    @property
    def readers_lost(self) -> int:
        """Readers whose Spark task died and whose splits others read on: those the scheduler
        started again, or the split board's count where Spark retried the task itself (a
        cluster, local[N,F])."""
        counted = self._readers.lost if self._readers is not None else 0
        sink = self._sink
        return max(counted, sink.total_losses() if sink is not None else 0)

    @property
    def rows_read(self) -> int | None:
        """Rows the scan's readers read from its files (before the predicate; after row-group
        statistics and deletes): counted by the arrow engine's readers; None on the sql
        engine, whose count is Spark's (the profile's ``rows_read``, looked up after the scan)."""
        sink = self._sink
        if self.engine != "arrow":
            return None
        return sink.rows_read if sink is not None else 0

    @property
    def rows_produced(self) -> int:
        sink = self._sink
        return sum(s.delivered for s in sink.splits) if sink is not None else 0

    # ---- producer ----
    def _run(self) -> None:
        sink = None
        own_slot = False  # one of the BE's own read slots, taken for the first reader
        try:
            engine = self._choose_engine()
            jobs = engine.readers
            self._readers = jobs
            self.splits = jobs.splits
            sink = PushSink(self.queue, self.converter.schema, self.splits, self.yield_rule,
                            ends_with_jobs=self.engine == "sql")
            with self._lock:
                self._sink = sink
                cancelled = self._cancelled is not None
            if cancelled:
                return
            self.listener.register(sink)
            own_slot, read_first = self.scheduler.opening(jobs, self.local_reads and self.engine == "arrow"
                                                          and bool(self._arrow_splits))
            local = self._start_local_reader(sink) if read_first else None
            if not (local is not None and (sink.all_ended() or sink.stopped)) and self._cancelled is None:
                handed, own_slot = own_slot, False  # the driver gives it back if unused
                self._drive(self._spark_work(sink, engine.rdd_of, engine.schema, engine.task_function), sink, jobs,
                            handed)
            if self._cancelled is None:
                if sink.error is not None and not self.ended_early:
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
            if own_slot:
                self.scheduler.give_own_slot()  # taken, and no reader ran in it
            if sink is not None:
                self.listener.unregister(sink)
                if self.on_reader_lost is not None and self._readers is not None:
                    for _ in range(sink.total_losses() - self._readers.lost):  # Spark retried these tasks
                        self.on_reader_lost()
            self.done.set()

    def _start_local_reader(self, sink: PushSink) -> threading.Thread:
        """The BE's own reader of the scan's first splits, started; while Spark is still
        starting (a BE's first seconds) this waits for it, the BE reading on meanwhile, and
        Spark's tasks take what is left once Spark is up, if anything is."""
        assert self._own is not None  # an arrow-engine scan
        local = threading.Thread(target=self._own.before_spark, args=(sink,), name=f"scan-{self.context_id[:8]}-local",
                                 daemon=True)
        local.start()
        if not started(self.spark):
            while (not self.spark.ready.wait(0.05) and local.is_alive() and self._cancelled is None
                   and not sink.stopped):
                pass
        return local

    def _spark_work(self, sink: PushSink, rdd_of: Callable[[Any], Any], source_schema: Any,
                    task_function: Callable[[PushTarget], Any]) -> Callable[[], tuple[Any, Any]]:
        """What the scan's first Spark job makes: the SparkContext and the tasks' RDD (a scan
        read in the BE's own slots needs neither, nor a started Spark); made again for a new
        JVM."""
        target = PushTarget(self.listener.advertised_host, self.listener.port, sink.token,
                            source_schema, self.columns, self.batch_rows, self.listener.local_path,
                            turn_s=SLOT_TURN_S, arrow_types_tz=self.arrow_types_tz)
        made: list[tuple[Any, Any]] = []
        making = threading.Lock()

        def spark_work() -> tuple[Any, Any]:
            with making:
                sc = self.spark.sparkContext  # waits while a new SparkSession starts
                if not made or made[0][0] is not sc:  # none yet, or of a JVM that died
                    made[:] = [(sc, rdd_of(sc).mapPartitions(task_function(target)))]
                return made[0]

        return spark_work

    def _choose_engine(self) -> Engine:
        """The scan's engine (provider/scan_engines.py), noted and logged."""
        def chosen(name: str, reason: str | None) -> None:
            self.engine_reason = reason
            self._set_engine(name)

        engine = choose_engine(self.spark, self.source, self.engine_setting, self.time_zone, self.tasks_per_scanner,
                               chosen)
        if engine.name == "arrow":
            assert engine.splits is not None
            self._arrow_splits = engine.splits
            self._own = OwnReads(self.scheduler, engine.read, engine.splits, self.columns, self.arrow_types_tz,
                                 self.batch_rows, self.chunk_cache, self._local_failure,
                                 lambda: self._cancelled is not None)
        return engine

    def _set_engine(self, engine: str) -> None:
        self.engine = engine
        if not self.source.planned:
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

    def _job_runner(self, spark_work: Callable[[], tuple[Any, Any]], finished: SimpleQueue):
        """A function that runs one Spark job over one partition of the tasks' RDD (from
        ``spark_work``), in this scan's job group and pool, and puts ``(partition, None or
        the exception, True)`` in ``finished``."""
        description = f"starscan scan {self.description}"

        def run(partition: int) -> None:
            try:
                sc, mapped = spark_work()
                sc.setJobGroup(self.context_id, description, True)
                sc.setLocalProperty("spark.scheduler.pool", self.pool)
                pyspark_internals.run_job(sc, mapped, partition)
                finished.put((partition, None, True))
            except BaseException as exc:  # noqa: BLE001 - handed to the driver loop
                finished.put((partition, exc, True))

        return run

    def _drive(self, spark_work: Callable[[], tuple[Any, Any]], sink: PushSink, jobs: ScanReaders,
               own_slot: bool = False) -> None:
        """Run the scan's readers, at most ``jobs.workers`` at once (one until the first
        rows arrive, or a reader ends without rows: scanners opened together get their first
        replies sooner when each starts with one reader), until ``jobs`` says the scan is
        read. An arrow-engine reader runs in one of the BE's own slots when one is free
        (``own_slot``: one the caller took for the first), else as a Spark job when the
        scheduler gives this scan its turn. A finished reader is handed to ``jobs``, which
        raises what failed. The loop also wakes every 20-100 ms: a turn comes from other
        scans' tasks, not from this scan's jobs."""
        if jobs.workers == 0:  # no splits: nothing to read
            if own_slot:
                self.scheduler.give_own_slot()
            return
        finished: SimpleQueue[tuple[int, BaseException | None, bool]] = SimpleQueue()
        run = self._job_runner(spark_work, finished)
        in_flight = spark_jobs = 0
        any_finished = False
        with ThreadPoolExecutor(jobs.workers, thread_name_prefix=f"scan-{self.context_id[:8]}-job") as pool:
            try:
                while True:
                    allowed = jobs.allowed(bool(self.queue.rows_in) or any_finished)
                    while True:
                        wants = self._cancelled is None and in_flight < allowed and jobs.can_start(self.queue, sink)
                        start = self.scheduler.next_reader(sink, wants, jobs.own_reads, own_slot, self.own_readers,
                                                           started(self.spark))
                        if start is Start.OWN_SLOT:
                            assert self._own is not None  # the scheduler gives own slots to arrow readers only
                            own_slot = False
                            in_flight += 1
                            pool.submit(self._own.in_slot(sink, finished, jobs.take()))
                        elif start is Start.SPARK:
                            in_flight += 1
                            spark_jobs += 1
                            pool.submit(run, jobs.take())
                        else:
                            break
                    if own_slot:  # the caller's slot, and no reader to run in it
                        self.scheduler.give_own_slot()
                        own_slot = False
                    if in_flight == 0 and (self._cancelled is not None or jobs.all_read(sink)):
                        return
                    self._end_early(sink)
                    try:
                        partition, exc, on_spark = finished.get(timeout=0.02 if allowed < jobs.workers else 0.1)
                    except Empty:
                        continue
                    in_flight -= 1
                    if on_spark:
                        spark_jobs -= 1
                        self.scheduler.jobs_unfinished(sink, spark_jobs)
                    any_finished = True
                    if self._cancelled is None:
                        self._reader_finished(jobs, sink, partition, exc)
            except Exception as exc:
                if self.ended_early:  # every row was delivered: what failed after cannot change them
                    log.info("scan %s: a Spark job failed after every split was read (ignored): %s",
                             self.context_id, exc, extra=self.log_fields)
                    return
                sink.stop()  # the other tasks stop now, not after reading every split left
                raise
            except BaseException:
                sink.stop()
                raise

    def _reader_finished(self, jobs: ScanReaders, sink: PushSink, partition: int, exc: BaseException | None) -> None:
        """A reader ended: ``jobs`` raises what failed; a lost Spark task is counted and its
        split read on by another reader."""
        lost = jobs.finished(partition, exc, sink, self._failure)
        if lost is not None:
            if self.on_reader_lost is not None:
                self.on_reader_lost()
            log.warning("scan %s: a reader's Spark task was lost (%s); its split is read on by another from where "
                        "its rows stopped", self.context_id, lost, extra=self.log_fields)

    def _end_early(self, sink: PushSink) -> None:
        """An arrow-engine scan's eos as soon as every split was delivered whole, not after
        its last Spark job has ended too: a job whose task has yet to start (a Python worker
        to fork, a busy machine) only hears that nothing is left, and a selective filter's
        scanners, whose splits the BE read at once, waited seconds for it. Not on the sql
        engine: there the JVM feeds a task its rows, and a task whose JVM side failed (a
        division by zero in the scan) may still end its split as if whole; only the job's
        outcome says the rows are all there."""
        if (not self.ended_early and self.engine == "arrow" and self._cancelled is None and sink.error is None
                and sink.all_ended()):
            self.ended_early = True
            self.queue.finish()

    def _local_failure(self, exc: Exception) -> StarscanError:
        """The error a split the BE read itself fails the scan with: the one a task that
        raised the same exception would give (a planned file gone: "version ... is gone")."""
        text = str(exc).strip()
        return self._failure(exc, None, task_reason=f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}")

    def _failure(self, exc: BaseException, sink: PushSink | None = None, task_reason: str | None = None) -> StarscanError:
        """The error a reader gets when Spark failed (spark_failures.scan_failure)."""
        if sink is not None and sink.error is not None:
            return sink.error
        return scan_failure(exc, self.spark, self.source, self.description, self.engine_reason,
                            lambda: self._reading(sink), task_reason)


__all__ = ["SparkScan"]
