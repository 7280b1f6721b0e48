"""Per-scan profiles (``enable_profile_for_external_plan``, StarRocks' key).

A profile is started when open_scanner succeeds and finished when the context goes
(close, GC, shutdown). It holds what finds a slow read: open time, time to the first
batch, time per RPC, rows / bytes / batches, how long the reader waited on Spark (an
empty queue at get_next) versus how long Spark waited on the reader (a full queue), the
Spark job and stage ids, and the outcome. Finished profiles stay readable for
``profile_retention_s`` (``GET /api/scans/{context_id}/profile``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from cachetools import TTLCache

from starscan.provider.contexts import ScanInfo
from starscan.provider.scan_audit import rows_read
from starscan.spark import pyspark_internals

log = logging.getLogger("starscan.provider.profile")

MAX_JOBS_LOOKED_UP = 200  # a scan runs a Spark job per task (arrow) or per split (sql); enough to profile it


@dataclass
class RpcStats:
    calls: int = 0
    seconds: float = 0.0
    max_seconds: float = 0.0

    def add(self, seconds: float) -> None:
        self.calls += 1
        self.seconds += seconds
        self.max_seconds = max(self.max_seconds, seconds)

    def as_dict(self) -> dict:
        return {"calls": self.calls, "total_ms": round(self.seconds * 1000, 3), "max_ms": round(self.max_seconds * 1000, 3)}


@dataclass
class ScanProfile:
    context_id: str
    query_id: str | None
    user: str
    table: str
    columns: list
    tablets: int | None
    batch_size: int
    opened_at: float                    # epoch seconds
    started: float                      # monotonic, when open_scanner was called
    open_ms: float = 0.0
    first_batch_ms: float | None = None  # from open_scanner's call to the first batch handed out
    rows: int = 0
    bytes: int = 0
    batches: int = 0
    rpc: dict = field(default_factory=lambda: {"open_scanner": RpcStats(), "get_next": RpcStats(), "close_scanner": RpcStats()})
    reader_waited_on_spark_ms: float = 0.0
    spark_waited_on_reader_ms: float = 0.0
    spark_job_ids: list = field(default_factory=list)
    spark_stage_ids: list = field(default_factory=list)
    spark_job_ms: float | None = None   # sum of the finished jobs' durations
    rows_read: int | None = None        # rows read from the table's files (before the predicate)
    outcome: str = "running"
    error: str | None = None
    duration_ms: float | None = None
    result_cache: str | None = None     # "hit" (no Spark job), "miss" (filling), None (not cached)
    info: ScanInfo = field(default_factory=ScanInfo, repr=False)  # the context's: the engine once chosen
    queue: object | None = field(default=None, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def update_waits(self) -> None:
        queue = self.queue
        if queue is not None:
            self.reader_waited_on_spark_ms = round(getattr(queue, "take_wait_s", 0.0) * 1000, 3)
            self.spark_waited_on_reader_ms = round(getattr(queue, "put_wait_s", 0.0) * 1000, 3)

    def as_dict(self) -> dict:
        self.update_waits()
        with self.lock:
            return {
                "context_id": self.context_id, "query_id": self.query_id, "user": self.user, "table": self.table,
                "columns": self.columns, "tablets": self.tablets, "batch_size": self.batch_size,
                "opened_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.opened_at)),
                "open_ms": round(self.open_ms, 3),
                "first_batch_ms": None if self.first_batch_ms is None else round(self.first_batch_ms, 3),
                "rows": self.rows, "rows_read": self.rows_read, "bytes": self.bytes, "batches": self.batches,
                "rpc": {name: stats.as_dict() for name, stats in self.rpc.items()},
                "reader_waited_on_spark_ms": self.reader_waited_on_spark_ms,
                "spark_waited_on_reader_ms": self.spark_waited_on_reader_ms,
                "spark_job_ids": list(self.spark_job_ids), "spark_stage_ids": list(self.spark_stage_ids),
                "spark_job_ms": None if self.spark_job_ms is None else round(self.spark_job_ms, 3),
                "outcome": self.outcome, "error": self.error,
                "duration_ms": None if self.duration_ms is None else round(self.duration_ms, 3),
                "result_cache": self.result_cache,
                "engine": self.info.engine,
            }

    def summary(self) -> dict:
        """The short form in the scan's audit line."""
        self.update_waits()
        return {
            "open_ms": round(self.open_ms, 1),
            "first_batch_ms": None if self.first_batch_ms is None else round(self.first_batch_ms, 1),
            "batches": self.batches,
            "rows_read": self.rows_read,
            "get_next_ms": round(self.rpc["get_next"].seconds * 1000, 1),
            "reader_waited_on_spark_ms": round(self.reader_waited_on_spark_ms, 1),
            "spark_waited_on_reader_ms": round(self.spark_waited_on_reader_ms, 1),
            "engine": self.info.engine,
        }


