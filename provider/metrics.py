"""Prometheus metrics of one server (prometheus-client, a registry per server).

StarRocks' own name where one exists (``starrocks_be_active_scan_context_count``, so
existing dashboards work); the rest in Prometheus style under ``starscan_``. Labels are
method names, status codes and outcomes only: never users, passwords, tokens or SQL.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Histogram, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily

# get_next replies are milliseconds; open_scanner plans a Spark job; _query_plan lists files.
_RPC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_JOB_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)

THROUGHPUT_WINDOW_S = 600  # the admin page's chart: the last ten minutes, per second


class _LiveCollector:
    """Values read from the live scan contexts at scrape time."""

    def __init__(self, contexts, budget_of):
        self.contexts = contexts
        self.budget_of = budget_of

    def collect(self):
        live = self.contexts.snapshot()
        active = GaugeMetricFamily("starrocks_be_active_scan_context_count",
                                   "Scan contexts open on this BE (StarRocks' name)")
        active.add_metric([], len(live))
        yield active
        depth = queued = 0
        for ctx in live:
            queue = ctx.queue
            if queue is not None:
                depth += queue.depth
                queued += queue.bytes
        g = GaugeMetricFamily("starscan_result_queue_depth", "Arrow batches waiting in all result queues")
        g.add_metric([], depth)
        yield g
        g = GaugeMetricFamily("starscan_result_queue_bytes", "Bytes held by all result queues")
        g.add_metric([], queued)
        yield g
        budget = self.budget_of()
        if budget is not None:
            g = GaugeMetricFamily("starscan_result_queue_budget_bytes", "total_queue_max_bytes: the bound of all queues together")
            g.add_metric([], budget.max_bytes)
            yield g


class SparkLifeCollector:
    """The node's Spark at scrape time: its state, and the new sessions started after its JVM
    died (starscan.spark.handle). Nothing for a bare SparkSession (embedded uses)."""

    def __init__(self, spark):
        self.spark = spark

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        from starscan.spark.handle import SparkHandle, SparkState

        spark = self.spark
        if not isinstance(spark, SparkHandle):
            return
        state = GaugeMetricFamily("starscan_spark_state", "The node's Spark: 1 for its current state "
                                  "(STARTING, UP, RECOVERING after its JVM died, FAILED, STOPPED)", labels=["state"])
        for one in SparkState:
            state.add_metric([one.value], 1 if spark.state is one else 0)
        yield state
        yield CounterMetricFamily("starscan_spark_restarts", "New SparkSessions started after the JVM died",
                                  value=spark.restarts)
        yield CounterMetricFamily("starscan_spark_restart_failures", "Attempts to start a new SparkSession that failed",
                                  value=spark.restart_failures)
        if spark.last_recovery_s is not None:
            yield GaugeMetricFamily("starscan_spark_last_recovery_seconds", "Seconds from the JVM seen dead to the "
                                    "new SparkSession up, at the last restart", value=spark.last_recovery_s)


class ScanMetrics:
    def __init__(self, contexts, budget_of=lambda: None):
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        r = self.registry
        self.rpc_seconds = Histogram("starscan_rpc_duration_seconds",
                                     "Latency of BE RPCs (open_scanner, get_next, close_scanner) and FE _query_plan",
                                     ["method"], buckets=_RPC_BUCKETS, registry=r)
        self.rpc_replies = Counter("starscan_be_rpc_replies", "BE RPC replies by method and TStatusCode",
                                   ["method", "status_code"], registry=r)
        self.rows_sent = Counter("starscan_rows_sent", "Rows sent to readers by get_next and by the BE's Flight DoGet", registry=r)
        self.rows_read = Counter("starscan_rows_read", "Rows scans read from the tables' files, before their predicates "
                                 "(after row-group statistics and row-level deletes), counted as each scan ends", registry=r)
        self.splits_read = Counter("starscan_splits_read", "Splits of completed scans by where they were read: 'be' in the "
                                   "BE's own process (before Spark's tasks or in its own read slots, with the page "
                                   "cache), 'spark' by Spark's tasks; counted as each scan ends", ["reader"], registry=r)
        self.bytes_sent = Counter("starscan_bytes_sent", "Arrow bytes sent to readers: get_next's IPC replies, the Flight DoGet's batches", registry=r)
        self.replies_begun = Counter("starscan_be_replies_begun_early", "BE replies not ready within reply_keepalive_s, "
                                     "begun early and kept alive until ready (a reader's read timeout does not fire)",
                                     registry=r)
        self.opened = Counter("starscan_scanners_opened", "Scanners opened", registry=r)
        self.scans_by_engine = Counter("starscan_scans_by_engine", "Scans started on Spark, by the engine they ran on "
                                       "(arrow: pyarrow in Spark's Python tasks; sql: Spark SQL)", ["engine"], registry=r)
        self.readers_lost = Counter("starscan_scan_readers_lost", "Readers of a scan whose Spark task died without an "
                                    "error of its own (a Python worker killed or crashed); their splits were read on by "
                                    "others", registry=r)
        self.closed = Counter("starscan_scanners_closed", "Scanners closed by close_scanner or the admin page", registry=r)
        self.reaped = Counter("starscan_scanners_reaped", "Scanners reaped by the idle-context GC", registry=r)
        self.failed = Counter("starscan_scanners_failed", "Scanners refused at open or failed while scanning, by status code",
                              ["status_code"], registry=r)
        self.plan_requests = Counter("starscan_plan_requests", "_query_plan requests by HTTP status", ["status"], registry=r)
        self.spark_job_seconds = Histogram("starscan_spark_job_duration_seconds",
                                           "Duration of the Spark jobs that ran scans", buckets=_JOB_BUCKETS, registry=r)
        self.auth_failures = Counter("starscan_auth_failures", "Refused logins and permissions (HTTP 401/403, BE NOT_AUTHORIZED, MySQL access denied)",
                                     ["port"], registry=r)
        r.register(_LiveCollector(contexts, budget_of))
        self._lock = threading.Lock()
        self._per_second: deque[list] = deque(maxlen=THROUGHPUT_WINDOW_S)  # [epoch second, bytes, rows]

    def sent(self, rows: int, nbytes: int) -> None:
        if rows <= 0 and nbytes <= 0:
            return
        self.rows_sent.inc(rows)
        self.bytes_sent.inc(nbytes)
        now = int(time.time())
        with self._lock:
            if self._per_second and self._per_second[-1][0] == now:
                self._per_second[-1][1] += nbytes
                self._per_second[-1][2] += rows
            else:
                self._per_second.append([now, nbytes, rows])

    def throughput(self, window_s: int = THROUGHPUT_WINDOW_S) -> list[dict]:
        """Bytes and rows sent per second over the last ``window_s`` seconds (zeros filled in)."""
        now = int(time.time())
        with self._lock:
            seen = {sec: (b, r) for sec, b, r in self._per_second}
        return [{"t": sec, "bytes": seen.get(sec, (0, 0))[0], "rows": seen.get(sec, (0, 0))[1]}
                for sec in range(now - window_s + 1, now + 1)]

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
