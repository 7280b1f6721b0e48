"""Keeps Spark's Python workers started, so a burst of new scanners does not wait for them.

Every scan task runs in a Spark Python worker; a task that finds no idle worker makes
Spark start one, one at a time, each taking a few hundred milliseconds on a busy machine
(bench/RESULTS.md, issue 22: four scanners opened at once waited up to 3.5 s for their
first reply, 1.4 s once workers existed). Spark stops a worker that has been idle for a
minute. So at start, and then every ``interval_s``, this runs one small job with a task per
slot that holds its worker for a moment (slots busy with scans take it when they are free):
every slot keeps a started worker ready.
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
            sc.setJobGroup(None, None)  # type: ignore[arg-type]
        return time.monotonic() - started

    def start(self) -> "PythonWorkerKeeper":
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


def _hold(_rows) -> None:
    time.sleep(HOLD_S)
