"""A starscan node's life, from its settings to its stop: its SparkSession, the server of
its role (FE, BE or both), the demo tables in an empty local warehouse, and a stop on
SIGTERM/SIGINT that is bounded in time. The command line (starscan.app.cli) only parses the
options and turns failures into exit codes."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

from starscan import __version__
from starscan.app.ports import CannotListen
from starscan.core.errors import StarscanError
from starscan.settings.config import Settings

log = logging.getLogger("starscan")


#: An FE runs no scans: its Spark only infers schemas, answers the MySQL port's SELECTs and
#: writes the demo. A small local one, whatever spark_master says.
FE_SPARK_MASTER = "local[2]"


def run_node(settings: Settings, fe: bool, be: bool) -> None:
    """Run a node until SIGTERM or SIGINT. Raises JavaMissingError (no usable Java),
    StarscanError (a store that cannot be opened) or CannotListen (a port cannot be bound)."""
    from starscan.app.server import StarscanServer
    from starscan.core.logs import quiet_spark
    from starscan.spark.handle import SparkHandle
    from starscan.spark.session import build_session, check_java, spark_conf

    if fe and not be:
        settings = settings.model_copy(update={"spark_master": FE_SPARK_MASTER})
    # Every node holds its Spark through a handle that starts a new session when the JVM dies
    # (starscan.spark.handle), and listens at once: a BE reads arrow-engine scans itself while
    # Spark starts; an FE's calls that need Spark (a schema not known yet, the MySQL port's
    # SELECTs, writing the demo) wait for it. A restarted FE is back in seconds, not after
    # Spark's 10-30 s start.
    check_java()

    def start_spark() -> Any:
        session = build_session(settings)
        quiet_spark(session)
        return session

    spark = SparkHandle(start_spark, spark_conf(settings), restart_attempts=settings.spark_restart_attempts)
    server = StarscanServer(settings, spark, fe=fe, be=be)
    _prepare_warehouse(server, spark, settings, fe)
    try:
        server.start()
    except CannotListen:
        raise
    except OSError as exc:
        raise CannotListen(f"cannot listen: {exc}") from None
    parts = []
    if fe:
        parts.append(f"FE http{'s' if settings.http_tls else ''}://{settings.bind_host}:{server.http_port}  "
                     f"MySQL {settings.bind_host}:{server.query_port}")
    if be:
        parts.append(f"BE {settings.bind_host}:{server.be_port}")
    log.info("starscan %s ready: %s  warehouse %s", __version__, "  ".join(parts), server.warehouse.location)
    _wait_for_a_signal()
    _stop(server, spark, settings.shutdown_grace_s)


def _prepare_warehouse(server: Any, spark: Any, settings: Settings, fe: bool) -> None:
    """An object store is only checked (a node serves anyway: plans say what is wrong until it
    is fixed); an empty local warehouse of an FE gets the demo tables."""
    if not server.warehouse.storage.is_local:
        try:
            found = server.warehouse.databases()
        except StarscanError as exc:
            log.warning("the warehouse %s cannot be read now: %s", server.warehouse.location, exc.message)
        else:
            log.info("warehouse %s: %d database(s)", server.warehouse.location, len(found))
    elif fe and settings.demo_scale > 0 and not any(server.warehouse.tables(db) for db in server.warehouse.databases()):
        from starscan.app.demo import create_demo

        # Written with Spark (pyspark's functions need a started session, not a handle's wait).
        spark.session()
        started = time.monotonic()
        created = create_demo(spark, server.warehouse, settings.demo_scale, settings.tablet_target_bytes)
        log.info("created demo tables %s in %.1f s", ", ".join(created), time.monotonic() - started)


def _wait_for_a_signal() -> None:
    """Until SIGTERM or SIGINT; a second one exits at once."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        if stop.is_set():  # a second SIGTERM/SIGINT: no more waiting
            log.warning("second signal: exiting now")
            os._exit(1)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.wait(0.2):  # a signal handler runs between the main thread's waits
        pass


def _stop(server: Any, spark: Any, grace_s: float) -> None:
    """Cancel the in-flight scans and stop Spark, within ``grace_s``: if Spark or a
    connection hangs the stop, the process exits anyway (the JVM child follows, as it exits
    when its stdin, our pipe, closes)."""
    log.info("stopping: cancelling in-flight scans (at most %g s)", grace_s)

    def give_up() -> None:
        log.error("stop took over %g s: exiting", grace_s)
        os._exit(1)

    watchdog = threading.Timer(grace_s, give_up)
    watchdog.daemon = True
    watchdog.start()
    server.stop()
    spark.stop()
    watchdog.cancel()
    log.info("stopped")
