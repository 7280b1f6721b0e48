"""Spark's failures are told by their Java exception types (provider/spark_failures.py),
checked on errors the suite's real Spark raises, not on texts written here."""

from __future__ import annotations

import pytest

from starscan.provider.spark_failures import java_causes, lost_task, missing_filesystem


def test_a_store_this_spark_has_no_filesystem_for_is_told_by_type(spark):
    # This Spark has no S3A connector (Hadoop's cloud jars are not installed).
    with pytest.raises(Exception) as raised:
        spark.read.parquet("s3a://no-bucket/table/part-0.parquet").collect()
    assert missing_filesystem(raised.value)
    assert any(name == "java.lang.ClassNotFoundException" for name, _ in java_causes(raised.value))
    assert lost_task(raised.value) is None  # not a task whose worker died


def test_other_failures_are_not_taken_for_a_missing_filesystem(spark):
    with pytest.raises(Exception) as raised:
        spark.read.parquet("/nonexistent/folder/part-0.parquet").collect()
    assert not missing_filesystem(raised.value)
    with pytest.raises(Exception) as raised:
        spark.sparkContext.parallelize([1], 1).map(lambda x: 1 // 0).collect()
    assert not missing_filesystem(raised.value)
    assert lost_task(raised.value) is None  # a task's own exception
