"""The Spark jobs of each scan: ids, stages and durations for its profile and the
``starscan_spark_job_seconds`` metric, looked up off the RPC path once the scan has ended
(py4j calls, on one thread), and the jobs still running for the admin page."""

from __future__ import annotations

import logging
import queue
import threading
import time

from starscan.provider.metrics import ScanMetrics
from starscan.provider.profile import ScanProfile, spark_jobs, stage_input_records
from starscan.spark.handle import started

log = logging.getLogger("starscan.ops")


class SparkJobTracker:
    def __init__(self, spark, metrics: ScanMetrics):
        self.spark = spark
        self.metrics = metrics
        self._jobs: queue.Queue = queue.Queue(maxsize=10_000)
        self._worker = threading.Thread(target=self._lookups, name="scan-profile-spark", daemon=True)
        self._worker.start()

    def scan_ended(self, context_id: str, profile: ScanProfile | None, count_reads: bool = False) -> None:
        """Look the scan's jobs up (dropped when 10,000 lookups are already waiting);
        ``count_reads``: the rows it read from files are Spark's to say (a sql-engine scan):
        they go to the profile and the ``starscan_rows_read`` metric."""
        try:
            self._jobs.put_nowait((context_id, profile, count_reads))
        except queue.Full:
            pass

    def live_jobs(self, context_id: str) -> list[int]:
        if not started(self.spark):  # none while Spark (re)starts; the admin page waits for nothing
            return []
        try:
            return sorted(self.spark.sparkContext.statusTracker().getJobIdsForGroup(context_id))
        except Exception:  # noqa: BLE001 - Spark stopping, or the gateway gone
            return []

    def _lookups(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:  # stop()
                return
            context_id, profile, count_reads = item
            try:
                for _ in range(25):  # the status store hears of the jobs' end asynchronously
                    job_ids, stage_ids, durations, done = spark_jobs(self.spark, context_id)
                    if done:
                        break
                    time.sleep(0.2)
                for seconds in durations:
                    self.metrics.spark_job_seconds.observe(seconds)
                read = stage_input_records(self.spark, stage_ids) if count_reads else None
                if read:
                    self.metrics.rows_read.inc(read)
                if profile is not None:
                    with profile.lock:
                        profile.spark_job_ids, profile.spark_stage_ids = job_ids, stage_ids
                        profile.spark_job_ms = sum(durations) * 1000 if durations else None
                        if read is not None:
                            profile.rows_read = read
            except Exception:  # noqa: BLE001 - Spark stopping, or the gateway gone
                log.debug("Spark job lookup failed for %s", context_id, exc_info=True)

    def stop(self) -> None:
        """End the lookup thread (after the lookups already queued)."""
        try:
            self._jobs.put(None, timeout=5)
        except queue.Full:
            return
        self._worker.join(timeout=10)
