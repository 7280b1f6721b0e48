"""The reason a reader is given when Spark failed: a Python task's own exception line, not
the first line of Spark's wrapper ("An exception was thrown from the Python worker:")."""

from __future__ import annotations

from starscan.provider.spark_failures import python_error

# The text of a pyspark PythonException for a task that raised ``ConnectionError`` from an
# ``OSError`` (captured from pyspark 4.3 with a real local SparkSession).
CHAINED = (
    "An exception was thrown from the Python worker:\n"
    "Traceback (most recent call last):\n"
    '  File "/tmp/t.py", line 8, in f\n'
    '    raise OSError("inner")\n'
    "OSError: inner\n\n"
    "The above exception was the direct cause of the following exception:\n\n"
    "Traceback (most recent call last):\n"
    '  File "/venv/pyspark/worker.py", line 4327, in invoke_udf\n'
    "    run_process()\n"
    '  File "/tmp/t.py", line 10, in f\n'
    '    raise ConnectionError("outer message here") from e\n'
    "ConnectionError: outer message here"
)


def test_the_last_traceback_gives_the_exception_that_failed_the_task():
    assert python_error(CHAINED) == "ConnectionError: outer message here"


def test_a_text_without_a_traceback_gives_none():
    assert python_error("org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)") is None
    assert python_error("") is None


def test_a_java_exceptions_text_has_the_first_traceback_after_its_class_name():
    """What ``Throwable.toString`` gives for a task that raised one plain exception."""
    text = ("org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
            '  File "/venv/pyspark/worker.py", line 4327, in invoke_udf\n'
            "    run_process()\n"
            "starscan.provider.push.wire.PushUnreachable: this Spark task cannot reach the BE\n")
    assert python_error(text) == "starscan.provider.push.wire.PushUnreachable: this Spark task cannot reach the BE"
