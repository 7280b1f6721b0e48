"""Why Spark failed, in a sentence a reader can act on: Py4J wraps every failure as "An
error occurred while calling ...", with the real cause deep in the Java exception chain,
and a Python task's own exception inside Spark's text of it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from starscan.core.errors import ScanFailed, SnapshotGone, SparkUnavailable, StarscanError


def scan_failure(exc: BaseException, spark: Any, source: Any, description: str, engine_reason: str | None,
                 reading: Callable[[], str], task_reason: str | None = None) -> StarscanError:
    """The error a reader of the scan of ``source`` gets when Spark failed: the JVM gone;
    "version ... is gone" when the planned files were removed or rewritten under the scan;
    a missing filesystem for the sql engine; else the task's own reason (``task_reason``,
    or Spark's, with ``reading()``: what a task Spark lost was reading)."""
    jvm = jvm_gone(exc, spark)
    if jvm is not None:
        return SparkUnavailable(f"the scan of {description} stopped: {jvm}; read it again (a new "
                                "SparkSession is starting)")
    try:
        source.check_files()
    except SnapshotGone as gone:
        return SnapshotGone(gone.message.replace(" was removed;", " was removed during the scan;")
                            .replace(" was rewritten;", " was rewritten during the scan;"))
    except Exception:  # noqa: BLE001 - the original failure is what matters
        pass
    if task_reason is not None:
        reason = task_reason
    else:
        reason, raised = spark_reason(exc)
        if not raised:  # Spark lost the task: say what it was reading
            reason += reading()
    if missing_filesystem(exc) and not source.storage.is_local:
        return ScanFailed(f"this scan of {description} needs the sql engine ({engine_reason}), and this "
                          f"server's Spark has no filesystem for {source.table_location()}: "
                          "add Hadoop's cloud connector jars to Spark (docs/storage.md), or ask for a scan the arrow "
                          "engine can read")
    if f"table {description}" in reason:
        return ScanFailed(f"Spark scan failed: {reason}")
    return ScanFailed(f"Spark scan of table {description} failed: {reason}")


def spark_reason(exc: BaseException) -> tuple[str, bool]:
    """The root cause of a Py4J error (its own text is only "An error occurred while calling
    ..."): the deepest cause that says something, and whether it is an exception a Python task
    raised. A bare ``java.io.EOFException`` under "Python worker exited unexpectedly (crashed)"
    says less than the error around it."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            texts: list[str] = []
            cause = java
            while cause is not None and len(texts) < 20:
                texts.append(str(cause.toString()).strip())
                cause = cause.getCause()
            for text in reversed(texts):
                first = text.splitlines()[0] if text else ""
                if ": " in first:  # Throwable.toString is "class: message", or the class alone
                    raised = python_error(text)
                    return (raised, True) if raised else (first.split(" Consider setting ")[0][:500], False)
            if texts and texts[-1]:
                return texts[-1].splitlines()[0][:500], False
        except Exception:  # noqa: BLE001 - the gateway may be gone
            pass
    raised = python_error(str(exc))
    return (raised, True) if raised else (first_line(exc), False)


def python_error(text: str) -> str | None:
    """The exception line of the last Python traceback inside an error's text (what a
    Python task raised: "ConnectionError: ..."), or None when the text holds no traceback.
    Spark's own first line ("An exception was thrown from the Python worker") says nothing.
    In a Java exception's text the first traceback follows the class name on its line."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.endswith("Traceback (most recent call last):")]
    if not starts:
        return None
    for line in lines[starts[-1] + 1:]:
        if line.strip() and not line[0].isspace():
            return line.strip()[:500]
    return None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:500]


#: The root causes under which Spark reports a task whose Python worker died (crashed, was
#: killed, or was OOM-killed): the JVM read the end of the worker's stream.
_WORKER_GONE = frozenset({"java.io.EOFException", "java.net.SocketException"})
#: A Python task's own exception (Spark's error condition PYTHON_EXCEPTION).
_PYTHON_RAISED = "org.apache.spark.api.python.PythonException"


def lost_task(exc: BaseException) -> str | None:
    """Why Spark lost a task, when ``exc`` (a Spark job's failure, from the JVM) says by its
    exception types that the task's Python worker died under it (crashed or was killed: the
    root cause is the end of the worker's stream, and no Python exception is in the chain).
    None for any other failure, and for one that is not Spark's."""
    classes = [name for name, _message in java_causes(exc)]
    if not classes or _PYTHON_RAISED in classes or classes[-1] not in _WORKER_GONE:
        return None
    return spark_reason(exc)[0]


#: Hadoop's exception for a URI scheme it has no FileSystem class for (s3a:// without the
#: S3A connector's jars), and the JVM's for a configured FileSystem class it cannot load.
_NO_FILESYSTEM = "org.apache.hadoop.fs.UnsupportedFileSystemException"
_CLASS_MISSING = "java.lang.ClassNotFoundException"


def missing_filesystem(exc: BaseException) -> bool:
    """Whether a Spark job failed because this Spark has no Hadoop FileSystem for the files'
    store, told by the exception types in the Java cause chain."""
    return any(name == _NO_FILESYSTEM or (name == _CLASS_MISSING and "FileSystem" in message)
               for name, message in java_causes(exc))


def java_causes(exc: BaseException) -> list[tuple[str, str]]:
    """The Java cause chain of a Py4J error, outermost first, as (class name, message); empty
    for an error that is not Java's, or when the JVM cannot be asked (it died)."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return []
    chain: list[tuple[str, str]] = []
    try:
        cause = java
        while cause is not None and len(chain) < 20:
            message = cause.getMessage()
            chain.append((str(cause.getClass().getName()), "" if message is None else str(message)))
            cause = cause.getCause()
    except Exception:  # noqa: BLE001 - the gateway may be gone
        return []
    return chain


def jvm_gone(exc: BaseException, spark: Any) -> str | None:
    """Why a Spark call failed, when it failed because this process's Spark JVM is gone
    (killed, crashed, exited on an OutOfMemoryError): Py4J lost its connection, or the node's
    SparkHandle already knows. None for any other failure."""
    from py4j.protocol import Py4JError, Py4JJavaError

    if not isinstance(exc, (Py4JError, ConnectionError, EOFError)):
        return None
    from starscan.spark.session import spark_problem

    # A connection that broke (not an exception the JVM sent) may come a moment before the
    # JVM's process has ended, while the JVM still looks up: look again for a short while.
    looks = 1 if isinstance(exc, Py4JJavaError) else JVM_DEATH_LOOKS
    for look in range(looks):
        problem = spark_problem(spark)
        if problem is not None:
            return f"Spark's JVM died under the scan ({problem})"
        if look + 1 < looks:
            time.sleep(JVM_DEATH_LOOK_S)
    return None


#: How often, and how far apart, a broken connection to the JVM is checked against the JVM's
#: state (1 s in all: a killed process ends within milliseconds of its sockets).
JVM_DEATH_LOOKS, JVM_DEATH_LOOK_S = 10, 0.1
