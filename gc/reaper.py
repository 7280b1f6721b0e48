"""The scan-context reaper (StarRocks' keep-alive GC, docs/protocol.md 4.4).

Every ``scan_context_gc_interval`` it removes each context idle longer than its
``keep_alive_min`` and not inside a call: the Spark job is cancelled, the queue freed, and
a later get_next answers NOT_FOUND ``context_id: <id> not found``. With resumable scans the
same pass deletes the records no BE touched for their keep-alive (``also``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from starscan.core.logs import scan_fields

log = logging.getLogger("starscan.gc")


class ScanContextReaper:
    def __init__(self, contexts, interval_s: float, also: Callable[[], None] | None = None):
        self.contexts = contexts
        self.also = also  # run after each pass (the BE's resumable-scan records)
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._wake = threading.Event()  # set_interval: the new interval applies at once
        self._thread: threading.Thread | None = None
        self.reaped_total = 0

    def tick(self) -> int:
        """One pass; returns how many contexts were reclaimed."""
        victims = self.contexts.reap_idle()
        for ctx, idle in victims:
            log.info(
                "reclaimed idle scan context context_id=%s user=%s table=%s idle_s=%.1f keep_alive_s=%.0f rows_sent=%d",
                ctx.context_id, ctx.user or "-", ctx.table or "-", idle, ctx.keep_alive_s, ctx.rows_sent,
                extra=scan_fields(ctx),
            )
        self.reaped_total += len(victims)
        if self.also is not None:
            self.also()
        return len(victims)

    def set_interval(self, interval_s: float) -> None:
        """Change the tick at run time (POST /api/update_config): the next tick is
        ``interval_s`` from now, not from the last one."""
        self.interval_s = interval_s
        self._wake.set()

    def _run(self) -> None:
        while True:
            woken = self._wake.wait(self.interval_s)
            if self._stop.is_set():
                return
            if woken:
                self._wake.clear()
                continue
            try:
                self.tick()
            except Exception:  # never let the reaper die
                log.exception("scan context GC tick failed")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="scan-context-gc", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
