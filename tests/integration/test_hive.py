"""Tables of a Hive metastore (starscan.tables.hive): Spark's embedded Derby metastore, Parquet and
ORC tables made with Spark SQL, served through a server with ``hive_databases``; every
answer compared with what Spark SQL reads from the same metastore table."""

from __future__ import annotations

import datetime as dt

import pytest
from support.servers import basic, plan, running_server


@pytest.fixture(scope="module")
def hive_db(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("hive")
    spark.sql(f"create database if not exists hivedb location '{root}/hivedb.db'")
    spark.sql("create table hivedb.sales (id int, amount double, day date, city string) using parquet "
              "partitioned by (city)")
    spark.sql("insert into hivedb.sales select id, id * 0.5, date_add(date'2024-01-01', cast(id % 7 as int)), "
              "case id % 3 when 0 then 'oslo' when 1 then 'lima' else 'a/b c' end from range(900)")
    spark.sql("create table hivedb.plain (k bigint, v string) using parquet")
    spark.sql("insert into hivedb.plain select id, concat('v', id) from range(50)")
    spark.sql("create table hivedb.as_orc (k bigint, s string, d date, part int) using orc partitioned by (part)")
    spark.sql("insert into hivedb.as_orc select id, concat('s', id), date_add(date'2024-03-01', cast(id % 4 as int)), "
              "cast(id % 2 as int) from range(300)")
    spark.sql("create table hivedb.as_csv (k bigint) using csv")
    spark.sql("insert into hivedb.as_csv select id from range(5)")
    yield root
    spark.sql("drop database if exists hivedb cascade")


@pytest.fixture(scope="module")
def hive_server(spark, base_settings, hive_db):
    settings = base_settings.model_copy(update={"hive_databases": ["hivedb"]})
    with running_server(spark, settings) as srv:
        yield srv


def _read(srv, table: str, sql: str):
    from starscan.client import StarscanClient

    return StarscanClient(f"http://127.0.0.1:{srv.http_port}", "root", "").read("hivedb", table, sql)


def _wire(value):
    return value.isoformat() if isinstance(value, dt.date) else value


@pytest.mark.parametrize("engine", ["auto", "sql"])
@pytest.mark.parametrize("table, sql", [
    ("sales", "select id, amount, day, city from hivedb.sales"),
    ("sales", "select id, city from hivedb.sales where city = 'a/b c' and amount > 100"),
    ("sales", "select id from hivedb.sales where day = '2024-01-03' or upper(city) = 'OSLO'"),
    ("plain", "select k, v from hivedb.plain where k < 10"),
    ("as_orc", "select k, s, d, part from hivedb.as_orc where part = 1 and k > 250"),
    ("as_orc", "select k, d from hivedb.as_orc"),
])
def test_metastore_tables_read_as_spark_reads_them(hive_server, spark, engine, table, sql):
    hive_server.ops.update_config({"scan_engine": engine})
    try:
        got = _read(hive_server, table, sql)
        want = spark.sql(sql).collect()
        assert sorted(tuple(r.values()) for r in got.to_pylist()) == sorted(tuple(_wire(v) for v in r) for r in want)
    finally:
        hive_server.ops.update_config({"scan_engine": "auto"})


def test_only_registered_partitions_are_the_table(hive_server, spark, hive_db):
    spark.range(1).createOrReplaceTempView("a_temp_view")  # the session's views are not the metastore's tables
    wh = hive_server.warehouse
    assert "hivedb" in wh.databases() and [t for t in wh.tables("hivedb") if t != "stream"] == ["as_csv", "as_orc", "plain", "sales"]
    snap = wh.snapshot("hivedb", "sales")
    assert snap.partition_columns == ("city",) and {t.partition["city"] for t in snap.tablets} == {"oslo", "lima", "a/b c"}
    spark.sql("alter table hivedb.sales drop partition (city = 'lima')")  # files stay? the folder goes
    spark.sql("alter table hivedb.sales add partition (city = 'lima')")   # registered again, empty
    wh.invalidate("hivedb", "sales")
    got = _read(hive_server, "sales", "select id from hivedb.sales where city = 'lima'")
    assert got.num_rows == spark.sql("select id from hivedb.sales where city = 'lima'").count()


def test_a_csv_table_is_refused_by_name(hive_server):
    r = plan(f"http://127.0.0.1:{hive_server.http_port}", "hivedb", "as_csv", "select k from hivedb.as_csv",
             basic("root", ""))
    assert r.status_code == 500 and "hivedb.as_csv" in r.json()["exception"] and "ORC" in r.json()["exception"]


def test_incremental_reads_of_a_metastore_table_are_its_new_files(hive_server, spark, hive_db):
    """A metastore table's version is a hash of its files, as a folder table's: since_version
    gives the files an INSERT added; an INSERT OVERWRITE since is refused."""
    import json

    import httpx

    from starscan.client import StarscanClient

    spark.sql("create table hivedb.stream (id bigint, part string) using parquet partitioned by (part)")
    spark.sql("insert into hivedb.stream select id, 'a' from range(10)")
    client = StarscanClient(f"http://127.0.0.1:{hive_server.http_port}", "root", "")
    sql = "select id from hivedb.stream"
    v0 = client.plan("hivedb", "stream", sql, cursor=True)["version"]
    spark.sql("insert into hivedb.stream select id, if(id % 2 = 0, 'a', 'b') from range(10, 16)")
    hive_server.warehouse.invalidate("hivedb", "stream")
    step = client.plan("hivedb", "stream", sql, since_version=v0)
    assert sorted(client.read("hivedb", "stream", sql, plan=step).column("id").to_pylist()) == list(range(10, 16))
    spark.sql("insert overwrite table hivedb.stream partition (part = 'a') select 99")
    hive_server.warehouse.invalidate("hivedb", "stream")
    r = httpx.post(f"http://127.0.0.1:{hive_server.http_port}/api/hivedb/stream/_query_plan",
                   content=json.dumps({"sql": sql, "since_version": step["version"]}),
                   headers={"Authorization": basic("root", "")}, timeout=60)
    assert r.status_code == 409 and "rewritten" in r.json()["exception"], r.text
