"""Tables of a Hive metastore (starscan.tables.hive): Spark's embedded Derby metastore, Parquet and
ORC tables made with Spark SQL, served through a server with ``hive_databases``; every
answer compared with what Spark SQL reads from the same metastore table."""

from __future__ import annotations

import datetime as dt

import pytest
from support.servers import basic, running_server

#: The Spark-version tier too (docs/scaling.md): the metastore's tables and partitions are
#: reached through the session's JVM, whose collections differ by Scala version (2.12 on 3.5).
pytestmark = pytest.mark.spark_line


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
    spark.sql("create table hivedb.as_csv (k bigint, s string) using csv options (header 'true', nullValue 'NA')")
    spark.sql("insert into hivedb.as_csv select id, if(id % 4 = 0, null, concat('s,', id)) from range(60)")
    spark.sql("create table hivedb.as_json (k bigint, s string, d date) using json")
    spark.sql("insert into hivedb.as_json select id, concat('j', id), date_add(date'2024-05-01', cast(id % 3 as int)) "
              "from range(40)")
    # Hive SerDe tables: delimited text with its own NULL spelling, partitioned; Avro.
    spark.sql("create table hivedb.as_text (k bigint, s string, d date) partitioned by (p int) row format delimited "
              "fields terminated by '|' null defined as 'NA' stored as textfile")
    for part in range(3):
        spark.sql(f"insert into hivedb.as_text partition (p = {part}) select id, if(id % 5 = 0, null, "
                  f"concat('t|', id)), date_add(date'2024-06-01', cast(id % 6 as int)) from range(90) "
                  f"where id % 3 = {part}")
    spark.sql("create table hivedb.as_avro (k bigint, s string, x double) stored as avro")
    spark.sql("insert into hivedb.as_avro select id, concat('a', id), if(id % 7 = 0, null, id * 1.5) from range(50)")
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
    ("as_csv", "select k, s from hivedb.as_csv"),
    ("as_csv", "select k from hivedb.as_csv where s is null or s like 's,1%'"),
    ("as_json", "select k, s, d from hivedb.as_json where d = '2024-05-02'"),
    ("as_text", "select k, s, d, p from hivedb.as_text"),
    ("as_text", "select k, s from hivedb.as_text where p = 2 and (s is null or k > 80)"),
    ("as_avro", "select k, s, x from hivedb.as_avro where x is null or x > 60"),
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
    assert "hivedb" in wh.databases() and [t for t in wh.tables("hivedb") if t != "stream"] == ["as_avro", "as_csv", "as_json", "as_orc", "as_text",
                                                                  "plain", "sales"]
    snap = wh.snapshot("hivedb", "sales")
    assert snap.partition_columns == ("city",) and {t.partition["city"] for t in snap.tablets} == {"oslo", "lima", "a/b c"}
    spark.sql("alter table hivedb.sales drop partition (city = 'lima')")  # files stay? the folder goes
    spark.sql("alter table hivedb.sales add partition (city = 'lima')")   # registered again, empty
    wh.invalidate("hivedb", "sales")
    got = _read(hive_server, "sales", "select id from hivedb.sales where city = 'lima'")
    assert got.num_rows == spark.sql("select id from hivedb.sales where city = 'lima'").count()


def test_only_the_planned_files_of_a_text_table_are_read(hive_server, spark):
    """A file added after the plan (an INSERT) is not in the plan's rows: Spark reads the
    table and keeps the planned files' rows."""
    from starscan.client import StarscanClient

    client = StarscanClient(f"http://127.0.0.1:{hive_server.http_port}", "root", "")
    sql = "select k from hivedb.as_json"
    planned = client.plan("hivedb", "as_json", sql)
    spark.sql("insert into hivedb.as_json select id, 'late', date'2024-05-01' from range(1000, 1005)")
    got = client.read("hivedb", "as_json", sql, plan=planned).column("k").to_pylist()
    assert sorted(got) == list(range(40))
    hive_server.warehouse.invalidate("hivedb", "as_json")
    assert client.read("hivedb", "as_json", sql).num_rows == 45
    spark.sql("insert overwrite table hivedb.as_json select id, concat('j', id), "
              "date_add(date'2024-05-01', cast(id % 3 as int)) from range(40)")
    hive_server.warehouse.invalidate("hivedb", "as_json")


def test_a_format_this_spark_cannot_read_is_refused_by_name(spark):
    """A SerDe class or a data source module that is not on this Spark's classpath (HCatalog's
    JSON SerDe and Spark's Avro module are not bundled with pyspark; this Spark's metastore
    refuses to create such tables, but one made by Hive elsewhere is listed): refused by name
    when planned, before any scan."""
    from starscan.core.errors import TableUnreadable
    from starscan.spark.pyspark_internals import SessionJvm
    from starscan.tables.hive import _check_reader

    session = SessionJvm(spark)
    with pytest.raises(TableUnreadable, match="org.apache.hive.hcatalog.data.JsonSerDe"):
        _check_reader("hivedb.t", session, "hive", "org.apache.hive.hcatalog.data.JsonSerDe")
    with pytest.raises(TableUnreadable, match="no avro data source"):
        _check_reader("hivedb.t", session, "avro", "")
    _check_reader("hivedb.t", session, "hive", "org.apache.hadoop.hive.serde2.avro.AvroSerDe")
    _check_reader("hivedb.t", session, "json", "")


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


def test_the_mysql_port_reads_a_delimited_text_table_as_spark_does(hive_server, spark):
    import pymysql

    sql = "select k, s from hivedb.as_text where p = 1 and k < 40"
    conn = pymysql.connect(host="127.0.0.1", port=hive_server.query_port, user="root", password="",
                           connect_timeout=20, read_timeout=120)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            got = sorted((int(k), s) for k, s in cur.fetchall())
    finally:
        conn.close()
    want = sorted((r[0], r[1]) for r in spark.sql(sql).collect())
    assert got == want and any(s is None for _, s in got)  # NA is NULL; "t|k" splits at the delimiter, as in Hive
