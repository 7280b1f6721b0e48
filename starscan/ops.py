"""Operations glue of one server: metrics, scan profiles, recent plans, runtime
configuration. ``StarscanServer`` makes one ``Operations`` and calls it from two places:
``instrument(handler)`` wraps the BE's Thrift handler, ``install(app)`` adds the HTTP
routes (``/metrics``, ``/varz``, ``/api/update_config``, profiles, the admin page).

Who is an admin: the user ``root``, and any user holding the grant ``admin`` in the users
file (``starscan user grant NAME admin``; ``UserStore.is_admin``). Run-time configuration
itself lives in starscan.runtime_config; this module only reports and applies it.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from typing import Any

from starscan import logs
from starscan.errors import StarscanError
from starscan.provider.metrics import ScanMetrics
from starscan.provider.profile import ProfileStore, spark_jobs
from starscan.provider.result_cache import CacheMetrics
from starscan.provider.service import scan_outcome
from starscan.runtime_config import RUNTIME_KEYS, LiveSettings
from starscan.thrift_defs import wire

log = logging.getLogger("starscan.ops")

RECENT_PLANS = 50
_SECRET_WORDS = ("secret", "password", "passwd", "token", "credential", "key")


def _code_name(status) -> str:
    return wire.TStatusCode._VALUES_TO_NAMES.get(status.status_code, str(status.status_code)) if status else "UNKNOWN"


class InstrumentedHandler:
    """The BE handler with metrics and profiles around each RPC. Same methods, same replies."""

    def __init__(self, inner, ops: Operations):
        self.inner = inner
        self.ops = ops

    def open_scanner(self, params):
        started = time.monotonic()
        reply = self.inner.open_scanner(params)
        seconds = time.monotonic() - started
        code = _code_name(reply.status)
        ops = self.ops
        ops.metrics.rpc_seconds.labels("open_scanner").observe(seconds)
        ops.metrics.rpc_replies.labels("open_scanner", code).inc()
        if code == "OK":
            ops.metrics.opened.inc()
            ctx = ops.peek(reply.context_id)
            if ctx is not None and ops.settings.enable_profile_for_external_plan:
                ops.profiles.start(ctx, started, seconds)
        else:
            ops.metrics.failed.labels(code).inc()
            if code == "NOT_AUTHORIZED":
                ops.metrics.auth_failures.labels("be").inc()
        return reply

    def get_next(self, params):
        ops = self.ops
        ctx = ops.peek(params.context_id)
        rows0, bytes0 = (ctx.rows_sent, ctx.bytes_sent) if ctx is not None else (0, 0)
        started = time.monotonic()
        reply = self.inner.get_next(params)
        now = time.monotonic()
        code = _code_name(reply.status)
        ops.metrics.rpc_seconds.labels("get_next").observe(now - started)
        ops.metrics.rpc_replies.labels("get_next", code).inc()
        if code == "NOT_AUTHORIZED":
            ops.metrics.auth_failures.labels("be").inc()
        if ctx is not None:
            rows, nbytes = ctx.rows_sent - rows0, ctx.bytes_sent - bytes0
            ops.metrics.sent(rows, nbytes)
            profile = ops.profiles.get(ctx.context_id)
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
        started = time.monotonic()
        reply = self.inner.close_scanner(params)
        seconds = time.monotonic() - started
        self.ops.metrics.rpc_seconds.labels("close_scanner").observe(seconds)
        self.ops.metrics.rpc_replies.labels("close_scanner", _code_name(reply.status)).inc()
        profile = self.ops.profiles.get(params.context_id or "")
        if profile is not None:
            with profile.lock:
                profile.rpc["close_scanner"].add(seconds)
        return reply


class _PlanCapture(logging.Handler):
    """Keeps the audit log's recent plan lines for the admin page."""

    def __init__(self, sink: deque):
        super().__init__(logging.INFO)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = json.loads(record.getMessage())
        except ValueError:
            return
        if line.get("event") == "plan":
            keep = ("ts", "user", "client", "table", "query_id", "status", "duration_ms", "tablets", "columns", "error", "sql")
            entry = {k: line.get(k) for k in keep}
            if isinstance(entry["sql"], str) and len(entry["sql"]) > 300:
                entry["sql"] = entry["sql"][:300] + "..."
            self.sink.appendleft(entry)


