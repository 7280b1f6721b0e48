"""The PySpark data source `starrocks_arrow` (starscan.spark.datasource) in the test session's
Spark, reading through the shared server: the rows equal Spark's own read of the files, the
filters Spark pushes reach `_query_plan` (the server's record of recent plans shows them),
and what it cannot read is refused by name."""

from __future__ import annotations

from collections import Counter

import pytest

from starscan.spark import compat

pytestmark = pytest.mark.spark_line  # the Spark-version tier (docs/scaling.md)

#: Spark 3.5 has no Python Data Source API (pyspark.sql.datasource is 4.0's): the source
#: cannot exist there, and importing it says what to use instead (the last test).
needs_the_api = pytest.mark.skipif(not compat.HAS_PYTHON_DATA_SOURCE,
                                   reason=f"pyspark {compat.PYSPARK_LINE} has no Python Data Source API")


def _values(row) -> tuple:
    """A row's values, hashable: Spark 4.0 gives BINARY as bytearray (4.1 on: bytes)."""
    return tuple(bytes(v) if isinstance(v, bytearray) else v for v in row)


@pytest.fixture(scope="module")
def source(spark, server):
    from starscan.spark.datasource import StarRocksArrowDataSource

    spark.dataSource.register(StarRocksArrowDataSource)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")  # Spark 4.1+: off by default

    def read(table: str, **options: str):
        reader = spark.read.format("starrocks_arrow").option("starrocks.fe.http.url", f"127.0.0.1:{server.http_port}") \
            .option("starrocks.table.identifier", table).option("starrocks.user", "root").option("starrocks.password", "")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    return read


@needs_the_api
def test_lineitem_with_a_pushed_filter_equals_sparks_read_of_the_files(source, spark, server):
    where = "l_quantity > 40 and l_shipmode = 'AIR' and l_returnflag in ('R', 'A')"
    # One input partition for the whole read: the reading tasks and the server's scans share
    # this test session's two Spark task slots (a reader's Spark is not the server's elsewhere).
    df = source("demo.lineitem", **{"starrocks.request.tablet.size": "100000"}).where(where)
    got = df.collect()
    files = spark.read.parquet(str(server.warehouse.table_path("demo", "lineitem")))
    want = files.where(where).collect()
    assert len(got) == len(want) > 0
    assert Counter(map(_values, got)) == Counter(map(_values, want))
    # `df.rdd` plans a source's partitions with the conf of the session active on this thread,
    # not the DataFrame's: made another session's here (createDataFrame does that), it still
    # reads the filter flag as on, set for the whole application (tests/conftest.py).
    spark.newSession().createDataFrame([(1,)], "x int")
    per_tablet = source("demo.lineitem", **{"starrocks.request.tablet.size": "1"})
    assert per_tablet.rdd.getNumPartitions() == len(server.warehouse.snapshot("demo", "lineitem").tablets) > 1
    import json

    lines = [json.loads(line) for line in server.settings.effective_audit_log.read_text().splitlines()[-200:]]
    planned = [line["sql"] for line in lines if line.get("event") == "plan" and line.get("table") == "demo.lineitem"
               and line.get("sql")]  # a request refused before its SQL was read has none
    pushed = [sql for sql in planned if "`l_quantity` > 40" in sql and "`l_shipmode` = 'AIR'" in sql
              and "`l_returnflag` in ('R', 'A')" in sql]
    if compat.HAS_DATA_SOURCE_FILTERS:
        assert pushed, planned[:3]
    else:  # Spark 4.0 offers a Python data source no filter: it evaluated them all (same rows)
        assert planned and not pushed, planned[:3]


@needs_the_api
def test_columns_option_types_and_nested_columns(source, spark, server):
    df = source("demo.all_types", **{"starrocks.columns": "id, c_date, c_datetime_ntz, c_decimal128, c_binary",
                                      "starrocks.request.tablet.size": "100000"})
    assert [f.dataType.simpleString() for f in df.schema.fields] == \
        ["int", "date", "timestamp_ntz", "decimal(38,10)", "binary"]
    files = spark.read.parquet(str(server.warehouse.table_path("demo", "all_types")))
    want = files.select("id", "c_date", "c_datetime_ntz", "c_decimal128", "c_binary").collect()
    assert Counter(map(_values, df.collect())) == Counter(map(_values, want))
    with pytest.raises(Exception, match="column c_array of demo.all_types is .*which starrocks_arrow does not read"):
        source("demo.all_types").schema  # noqa: B018 - the schema is where it is refused


@pytest.mark.skipif(compat.HAS_PYTHON_DATA_SOURCE, reason="this pyspark has the Python Data Source API")
def test_without_the_api_the_import_says_what_to_read_with_instead():
    import pyspark

    with pytest.raises(ImportError, match=f"needs Spark 4's Python Data Source API; this is pyspark "
                                          f"{pyspark.__version__}: read with starscan.client"):
        import starscan.spark.datasource  # noqa: F401
