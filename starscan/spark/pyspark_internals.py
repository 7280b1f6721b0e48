"""What starscan reaches inside pyspark to find out that Spark's JVM died and to start a new
one in the same process. pyspark has no public way to do either: a SparkSession whose JVM is
gone keeps its objects, and ``SparkSession.builder.getOrCreate`` hands them out again.

Tested on every Spark line starscan supports, 3.5 to 4.3 (``TESTED_ON``; the names are the
same on each). ``check()`` says which of the names used here is
missing: a node logs it as an error when it starts, and the unit tests fail on it, instead
of a restart that silently does nothing.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("starscan.spark")

TESTED_ON = ">=3.5.5,<4.4"

#: (module, class, attribute) of the process-wide state pyspark keeps for its one JVM.
_PROCESS_STATE = (
    ("pyspark", "SparkContext", "_gateway"),  # pyspark.core.context from 4.0, pyspark.context before
    ("pyspark", "SparkContext", "_jvm"),
    ("pyspark", "SparkContext", "_active_spark_context"),
    ("pyspark", "SparkContext", "_lock"),
    ("pyspark.sql.session", "SparkSession", "_instantiatedSession"),
    ("pyspark.sql.session", "SparkSession", "_activeSession"),
    ("pyspark.sql.context", "SQLContext", "_instantiatedContext"),
)


def check() -> list[str]:
    """The names this module needs that the installed pyspark lacks (empty when all are there)."""
    import importlib

    missing = []
    for module, cls, attribute in _PROCESS_STATE:
        try:
            owner = getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError):
            missing.append(f"{module}.{cls}")
            continue
        if not hasattr(owner, attribute):
            missing.append(f"{module}.{cls}.{attribute}")
    return missing


def jvm_process(session: Any) -> Any:
    """The ``subprocess.Popen`` of the session's JVM (pyspark keeps it on its Py4J gateway
    as ``proc``), or None when pyspark did not start the JVM (a gateway given to it)."""
    gateway = getattr(session.sparkContext, "_gateway", None)
    return getattr(gateway, "proc", None)


def jvm_exited(session: Any) -> bool:
    """Whether the JVM process of ``session`` has ended (killed, crashed, exited on an
    OutOfMemoryError). Reads only the process's state: no call into the JVM."""
    proc = jvm_process(session)
    return proc is not None and proc.poll() is not None


def context_stopped(session: Any) -> bool:
    """Whether the session's SparkContext is stopped, asked of the JVM (raises a Py4J error
    when the JVM does not answer)."""
    jsc = session.sparkContext._jsc
    return jsc is None or bool(jsc.sc().isStopped())


def forget_session(session: Any) -> None:
    """Drop pyspark's process-wide hold on ``session`` (whose JVM died or whose context
    stopped), so that the next ``SparkSession.builder.getOrCreate`` starts a new SparkContext,
    and a new JVM when the old one is gone. Nothing here waits on the old JVM."""
    from pyspark import SparkContext
    from pyspark.sql.context import SQLContext
    from pyspark.sql.session import SparkSession

    sc = session.sparkContext
    exited = jvm_exited(session)
    if not exited:
        try:  # the JVM is there, its context stopped: stop it cleanly, keep the JVM
            session.stop()
        except Exception as exc:  # noqa: BLE001 - an unanswering JVM is dropped below
            log.info("the old SparkSession does not answer (%s): its JVM is dropped", exc)
            exited = True
    _drop_context(sc)
    with SparkContext._lock:
        if SparkContext._active_spark_context is sc:
            SparkContext._active_spark_context = None
    if exited:
        forget_gateway()
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None


def forget_gateway() -> None:
    """Drop pyspark's JVM gateway and everything started on it (after a start that failed
    half-way: a JVM that was launched, then died or never answered), so that the next start
    launches a new JVM instead of calling the dead one again. A JVM still running is killed."""
    from pyspark import SparkContext
    from pyspark.sql.context import SQLContext
    from pyspark.sql.session import SparkSession

    with SparkContext._lock:
        gateway = SparkContext._gateway
        SparkContext._gateway = None
        SparkContext._jvm = None
        active = SparkContext._active_spark_context
        SparkContext._active_spark_context = None
    if active is not None:
        _drop_context(active)
    if gateway is not None:
        try:
            gateway.close(keep_callback_server=False)
        except Exception:  # noqa: BLE001 - its sockets lead nowhere now
            pass
        proc = getattr(gateway, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(30)
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None


def _drop_context(sc: Any) -> None:
    """Close a dead SparkContext's Python side: its accumulator server (a socket server
    thread) and its handle of the JVM's context."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None:
        try:
            server.shutdown()
            server.server_close()
        except Exception:  # noqa: BLE001 - a Python socket server of the old context
            pass
        sc._accumulatorServer = None
    sc._jsc = None
