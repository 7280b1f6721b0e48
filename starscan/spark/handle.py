"""The SparkSession of a node, as a handle that outlives the session: started on a thread of
its own, watched, and started again when its JVM dies.

Spark's own start (``SparkSession.builder.getOrCreate``: the JVM, its classes, the
SparkContext) takes about 11 s on a 2-core machine. A BE need not wait for it to answer: it
listens at once, and the arrow engine's scans are read by the BE itself (with pyarrow,
starscan.provider.spark_scan's local reads) until Spark's tasks join.

The JVM can die under a running node (killed, crashed, an OutOfMemoryError makes Spark exit
it). Then the handle forgets the dead session and builds a new one (bounded attempts, with a
backoff between them), while the node goes on answering: the BE reads arrow-engine scans
itself as at its start, health says RECOVERING, and any use of the session waits for the new
one. Code holds the handle, never the session: every attribute not defined here is the
current session's (``__getattr__``), waited for while Spark is (re)starting.

``conf_value`` and ``calendar_rules`` answer at once from the configuration the session is
built with, whether or not a session is up.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from starscan.arrow.rebase import CalendarRules, machine_zone
from starscan.core.errors import JavaMissingError
from starscan.spark import compat, pyspark_internals

log = logging.getLogger("starscan.spark")

#: Seconds between attempts to start a new SparkSession after the JVM died (the last repeats
#: until ``restart_attempts`` are spent).
RESTART_BACKOFF_S = (0.0, 2.0, 5.0, 10.0, 20.0)
#: How often the watcher looks at the JVM's process (no call into the JVM), and how many of
#: those looks pass between two questions to the JVM itself (is the SparkContext stopped?).
WATCH_S = 0.25
ASK_JVM_EVERY = 20


class SparkState(enum.Enum):
    STARTING = "STARTING"  # the first session is being built
    UP = "UP"
    RECOVERING = "RECOVERING"  # the JVM died; a new session is being built
    FAILED = "FAILED"  # no session: the first start or every restart attempt failed
    STOPPED = "STOPPED"


class SparkHandle:
    """A node's SparkSession, built by ``build`` on a thread of its own, with ``conf`` (the
    configuration it is built with). ``on_start`` callbacks run on every session started
    (the first and each restart): settings a session needs at run time."""

    def __init__(self, build: Callable[[], Any], conf: dict[str, str], restart_attempts: int = 5,
                 backoff_s: Sequence[float] = RESTART_BACKOFF_S, watch: bool = True):
        self.ready = threading.Event()  # set while a session is up, and once Spark failed for good
        self.planned_conf = dict(conf)
        self.restart_attempts = restart_attempts
        self.backoff_s = tuple(backoff_s) or (0.0,)
        self.restarts = 0  # sessions started after a JVM died
        self.restart_failures = 0  # attempts that did not start one
        self.last_recovery_s: float | None = None  # from the death seen to the new session up
        self.down_reason: str | None = None  # why the last session was given up
        self._build_session = build
        self._session: Any = None
        self._error: BaseException | None = None
        self._state = SparkState.STARTING
        self._callbacks: list[Callable[[Any], None]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()  # the watcher looks now (a user of the session saw it fail)
        self._stopped = threading.Event()
        self._started = time.monotonic()
        self._watch = watch
        unsupported = compat.unsupported_line()
        if unsupported:  # installed past the server extra's range: it may work, it was not tested
            log.error("%s", unsupported)
        missing = pyspark_internals.check()
        if missing:  # a restart would not start a new JVM: say so now, not at the first death
            log.error("this pyspark lacks %s: a JVM that dies will not be replaced (tested on pyspark %s)",
                      ", ".join(missing), pyspark_internals.TESTED_ON)
        threading.Thread(target=self._life, name="spark-session", daemon=True).start()

    # ---- state ----
    @property
    def state(self) -> SparkState:
        return self._state

    def status(self) -> tuple[SparkState, str]:
        """The state and a sentence on it for health checks and the admin page."""
        state = self._state
        if state is SparkState.RECOVERING:
            return state, (f"Spark's JVM died ({self.down_reason}); a new SparkSession is starting "
                           f"(restart {self.restarts + 1}, {time.monotonic() - self._down_at:.0f} s so far)")
        if state is SparkState.FAILED:
            return state, f"Spark did not start: {self._error}"
        if state is SparkState.STARTING:
            return state, "Spark is starting"
        if state is SparkState.STOPPED:
            return state, "Spark is stopped: the node is stopping"
        return state, "Spark is up" if self.restarts == 0 else f"Spark is up (restarted {self.restarts} time(s))"

    def session(self) -> Any:
        """The session, once up (waits while Spark starts or restarts); raises what kept it
        from starting."""
        self.ready.wait()
        with self._lock:
            if self._session is None:
                raise self._error or RuntimeError("Spark is stopped")
            return self._session

    def when_ready(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(session)`` on every session started: now, if one is up, and after
        each restart."""
        with self._lock:
            self._callbacks.append(callback)
            session = self._session if self._state is SparkState.UP else None
        if session is not None:
            callback(session)

    def check(self) -> None:
        """Look at the JVM now (a caller saw a Spark call fail): restart if it is gone."""
        self._wake.set()

    def seen_down(self, reason: str) -> None:
        """A caller saw this session's JVM process exited: the handle is not up from now on,
        so a scan's next reader waits for the new session instead of starting Spark jobs that
        fail at once on the dead one (each a lost reader: a scan lost six in 10 ms and failed,
        while the watcher had yet to look on a busy machine). The watcher, woken, restarts it.
        A handle that does not watch (a session not ours to restart) is only woken."""
        with self._lock:
            if self._watch and self._state is SparkState.UP and self._session is not None:
                self._state = SparkState.RECOVERING
                self.down_reason, self._down_at = reason, time.monotonic()
                self.ready.clear()
        self._wake.set()

    def stop(self) -> None:
        """Stop watching and stop the session, if one is up."""
        self._stopped.set()
        self._wake.set()
        with self._lock:
            session, self._session = self._session, None
            self._state = SparkState.STOPPED
            self.ready.set()
        if session is not None:
            session.stop()

    def __getattr__(self, name: str) -> Any:
        # Anything not defined here is the session's: wait for it.
        return getattr(self.session(), name)

    # ---- the session's life ----
    def _life(self) -> None:
        if not self._start(first=True):
            return
        while self._watch and not self._stopped.is_set():
            reason = self._watch_until_down()
            if reason is None:
                return
            self._recover(reason)
            if self._state is not SparkState.UP:
                return

    def _start(self, first: bool) -> bool:
        """Build a session (attempts with backoff after a restart); True once one is up."""
        # The first start is tried as often as a restart: its JVM can die while starting too
        # (killed, or out of memory on a busy machine).
        attempts = max(1, self.restart_attempts)
        for attempt in range(attempts):
            pause = self.backoff_s[min(attempt, len(self.backoff_s) - 1)]
            if (attempt or not first) and self._stopped.wait(pause):
                return False
            try:
                session = self._build_session()
            except BaseException as exc:  # noqa: BLE001 - handed to whoever uses the session
                self._error = exc
                if not first:
                    self.restart_failures += 1
                log.error("Spark %s attempt %d of %d failed: %s", "start" if first else "restart", attempt + 1,
                          attempts, exc)
                if isinstance(exc, JavaMissingError):
                    break  # no attempt can succeed
                try:  # a JVM launched by the attempt and dead (or deaf) since: the next one launches anew
                    pyspark_internals.forget_gateway()
                except Exception:  # noqa: BLE001
                    log.exception("forgetting the failed attempt's JVM failed")
                continue
            with self._lock:
                if self._stopped.is_set():
                    session.stop()
                    return False
                self._session, self._error = session, None
                self._state = SparkState.UP
                callbacks = list(self._callbacks)
            for callback in callbacks:
                try:
                    callback(session)
                except Exception:  # noqa: BLE001 - one callback's failure is its own
                    log.exception("a callback on Spark's start failed")
            if first:
                log.info("SparkSession up, %.1f s after the node began starting it", time.monotonic() - self._started)
            else:
                self.restarts += 1
                self.last_recovery_s = time.monotonic() - self._down_at
                log.warning("SparkSession restarted %.1f s after its JVM was seen dead", self.last_recovery_s)
            self.ready.set()
            return True
        with self._lock:
            self._state = SparkState.FAILED
        self.ready.set()
        return False

    def _watch_until_down(self) -> str | None:
        """Watch the session until its JVM is gone (the reason) or the handle stops (None)."""
        looks = 0
        while not self._stopped.is_set():
            woken = self._wake.wait(WATCH_S)
            self._wake.clear()
            if self._stopped.is_set():
                return None
            session = self._session
            if session is None:
                return None
            looks += 1
            if pyspark_internals.jvm_exited(session):
                code = pyspark_internals.jvm_process(session).poll()
                return f"its process exited with code {code}"
            if woken or looks % ASK_JVM_EVERY == 0:
                try:
                    if pyspark_internals.context_stopped(session):
                        return "its SparkContext stopped"
                except Exception as exc:  # noqa: BLE001 - Py4J cannot reach it
                    return f"it does not answer: {type(exc).__name__}"
        return None

    def _recover(self, reason: str) -> None:
        with self._lock:
            if self._stopped.is_set():
                return
            old, self._session = self._session, None
            if self._state is not SparkState.RECOVERING:  # else a caller saw it first (seen_down)
                self._down_at = time.monotonic()
            self._state = SparkState.RECOVERING
            self.down_reason = reason
            self.ready.clear()
        try:
            pyspark_internals.forget_session(old)
        except Exception:  # noqa: BLE001 - the new session is started anyway
            log.exception("forgetting the dead SparkSession failed")
        if self.restart_attempts <= 0:
            log.error("Spark's JVM is gone (%s), and spark_restart_attempts is 0: restart starscan", reason)
            with self._lock:
                self._error = RuntimeError(f"its JVM is gone ({reason}), and spark_restart_attempts is 0: restart starscan")
                self._state = SparkState.FAILED
            self.ready.set()
            return
        log.error("Spark's JVM is gone (%s): starting a new SparkSession", reason)
        self._start(first=False)

    _down_at = 0.0


def started(spark: Any) -> bool:
    """Whether ``spark`` can be used without waiting (a SparkSession is; a handle while up)."""
    return not isinstance(spark, SparkHandle) or spark.state is SparkState.UP


def conf_value(spark: Any, key: str) -> str | None:
    """A Spark setting of the session, without waiting for a session (re)starting."""
    if isinstance(spark, SparkHandle) and not started(spark):
        return spark.planned_conf.get(key)
    value = spark.conf.get(key, None)
    return None if value is None else str(value)


def calendar_rules(spark: Any) -> CalendarRules:
    """The session's rules for older files' dates and timestamps (starscan.arrow.rebase),
    without waiting for a session (re)starting (its configuration and this machine's zone,
    which its JVM will have)."""
    if isinstance(spark, SparkHandle) and not started(spark):
        return CalendarRules.of_conf(spark.planned_conf.get, machine_zone())
    return CalendarRules.of_session(spark, pyspark_internals.jvm_time_zone(spark))
