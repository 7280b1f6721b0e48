"""The pyspark internals a node's Spark restart reaches (starscan.spark.pyspark_internals)
exist in the installed pyspark, whose version is one they were tested on: a pyspark that
renamed them fails here, not in a restart that silently does nothing."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from packaging.specifiers import SpecifierSet

from starscan.spark import pyspark_internals

pytestmark = pytest.mark.spark_line  # the Spark-version tier (docs/scaling.md)


def test_every_internal_a_restart_needs_is_there():
    assert pyspark_internals.check() == []


def test_the_installed_pyspark_is_in_the_tested_range():
    installed = version("pyspark")
    assert installed in SpecifierSet(pyspark_internals.TESTED_ON), (
        f"pyspark {installed} is outside {pyspark_internals.TESTED_ON}: check starscan.spark.pyspark_internals "
        "against it (a killed JVM must be replaced: tests/integration/test_spark_restart.py) and widen the range")


def test_local_spark_retries_a_failed_task_as_a_cluster_does():
    """local[N] retries no task; starscan runs it as local[N,F] (spark.task.maxFailures, 4)."""
    from starscan.spark.session import master_with_task_retries

    assert master_with_task_retries("local[16]", {}) == "local[16,4]"
    assert master_with_task_retries("local", {}) == "local[1,4]"
    assert master_with_task_retries("local[*]", {"spark.task.maxFailures": "2"}) == "local[*,2]"
    assert master_with_task_retries("local[2,1]", {}) == "local[2,1]"  # the user's own count stands
    assert master_with_task_retries("spark://10.0.0.5:7077", {}) == "spark://10.0.0.5:7077"  # a cluster retries anyway
