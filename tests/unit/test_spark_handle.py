"""The node's SparkHandle when a caller sees the JVM gone before the handle's watcher does:
the handle is out of service at once. The session here stands in for pyspark's (its JVM a
real child process, killed); the watcher is held so that it cannot look first, and let go
only once the handle is stopped (it then ends without touching pyspark's process state)."""

from __future__ import annotations

import subprocess
import sys
import threading
from types import SimpleNamespace

from starscan.spark import handle as handle_module
from starscan.spark.handle import SparkHandle, SparkState, started
from starscan.spark.session import spark_problem


class HeldWake(threading.Event):
    """The watcher's wake-up, held: ``set`` is remembered and passed on at ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.held = False

    def set(self) -> None:
        self.held = True

    def release(self) -> None:
        super().set()


def test_a_jvm_seen_exited_takes_the_handle_out_of_service_before_the_watcher_looks(monkeypatch):
    monkeypatch.setattr(handle_module, "WATCH_S", 3600.0)  # the watcher looks only when woken
    jvm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    context = SimpleNamespace(_gateway=SimpleNamespace(proc=jvm),  # what pyspark_internals reads of it
                              _jsc=SimpleNamespace(sc=lambda: SimpleNamespace(isStopped=lambda: False)))
    session = SimpleNamespace(sparkContext=context, stop=lambda: None)
    handle = SparkHandle(lambda: session, {}, restart_attempts=1, backoff_s=(0.0,))
    wake = HeldWake()
    try:
        assert handle.ready.wait(30) and handle.state is SparkState.UP
        handle._wake = wake
        assert spark_problem(handle) is None and started(handle)

        jvm.kill()
        jvm.wait(30)
        # A scan's Spark call failed; asking why finds the JVM's process gone ...
        assert spark_problem(handle) == "Spark's JVM exited: a new SparkSession is starting"
        # ... and from then on the handle is not up, before its watcher looked (it was told to).
        assert not started(handle) and handle.state is SparkState.RECOVERING and not handle.ready.is_set()
        assert wake.held
        assert "its process exited" in (spark_problem(handle) or "")  # later readers are told the same
    finally:
        handle.stop()
        wake.release()
        if jvm.poll() is None:
            jvm.kill()
            jvm.wait(30)
