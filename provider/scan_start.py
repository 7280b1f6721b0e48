"""The scan of a checked open_scanner request, started: its bounded result queue, what it
reads (provider/scan_sources.py), the Spark work that reads it (provider/spark_scan.py) and
its query-timeout timer. The Spark work happens in the scan's own thread, so this returns
in milliseconds however busy Spark is."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from starscan.arrow.chunk_cache import ColumnChunkCache
from starscan.provider.contexts import ScanRun
from starscan.provider.open_checks import CheckedOpen
from starscan.provider.push.listener import PushListener
from starscan.provider.result_queue import QueueBudget, ResultQueue
from starscan.provider.scan_sources import PlannedRead
from starscan.provider.spark_scan import SparkScan
from starscan.settings.config import Settings
from starscan.spark.session import scan_pool
from starscan.storage.stores import Storage


def start_scan(spark: Any, settings: Settings, request: CheckedOpen, context_id: str, storage: Storage,
               budget: QueueBudget, listener: PushListener, chunk_cache: ColumnChunkCache,
               on_engine: Callable[[str], None]) -> ScanRun:
    limit = settings.queue_max_bytes
    if request.mem_limit and request.mem_limit > 0:
        limit = min(limit, request.mem_limit)
    queue = ResultQueue(limit, budget, ordered=request.ordered)
    source = PlannedRead(spark, request.plan, request.plan_tablets, request.tablet_ids, storage, request.ordered,
                         reader_always=settings.sql_engine_reader == "starscan",
                         open_cost_bytes=settings.tablet_open_cost_bytes)
    scan = SparkScan(spark, source, queue, context_id, listener,
                     tasks_per_scanner=settings.scan_tasks_per_scanner,
                     yield_after_s=settings.scan_yield_after_s, pool=scan_pool(context_id),
                     engine=settings.scan_engine, local_reads=settings.scan_local_reads,
                     chunk_cache=chunk_cache.sweep(_sweep(request)),
                     arrow_types=request.arrow_types)
    scan.on_engine = on_engine
    scan.batch_rows = request.batch_size
    timeout_s = request.query_timeout if request.query_timeout and request.query_timeout > 0 else settings.query_timeout_s
    timeout_s = min(timeout_s, settings.query_timeout_max_s)
    timer = threading.Timer(timeout_s, scan.timeout, args=(timeout_s,))
    timer.daemon = True
    return ScanRun(scan=scan, queue=queue, timer=timer)


def _sweep(request: CheckedOpen) -> tuple:
    """What a scan's reads of the page cache count as their own (starscan.arrow.chunk_cache):
    its table and the columns it reads. Every scanner of one reader's job shares it, and so
    does the next job that reads the table the same way."""
    return request.table, tuple(sorted(c.name for c in request.plan.columns))
