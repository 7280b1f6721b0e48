"""Every function of the pyspark adapter (starscan.spark.pyspark_internals) against a real
SparkSession of the installed line: the JVM-side names it reaches (Spark's Scala classes,
Py4J handles) cannot be checked without a JVM, so a Spark line that renamed one fails here,
by name, in the Spark-version tier. The unit test checks the Python names on their own."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as T
from support.waits import wait_until

from starscan.spark import pyspark_internals as internals

pytestmark = pytest.mark.spark_line  # the Spark-version tier (docs/scaling.md)


def test_the_jvm_handles_answer(spark):
    sc = spark.sparkContext
    assert str(internals.jvm(spark).java.lang.System.getProperty("java.version"))
    assert internals.java_context(sc) is not None and not internals.context_stopped(spark)
    assert internals.hadoop_configuration(spark).getClass().getName() == "org.apache.hadoop.conf.Configuration"
    zone = internals.jvm_time_zone(spark)
    assert zone == str(internals.jvm(spark).java.util.TimeZone.getDefault().getID()) and zone


def test_the_status_store_has_a_finished_jobs_times(spark):
    sc = spark.sparkContext
    sc.setJobGroup("pyspark-internals-live", "the status store's view of a job", True)
    try:
        assert sc.parallelize(range(10), 2).count() == 10
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    [job] = sc.statusTracker().getJobIdsForGroup("pyspark-internals-live")
    # Spark's listener bus records the job's end a moment after count() returns.
    wait_until(lambda: internals.status_store(sc).job(job).completionTime().isDefined(), 30,
               what="the status store to record the job's end")
    assert internals.status_store(sc).job(job).submissionTime().isDefined()


def test_the_sessions_jvm_side_as_the_hive_tables_use_it(spark):
    session = internals.SessionJvm(spark)
    assert session.catalog().databaseExists("default")
    assert session.sql_conf().getConfString("spark.sql.session.timeZone") == spark.conf.get("spark.sql.session.timeZone")
    as_java = session.as_java_map(session.sql_conf().getAllConfs())  # a Scala map, on 2.12 and 2.13
    assert as_java["spark.sql.session.timeZone"] == spark.conf.get("spark.sql.session.timeZone")


def test_one_job_over_one_partition_runs_that_partition_only(spark):
    sc = spark.sparkContext
    seen = sc.accumulator(0)

    def count(rows):
        seen.add(sum(rows))
        return iter(())

    mapped = sc.parallelize(range(10), 2).mapPartitions(count)  # partition 1 holds 5..9
    internals.run_job(sc, mapped, 1)
    assert seen.value == 5 + 6 + 7 + 8 + 9


def test_a_dataframes_arrow_batches_and_its_rows_as_arrow(spark):
    df = spark.range(5).selectExpr("id", "cast(id as string) as s")
    batches = internals.arrow_batch_rdd(df, spark.sparkContext).collect()  # IPC messages, as Spark writes them
    assert batches and all(isinstance(b, (bytes, bytearray)) and len(b) > 0 for b in batches)
    table = internals.collect_arrow(df, "UTC")
    assert isinstance(table, pa.Table) and table.column("id").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("s").to_pylist() == ["0", "1", "2", "3", "4"]


def test_sparks_partition_value_parser(spark, tmp_path):
    base = str(tmp_path)
    schema = internals.parse_partitions(spark, [f"{base}/p=1/q=a", f"{base}/p=20/q=b"], base, True, False, True, "UTC")
    assert [(f.name, f.dataType) for f in schema.fields] == [("p", T.IntegerType()), ("q", T.StringType())]
