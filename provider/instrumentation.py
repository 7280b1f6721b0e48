"""What the BE measures: its scanners' metrics and profiles, told by the scan core whatever
front a reader came by (``BeInstrumentation`` is ScanService's observer), the Thrift calls'
own latencies and reply codes (a wrapper with the handler's methods and replies), and the
accounting of every scan as its context goes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from starscan.core import logs
from starscan.core.errors import StarscanError
from starscan.core.thrift_defs import wire
from starscan.provider.contexts import ScanContext, ScanContextManager
from starscan.provider.metrics import ScanMetrics
from starscan.provider.profile import ProfileStore
from starscan.provider.scan_audit import rows_read, scan_outcome, splits_by_reader
from starscan.provider.spark_jobs import SparkJobTracker
from starscan.thrift import status

log = logging.getLogger("starscan.ops")


def _code_name(status) -> str:
    return wire.TStatusCode._VALUES_TO_NAMES.get(status.status_code, str(status.status_code)) if status else "UNKNOWN"


class BeInstrumentation:
    """The BE's metrics, scan profiles and Spark-job lookups, wired to its contexts.
    ``profiles_enabled`` is read at every open (a run-time key)."""

    def __init__(self, contexts: ScanContextManager, metrics: ScanMetrics, profiles: ProfileStore,
                 jobs: SparkJobTracker, profiles_enabled: Callable[[], bool]):
        self.contexts = contexts
        self.metrics = metrics
        self.profiles = profiles
        self.jobs = jobs
        self.profiles_enabled = profiles_enabled
        # The profile is finished before the service writes the scan's audit line with it.
        contexts.add_removed_listener(self.scan_ended, first=True)

    def wrap(self, handler) -> InstrumentedHandler:
        return InstrumentedHandler(handler, self)

    # ---- ScanService's observer (provider/service.py ScanObserver): every front's scanners ----
    def opened(self, ctx: ScanContext | None, error: StarscanError | None, started: float, seconds: float) -> None:
        if error is None:
            self.metrics.opened.inc()
            if ctx is not None and self.profiles_enabled():
                self.profiles.start(ctx, started, seconds)
            return
        code = _code_name(status.from_error(error))  # the code the reader gets, on any front
        self.metrics.failed.labels(code).inc()
        if code == "NOT_AUTHORIZED":
            self.metrics.auth_failures.labels("be").inc()

    def replied(self, ctx: ScanContext | None, rows: int, nbytes: int, error: BaseException | None,
                started: float, ended: float) -> None:
        if error is not None and _code_name(status.from_error(error)) == "NOT_AUTHORIZED":
            self.metrics.auth_failures.labels("be").inc()
        if ctx is None:
            return
        self.metrics.sent(rows, nbytes)
        profile = self.profiles.get(ctx.context_id)
        if profile is not None:
            with profile.lock:
                profile.rpc["get_next"].add(ended - started)
                if rows > 0:
                    profile.batches += 1
                    if profile.first_batch_ms is None:
                        profile.first_batch_ms = (ended - profile.started) * 1000
                profile.rows, profile.bytes = ctx.rows_sent, ctx.bytes_sent

    def peek(self, context_id) -> ScanContext | None:
        try:
            return self.contexts.get(context_id)
        except StarscanError:
            return None

    def scan_ended(self, ctx: ScanContext, how: str) -> None:
        if ctx.open_error is not None:
            return  # refused at open: counted there
        outcome, error = scan_outcome(ctx, how)
        if outcome == "failed":
            err = getattr(ctx.queue, "error", None)
            self.metrics.failed.labels(getattr(err, "status_code", "INTERNAL_ERROR")).inc()
        if how == "reaped":
            self.metrics.reaped.inc()
        elif how == "closed":
            self.metrics.closed.inc()
        read = rows_read(ctx)
        if read:
            self.metrics.rows_read.inc(read)
        splits = splits_by_reader(ctx)
        if splits is not None:
            self.metrics.splits_read.labels("be").inc(splits[0])
            self.metrics.splits_read.labels("spark").inc(splits[1])
        profile = self.profiles.finish(ctx, outcome, error)
        if profile is not None:
            ctx.info.profile = profile.summary()
            log.debug("scan profile %s", profile.summary(), extra=logs.scan_fields(ctx))
        if ctx.scan is not None:
            self.jobs.scan_ended(ctx.context_id, profile, count_reads=read is None)


class InstrumentedHandler:
    """The Thrift handler with each call's latency and reply code measured (the scanners
    themselves are measured by the scan core's observer, above). Same methods, same replies."""

    def __init__(self, inner, be: BeInstrumentation):
        self.inner = inner
        self.be = be

    def _timed(self, call: str, params):
        started = time.monotonic()
        reply = getattr(self.inner, call)(params)
        self.be.metrics.rpc_seconds.labels(call).observe(time.monotonic() - started)
        self.be.metrics.rpc_replies.labels(call, _code_name(reply.status)).inc()
        return reply

    def open_scanner(self, params):
        return self._timed("open_scanner", params)

    def get_next(self, params):
        return self._timed("get_next", params)

    def close_scanner(self, params):
        started = time.monotonic()
        reply = self._timed("close_scanner", params)
        profile = self.be.profiles.get(getattr(params, "context_id", None) or "")
        if profile is not None:
            with profile.lock:
                profile.rpc["close_scanner"].add(time.monotonic() - started)
        return reply
