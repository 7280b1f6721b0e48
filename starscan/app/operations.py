"""What the operations endpoints (planner/ops_routes.py) read and change, wired from the
server's parts: the metrics registry, scan profiles, the Spark-job lookups, the recent
plans of the admin page, the effective configuration (``/varz``) and run-time changes.

Who is an admin: the user ``root``, and any user holding the grant ``admin`` in the users
file (``starscan user grant NAME admin``; ``UserStore.is_admin``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from starscan.arrow.chunk_cache import ChunkCacheMetrics
from starscan.planner.consumer_lag import ConsumerLag, ConsumerLagMetrics
from starscan.provider.contexts import ScanContextManager
from starscan.provider.instrumentation import BeInstrumentation
from starscan.provider.metrics import ScanMetrics, SparkLifeCollector
from starscan.provider.profile import ProfileStore
from starscan.provider.result_cache import CacheMetrics
from starscan.provider.service import ScanService
from starscan.provider.spark_jobs import SparkJobTracker
from starscan.security.audit import AuditLog
from starscan.security.users import UserStore
from starscan.settings.config import Settings
from starscan.settings.runtime import RUNTIME_KEYS, LiveSettings
from starscan.spark.handle import SparkHandle, SparkState

RECENT_PLANS = 50
_PLAN_KEYS = ("ts", "user", "client", "table", "query_id", "status", "duration_ms", "tablets", "columns", "error", "sql")
_SECRET_WORDS = ("secret", "password", "passwd", "token", "credential", "key")


class Operations:
    def __init__(self, live: LiveSettings, service: ScanService, contexts: ScanContextManager, users: UserStore,
                 audit: AuditLog, spark, bound_ports: Callable[[], dict[str, int | None]],
                 consumer_lags: Callable[[], list[ConsumerLag]] = list):
        self.live = live
        self.consumer_lags = consumer_lags  # incremental readers' lag (the admin page, /metrics)
        self.spark = spark
        self.users = users
        self.contexts = contexts
        self._bound_ports = bound_ports
        self.metrics = ScanMetrics(contexts, lambda: service.budget)
        service.engine_listeners.append(lambda engine: self.metrics.scans_by_engine.labels(engine).inc())
        service.reader_lost_listeners.append(self.metrics.readers_lost.inc)
        self.metrics.registry.register(CacheMetrics(lambda: service.result_cache))
        self.metrics.registry.register(ChunkCacheMetrics(lambda: service.chunk_cache))
        self.metrics.registry.register(ConsumerLagMetrics(lambda: self.consumer_lags()))
        self.metrics.registry.register(SparkLifeCollector(spark))
        self.profiles = ProfileStore(live.current.profile_retention_s)
        self.jobs = SparkJobTracker(spark, self.metrics)
        self.be = BeInstrumentation(contexts, self.metrics, self.profiles, self.jobs,
                                    lambda: self.settings.enable_profile_for_external_plan)
        service.observer = self.be  # every front's scanners: Thrift's and Flight's alike
        self.recent_plans: deque = deque(maxlen=RECENT_PLANS)
        audit.add_listener(self._audit_line)

    @property
    def settings(self) -> Settings:
        return self.live.current

    def _audit_line(self, line: dict[str, Any]) -> None:
        """Keep the recent plan lines for the admin page."""
        if line.get("event") != "plan":
            return
        entry = {k: line.get(k) for k in _PLAN_KEYS}
        if isinstance(entry["sql"], str) and len(entry["sql"]) > 300:
            entry["sql"] = entry["sql"][:300] + "..."
        self.recent_plans.appendleft(entry)

    def spark_status(self) -> dict[str, str]:
        """The node's Spark for the admin page, asked of nobody (no call into the JVM)."""
        if isinstance(self.spark, SparkHandle):
            state, message = self.spark.status()
            return {"state": state.value, "message": message}
        return {"state": SparkState.UP.value, "message": "a SparkSession of the embedding process"}

    def live_spark_jobs(self, context_id: str) -> list[int]:
        return self.jobs.live_jobs(context_id)

    def varz(self) -> dict:
        config = self.settings.model_dump(mode="json")
        for key, bound in self._bound_ports().items():  # the ports bound (0 in the config picks one)
            if bound:
                config[key] = bound
        for key in ("spark_conf", "iceberg_catalog"):  # free-form options: mask the ones that name a secret
            config[key] = {k: ("**********" if any(w in k.lower() for w in _SECRET_WORDS) else v)
                           for k, v in (config.get(key) or {}).items()}
        return {"config": config, "runtime_changeable": list(RUNTIME_KEYS)}

    def update_config(self, changes: dict[str, str]) -> dict[str, Any]:
        """Validate every change, then apply them all. Raises ConfigChangeRefused."""
        return self.live.apply(changes)

    def stop(self) -> None:
        self.jobs.stop()
