"""Why Spark failed, in a sentence a reader can act on: Py4J wraps every failure as "An
error occurred while calling ...", with the real cause deep in the Java exception chain,
and a Python task's own exception inside Spark's text of it."""

from __future__ import annotations


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


def lost_task(exc: BaseException) -> str | None:
    """Why Spark lost a task, when ``exc`` (a Spark job's failure, from the JVM) says its task
    died without an exception of its own: its Python worker crashed or was killed, its
    executor was lost. None for any other failure, and for one that is not Spark's."""
    if getattr(exc, "java_exception", None) is None:
        return None
    reason, raised = spark_reason(exc)
    return None if raised else reason