class ProfileStore:
    def __init__(self, retention_s: float, max_finished: int = 10_000):
        self._lock = threading.Lock()
        self._live: dict[str, ScanProfile] = {}
        self._done: TTLCache = TTLCache(maxsize=max_finished, ttl=max(retention_s, 0.001))

    def start(self, ctx, started: float, open_s: float) -> ScanProfile:
        info = ctx.info
        profile = ScanProfile(context_id=ctx.context_id, query_id=info.query_id, user=ctx.user, table=ctx.table,
                              columns=list(info.columns), tablets=info.tablets,
                              batch_size=ctx.batch_size, opened_at=time.time() - (time.monotonic() - started),
                              started=started, open_ms=open_s * 1000, queue=ctx.queue,
                              result_cache=info.result_cache, info=info)
        profile.rpc["open_scanner"].add(open_s)
        with self._lock:
            self._live[ctx.context_id] = profile
        return profile

    def get(self, context_id: str) -> ScanProfile | None:
        with self._lock:
            return self._live.get(context_id) or self._done.get(context_id)

    def finish(self, ctx, outcome: str, error: str | None) -> ScanProfile | None:
        with self._lock:
            profile = self._live.pop(ctx.context_id, None)
            if profile is None:
                return None
            self._done[ctx.context_id] = profile
        profile.update_waits()
        with profile.lock:
            profile.rows, profile.bytes = ctx.rows_sent, ctx.bytes_sent
            profile.rows_read = rows_read(ctx)
            profile.outcome, profile.error = outcome, error
            profile.duration_ms = (time.monotonic() - profile.started) * 1000
            profile.queue = None  # the queue's batches are gone; keep only the numbers
        return profile


def spark_jobs(spark, group: str) -> tuple[list[int], list[int], list[float], bool]:
    """Job ids, stage ids and finished jobs' durations (seconds) of a scan's job group, and
    whether every job has ended. Read from Spark's status store (kept with the UI off)."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    job_ids = sorted(tracker.getJobIdsForGroup(group))[:MAX_JOBS_LOOKED_UP]
    stages: list[int] = []
    durations: list[float] = []
    all_done = True
    store = pyspark_internals.status_store(sc)
    for jid in job_ids:
        info = tracker.getJobInfo(jid)
        if info is not None:
            stages.extend(info.stageIds)
        try:
            data = store.job(jid)
            submitted, completed = data.submissionTime(), data.completionTime()
            if submitted.isDefined() and completed.isDefined():
                durations.append((completed.get().getTime() - submitted.get().getTime()) / 1000.0)
            else:
                all_done = False
        except Exception:  # noqa: BLE001 - the job was evicted from the store meanwhile
            pass
    return job_ids, sorted(set(stages)), durations, all_done


def stage_input_records(spark, stage_ids: list[int]) -> int | None:
    """Records Spark's tasks read from their input in these stages (its UI's "Input Size /
    Records": the rows a sql-engine scan read from its files), from the status store; None
    when the store has none of them (evicted, or Spark stopping)."""
    store = pyspark_internals.status_store(spark.sparkContext)
    total, found = 0, False
    for stage in stage_ids:
        try:
            attempts = store.stageData(stage, False, None, False, None)  # every attempt of the stage
            for i in range(attempts.size()):
                total += int(attempts.apply(i).inputRecords())
                found = True
        except Exception:  # noqa: BLE001 - evicted from the store meanwhile
            continue
    return total if found else None
