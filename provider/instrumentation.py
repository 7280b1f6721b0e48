"""What the BE measures: metrics and profiles around each Thrift call (a wrapper with the
handler's own methods and replies), and the accounting of every scan as its context goes."""

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
    """The BE handler with metrics and profiles around each RPC. Same methods, same replies."""

    def __init__(self, inner, be: BeInstrumentation):
        self.inner = inner
        self.be = be

    def open_scanner(self, params):
        be = self.be
        started = time.monotonic()
        reply = self.inner.open_scanner(params)
        seconds = time.monotonic() - started
        code = _code_name(reply.status)
        be.metrics.rpc_seconds.labels("open_scanner").observe(seconds)
        be.metrics.rpc_replies.labels("open_scanner", code).inc()
        if code == "OK":
            be.metrics.opened.inc()
            ctx = be.peek(reply.context_id)
            if ctx is not None and be.profiles_enabled():
                be.profiles.start(ctx, started, seconds)
        else:
            be.metrics.failed.labels(code).inc()
            if code == "NOT_AUTHORIZED":
                be.metrics.auth_failures.labels("be").inc()
        return reply

    def get_next(self, params):
        be = self.be
        ctx = be.peek(params.context_id)
        rows0, bytes0 = (ctx.rows_sent, ctx.bytes_sent) if ctx is not None else (0, 0)
        started = time.monotonic()
        reply = self.inner.get_next(params)
        now = time.monotonic()
        code = _code_name(reply.status)
        be.metrics.rpc_seconds.labels("get_next").observe(now - started)
        be.metrics.rpc_replies.labels("get_next", code).inc()
        if code == "NOT_AUTHORIZED":
            be.metrics.auth_failures.labels("be").inc()
        if ctx is not None:
            rows, nbytes = ctx.rows_sent - rows0, ctx.bytes_sent - bytes0
            be.metrics.sent(rows, nbytes)
            profile = be.profiles.get(ctx.context_id)
            if profile is not None:
                with profile.lock:
                    profile.rpc["get_next"].add(now - started)
                    if rows > 0:
                        profile.batches += 1
                        if profile.first_batch_ms is None:
                            profile.first_batch_ms = (now - profile.started) * 1000
                    profile.rows, profile.bytes = ctx.rows_sent, ctx.bytes_sent
        return reply

    def close_scanner(self, params):
        be = self.be
        started = time.monotonic()
        reply = self.inner.close_scanner(params)
        seconds = time.monotonic() - started
        be.metrics.rpc_seconds.labels("close_scanner").observe(seconds)
        be.metrics.rpc_replies.labels("close_scanner", _code_name(reply.status)).inc()
        profile = be.profiles.get(params.context_id or "")
        if profile is not None:
            with profile.lock:
                profile.rpc["close_scanner"].add(seconds)
        return reply
