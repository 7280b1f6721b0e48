"""The pyspark internals a node's Spark restart reaches (starscan.spark.pyspark_internals)
exist in the installed pyspark, whose version is one they were tested on: a pyspark that
renamed them fails here, not in a restart that silently does nothing."""

from __future__ import annotations

from importlib.metadata import version

from packaging.specifiers import SpecifierSet

from starscan.spark import pyspark_internals


def test_every_internal_a_restart_needs_is_there():
    assert pyspark_internals.check() == []


def test_the_installed_pyspark_is_in_the_tested_range():
    installed = version("pyspark")
    assert installed in SpecifierSet(pyspark_internals.TESTED_ON), (
        f"pyspark {installed} is outside {pyspark_internals.TESTED_ON}: check starscan.spark.pyspark_internals "
        "against it (a killed JVM must be replaced: tests/integration/test_spark_restart.py) and widen the range")
