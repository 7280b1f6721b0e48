"""A SparkSession that is still starting: what a BE node works with from its first second.

Spark's own start (``SparkSession.builder.getOrCreate``: the JVM, its classes, the
SparkContext) takes about 11 s on a 2-core machine. A BE need not wait for it to answer: it
listens at once, and the arrow engine's scans are read by the BE itself (with pyarrow,
starscan.provider.spark_scan's local reads) until Spark's tasks join. ``SparkLater`` builds
the session on a thread of its own; any use of it as a session waits until the session is
there (or raises what stopped it from starting), while ``conf_value`` and
``calendar_rules`` answer at once from the configuration the session is being built with.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from starscan.arrow.rebase import CalendarRules, machine_zone

log = logging.getLogger("starscan.spark")


class SparkLater:
    """A SparkSession being built by ``build`` on a thread of its own, with ``conf`` (the
    configuration it is built with)."""

    def __init__(self, build: Callable[[], Any], conf: dict[str, str]):
        self.ready = threading.Event()
        self.planned_conf = dict(conf)
        self._session: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Any], None]] = []
        self._lock = threading.Lock()
        self._started = time.monotonic()
        threading.Thread(target=self._build, args=(build,), name="spark-session", daemon=True).start()

    def _build(self, build: Callable[[], Any]) -> None:
        try:
            session = build()
        except BaseException as exc:  # noqa: BLE001 - handed to whoever uses the session
            log.error("Spark did not start: %s", exc)
            self._error = exc
            self.ready.set()
            return
        with self._lock:
            self._session = session
            callbacks, self._callbacks = self._callbacks, []
        log.info("SparkSession up, %.1f s after the node began starting it", time.monotonic() - self._started)
        self.ready.set()
        for callback in callbacks:
            try:
                callback(session)
            except Exception:  # noqa: BLE001 - one callback's failure is its own
                log.exception("a callback on Spark's start failed")

    def session(self) -> Any:
        """The session, once started (waits); raises what kept it from starting."""
        self.ready.wait()
        if self._error is not None:
            raise self._error
        return self._session

    def when_ready(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(session)`` once the session is there (now, if it is)."""
        with self._lock:
            if self._session is None:
                self._callbacks.append(callback)
                return
            session = self._session
        callback(session)

    def __getattr__(self, name: str) -> Any:
        # Anything not defined here is the session's: wait for it.
        return getattr(self.session(), name)


def started(spark: Any) -> bool:
    """Whether ``spark`` can be used without waiting (a SparkSession is; a SparkLater once up)."""
    return not isinstance(spark, SparkLater) or (spark.ready.is_set() and spark._error is None)


def conf_value(spark: Any, key: str) -> str | None:
    """A Spark setting of the session, without waiting for a session still starting."""
    if isinstance(spark, SparkLater) and not started(spark):
        return spark.planned_conf.get(key)
    value = spark.conf.get(key, None)
    return None if value is None else str(value)


def calendar_rules(spark: Any) -> CalendarRules:
    """The session's rules for older files' dates and timestamps (starscan.arrow.rebase),
    without waiting for a session still starting (its configuration and this machine's zone,
    which its JVM will have)."""
    if isinstance(spark, SparkLater) and not started(spark):
        return CalendarRules.of_conf(spark.planned_conf.get, machine_zone())
    return CalendarRules.of_session(spark)