class Operations:
    def __init__(self, server):
        self.server = server
        self.metrics = ScanMetrics(server.contexts, lambda: getattr(server.service, "budget", None))
        server.service.engine_listeners.append(lambda engine: self.metrics.scans_by_engine.labels(engine).inc())
        self.metrics.registry.register(CacheMetrics(lambda: getattr(server.service, "result_cache", None)))
        self.profiles = ProfileStore(server.settings.profile_retention_s)
        self.recent_plans: deque = deque(maxlen=RECENT_PLANS)
        self._capture = _PlanCapture(self.recent_plans)
        server.audit.logger.addHandler(self._capture)
        self._jobs: queue.Queue = queue.Queue(maxsize=10_000)
        self._worker = threading.Thread(target=self._spark_lookups, name="scan-profile-spark", daemon=True)
        self._worker.start()
        # The profile is finished before the service writes the scan's audit line with it.
        server.contexts.add_removed_listener(self._removed, first=True)
        self.live: LiveSettings = server.live_settings

    @property
    def settings(self):
        return self.server.settings

    def peek(self, context_id):
        try:
            return self.server.contexts.get(context_id)
        except StarscanError:
            return None

    # ---- hooks ----
    def instrument(self, handler) -> InstrumentedHandler:
        return InstrumentedHandler(handler, self)


    # ---- scan ends ----
    def _removed(self, ctx, how: str) -> None:
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
        profile = self.profiles.finish(ctx, outcome, error)
        if profile is not None:
            ctx.info["profile"] = profile.summary()
            log.debug("scan profile %s", profile.summary(), extra=logs.scan_fields(ctx))
        if ctx.scan is not None:
            try:
                self._jobs.put_nowait((ctx.context_id, profile))
            except queue.Full:
                pass

    def _spark_lookups(self) -> None:
        """Spark job ids, stage ids and durations of ended scans (py4j calls, off the RPC path)."""
        while True:
            item = self._jobs.get()
            if item is None:  # stop()
                return
            context_id, profile = item
            try:
                for _ in range(25):  # the status store hears of the jobs' end asynchronously
                    job_ids, stage_ids, durations, done = spark_jobs(self.server.spark, context_id)
                    if done:
                        break
                    time.sleep(0.2)
                for seconds in durations:
                    self.metrics.spark_job_seconds.observe(seconds)
                if profile is not None:
                    with profile.lock:
                        profile.spark_job_ids, profile.spark_stage_ids = job_ids, stage_ids
                        profile.spark_job_ms = sum(durations) * 1000 if durations else None
            except Exception:  # noqa: BLE001 - Spark stopping, or the gateway gone
                log.debug("Spark job lookup failed for %s", context_id, exc_info=True)

    def stop(self) -> None:
        """End the Spark-job lookup thread (after the lookups already queued)."""
        try:
            self._jobs.put(None, timeout=5)
        except queue.Full:
            return
        self._worker.join(timeout=10)

    def live_spark_jobs(self, context_id: str) -> list[int]:
        try:
            return sorted(self.server.spark.sparkContext.statusTracker().getJobIdsForGroup(context_id))
        except Exception:  # noqa: BLE001
            return []

    # ---- runtime configuration ----
    def varz(self) -> dict:
        config = self.settings.model_dump(mode="json")
        for key in ("http_port", "be_port", "query_port"):  # the ports bound (0 in the config picks one)
            bound = getattr(self.server, key, None)
            if bound:
                config[key] = bound
        config["spark_conf"] = {k: ("**********" if any(w in k.lower() for w in _SECRET_WORDS) else v)
                                for k, v in (config.get("spark_conf") or {}).items()}
        return {"config": config, "runtime_changeable": list(RUNTIME_KEYS)}

    def update_config(self, changes: dict[str, str]) -> dict[str, Any]:
        """Validate every change, then apply them all. Raises ConfigChangeRefused."""
        return self.live.apply(changes)
