"""Every SQL door gives the same answer: the statements real readers send (Trino's StarRocks
plugin, BI tools, notebooks) on the MySQL port (PyMySQL) and on Arrow Flight SQL (ADBC),
each checked against Spark SQL's own answer over the same files; and the rules every door
keeps (the plan rate limit, the audit line) kept on each, by the one statement service.

Spark SQL's answer is the contract: a door that returns fewer rows, other values, or an
error where Spark SQL answers fails here."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from decimal import Decimal

import adbc_driver_flightsql.dbapi as flight_sql
import pymysql
import pytest
from adbc_driver_manager import DatabaseError, ProgrammingError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.readers import runtime_settings
from support.servers import new_user

TABLES = (("demo", "lineitem"), ("demo", "all_types"), ("db1", "t1"))

# (SQL as a reader sends it, with {lineitem}-style names, ordered: whether row order counts)
STATEMENTS = [
    # A whole table: far more rows than any cap a door ever had.
    ("SELECT l_orderkey, l_linenumber, l_shipdate FROM {lineitem}", False),
    # Trino's StarRocks plugin: back-quoted names with the catalog, pushed ranges, IN lists
    # with OR IS NULL, DATE and TIMESTAMP literals, SELECT 1, WHERE 1 = 0, null ordering.
    ("SELECT `l_orderkey`, `l_quantity` FROM `default_catalog`.`demo`.`lineitem` "
     "WHERE (`l_shipdate` >= TIMESTAMP '1970-01-01 00:00:00.000000') AND (`l_linenumber` IN (1, 2) "
     "OR `l_linenumber` IS NULL)", False),
    ("SELECT 1 FROM {lineitem} WHERE l_shipdate >= DATE '1998-01-01'", False),
    ("SELECT `l_orderkey` FROM `default_catalog`.`demo`.`lineitem` WHERE 1 = 0", False),
    ("SELECT l_orderkey, l_linenumber FROM {lineitem} ORDER BY l_orderkey IS NULL ASC, l_orderkey ASC, "
     "l_linenumber DESC LIMIT 25", True),
    ("SELECT l_returnflag, l_linestatus, count(*) AS n, sum(l_quantity) AS q FROM {lineitem} "
     "GROUP BY l_returnflag, l_linestatus", False),
    # String functions over every kind of value a table holds (nulls, empties, odd text).
    ("SELECT id, upper(c_string) AS u, lower(c_varchar) AS l, concat(c_string, '-', c_varchar) AS c, "
     "length(c_string) AS n, substr(c_string, 1, 2) AS s FROM {all_types}", False),
    ("SELECT k1, v1, d FROM {t1} WHERE d < DATE '2000-01-01' OR d IS NULL", False),
    # A join and a CTE: the FE's Spark SQL, streamed.
    ("WITH big AS (SELECT l_orderkey, max(l_quantity) AS q FROM {lineitem} GROUP BY l_orderkey) "
     "SELECT count(*) AS n, sum(q) AS s FROM big JOIN {lineitem} USING (l_orderkey)", False),
]


@pytest.fixture(scope="module")
def spark_views(server):
    """A Spark session whose views are the warehouse's tables, read from their files."""
    spark = server.spark.newSession()
    for db, table in TABLES:
        snap = server.warehouse.snapshot(db, table)
        spark.read.parquet(str(snap.location)).createOrReplaceTempView(f"{db}_{table}")
    return spark


def _sql(template: str, names: dict[str, str]) -> str:
    return template.format(**names)


def _for_starscan(template: str) -> str:
    return _sql(template, {table: f"{db}.{table}" for db, table in TABLES})


def _for_spark(template: str) -> str:
    spark_sql = _sql(template, {table: f"{db}_{table}" for db, table in TABLES})
    return spark_sql.replace("`default_catalog`.`demo`.`lineitem`", "demo_lineitem")


def _plain(value):
    """A value as both clients can give it: decimals and floats as Decimal, timestamps naive."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, Decimal):
        return value.normalize()
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None)
    return value


def _rows(rows, ordered: bool) -> list[tuple]:
    out = [tuple(_plain(v) for v in row) for row in rows]
    return out if ordered else sorted(out, key=repr)


def mysql_rows(port: int, sql: str, user: str = "root", password: str = "") -> list[tuple]:
    with pymysql.connect(host="127.0.0.1", port=port, user=user, password=password, connect_timeout=20,
                         read_timeout=300) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def flight_rows(server, sql: str, user: str = "root", password: str = "") -> list[tuple]:
    uri = f"grpc://127.0.0.1:{server.flight_sql_port}"
    with flight_sql.connect(uri, db_kwargs={"username": user, "password": password}, autocommit=True) as conn, \
            conn.cursor() as cur:
        cur.execute(sql)
        table = cur.fetch_arrow_table()
    return [tuple(row.values()) for row in table.to_pylist()]


@pytest.mark.parametrize("template, ordered", STATEMENTS, ids=[s[:50] for s, _ in STATEMENTS])
def test_each_door_answers_spark_sqls_rows(server, spark_views, template, ordered):
    want = _rows([tuple(r) for r in spark_views.sql(_for_spark(template)).collect()], ordered)
    sql = _for_starscan(template)
    assert _rows(mysql_rows(server.query_port, sql), ordered) == want
    assert _rows(flight_rows(server, sql), ordered) == want


def test_plans_keep_the_rate_limit_and_the_audit_line_on_every_door(server):
    """A plain SELECT is a plan whatever door asks: the user's plan_rate_per_user applies,
    and the plan's audit line names the door."""
    user = new_user(server, "pw", "db1.t1", prefix="doors")
    lines: list[dict] = []
    server.audit.add_listener(lines.append)
    sql = "SELECT k1, v1 FROM db1.t1"
    assert len(mysql_rows(server.query_port, sql, user, "pw")) == 3
    assert len(flight_rows(server, sql, user, "pw")) == 3
    plans = [line for line in lines if line["event"] == "plan" and line["user"] == user]
    assert {line["door"] for line in plans} >= {"mysql", "flight-sql"}
    assert all(line["status"] == 200 and line["table"] == "db1.t1" for line in plans)
    with runtime_settings(server, plan_rate_per_user=0.001, plan_rate_burst=1):
        mysql_rows(server.query_port, sql, user, "pw")  # the burst's one plan
        with pytest.raises(pymysql.err.MySQLError, match="plan_rate_per_user"):
            mysql_rows(server.query_port, sql, user, "pw")
        with pytest.raises((DatabaseError, ProgrammingError), match="plan_rate_per_user"):
            flight_rows(server, sql, user, "pw")
    refused = [line for line in lines if line["event"] == "plan" and line["user"] == user and line["status"] == 429]
    assert {line["door"] for line in refused} == {"mysql", "flight-sql"}


def test_the_binary_protocol_gives_the_text_protocols_values(server):
    """A server-side prepared statement (COM_STMT_EXECUTE: MySQL's binary rows, as JDBC's
    useServerPrepStmts and mysql-connector's prepared cursor read them) answers the values
    the text protocol does: dates, timestamps, decimals, signed bytes, nulls."""
    import mysql.connector

    sql = "SELECT id, c_tinyint, c_int, c_bigint, c_decimal32, c_decimal128, c_date, c_datetime_ntz, c_string " \
          "FROM demo.all_types"
    conn = mysql.connector.connect(host="127.0.0.1", port=server.query_port, user="root", password="",
                                   connection_timeout=20)
    try:
        text = conn.cursor()
        text.execute(sql)
        want = sorted(text.fetchall(), key=repr)
        binary = conn.cursor(prepared=True)
        binary.execute(sql)
        got = sorted(binary.fetchall(), key=repr)
    finally:
        conn.close()
    assert len(want) == 8
    assert got == want


@pytest.fixture(scope="module")
def lineitem_info(spark, server):
    from support.random_queries import TableInfo

    return TableInfo(spark, server, "demo", "lineitem", 0.002)


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(data=st.data())
@pytest.mark.parametrize("door", ["mysql", "flight-sql"])
def test_random_selects_on_each_door_answer_spark_sqls_rows(server, lineitem_info, door, data):
    """Random projections and WHERE predicates (the generator the scan properties use): the
    rows a MySQL client and an ADBC Flight SQL client get equal Spark SQL's over the same
    files, every one of them."""
    from support.random_queries import columns_strategy, predicate

    info = lineitem_info
    columns = data.draw(columns_strategy(info.columns), label="columns")
    where = data.draw(predicate(info.scalar, info.samples, info.zone), label="where")
    template = info.sql(columns, where)
    want = Counter(tuple(row) for row in info.reference.sql(template.format(table=info.source)).collect())
    sql = template.format(table="demo.lineitem")
    got = Counter(mysql_rows(server.query_port, sql) if door == "mysql" else flight_rows(server, sql))
    assert got == want, template


def test_what_connector_j_sends_for_trinos_connector_is_answered_with_spark_sqls_rows(server, spark_views):
    """The statements MySQL Connector/J sent, recorded, as Trino's StarRocks connector drives
    it: the connect chatter and metadata answer (getTables and getColumns list the table and
    its columns in order), and each scan answers Spark SQL's rows (a LIMIT without ORDER BY:
    as many rows)."""
    import re

    from support import reader_sql

    columns = [f.name for f in spark_views.table("demo_lineitem").schema.fields]
    with pymysql.connect(host="127.0.0.1", port=server.query_port, user="root", password="", connect_timeout=20,
                         read_timeout=300) as conn, conn.cursor() as cur:
        for sql in reader_sql.CONNECT:
            cur.execute(sql)
        for sql in reader_sql.METADATA:
            cur.execute(sql)
            got = cur.fetchall()
            if "FROM INFORMATION_SCHEMA.COLUMNS" in sql:
                assert [row[3] for row in got] == columns, sql[:80]
            elif "FROM INFORMATION_SCHEMA.TABLES" in sql and "TABLE_ROWS" not in sql:
                assert ("demo", None, "lineitem", "TABLE") in [tuple(row[:4]) for row in got], sql[:80]
        for sql in reader_sql.SCANS:
            cur.execute(sql)
            got = _rows(cur.fetchall(), False)
            spark_sql = re.sub(r"`demo`\.`(\w+)`", r"demo_\1", sql)
            want = _rows([tuple(r) for r in spark_views.sql(spark_sql).collect()], False)
            if " LIMIT " in sql and "ORDER BY" not in sql:
                assert len(got) == len(want), sql
            else:
                assert got == want, sql


def test_starrocks_own_sqlalchemy_dialect_reflects_and_pages_as_a_bi_tool_does(server, spark_views, recwarn):
    """StarRocks' SQLAlchemy dialect (the ``starrocks`` package Superset and pandas use; it
    shares nothing with starscan) on the MySQL port: its connect probe (ADMIN SHOW FRONTEND
    CONFIG), its reflection (information_schema, SHOW CREATE TABLE, SHOW FULL COLUMNS) with
    StarRocks' nested types, a page of rows read through pandas, and a count, each Spark
    SQL's answer; no warning from the dialect."""
    import logging

    import pandas as pd
    import sqlalchemy as sa

    engine = sa.create_engine(f"starrocks://root:@127.0.0.1:{server.query_port}/demo")
    dialect_log: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = dialect_log.append  # type: ignore[method-assign]
    logging.getLogger("starrocks").addHandler(handler)
    try:
        inspector = sa.inspect(engine)
        assert "demo" in inspector.get_schema_names()
        assert {"all_types", "lineitem"} <= set(inspector.get_table_names())
        types = {c["name"]: c["type"] for c in inspector.get_columns("all_types")}
        assert types.keys() == {f.name for f in spark_views.table("demo_all_types").schema.fields}
        assert {type(types[c]).__name__ for c in ("c_array", "c_map", "c_struct")} == {"ARRAY", "MAP", "STRUCT"}
        assert not any(isinstance(t, sa.types.NullType) for t in types.values())
        page = pd.read_sql("SELECT l_orderkey, l_linenumber, l_quantity FROM lineitem "
                           "ORDER BY l_orderkey, l_linenumber LIMIT 20 OFFSET 40", engine)
        want = spark_views.sql("SELECT l_orderkey, l_linenumber, l_quantity FROM demo_lineitem "
                               "ORDER BY l_orderkey, l_linenumber LIMIT 20 OFFSET 40").collect()
        assert [tuple(r) for r in page.itertuples(index=False)] == [tuple(r) for r in want]
        lineitem = sa.Table("lineitem", sa.MetaData(), autoload_with=engine)
        with engine.connect() as conn:
            count = conn.execute(sa.select(sa.func.count()).select_from(lineitem)
                                 .where(lineitem.c.l_quantity > 10)).scalar()
        assert count == spark_views.sql("SELECT count(*) FROM demo_lineitem WHERE l_quantity > 10").first()[0]
    finally:
        logging.getLogger("starrocks").removeHandler(handler)
        engine.dispose()
    assert not dialect_log, [r.getMessage() for r in dialect_log]
    assert not [w for w in recwarn if issubclass(w.category, sa.exc.SAWarning)], [str(w.message) for w in recwarn]


def test_show_table_status_and_the_fe_config_answer_as_starrocks_does(server):
    """SHOW TABLE STATUS (DBeaver's and Navicat's table list) with MySQL's columns, WHERE on
    any SHOW's own columns, and ADMIN SHOW FRONTEND CONFIG for an administrator only."""
    conn = pymysql.connect(host="127.0.0.1", port=server.query_port, user="root", password="", database="db1")
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW TABLE STATUS LIKE 't%'")
            header = [d[0] for d in cur.description]
            assert header[:5] == ["Name", "Engine", "Version", "Row_format", "Rows"] and header[-1] == "Comment"
            assert "t1" in [row[0] for row in cur.fetchall()]
            cur.execute("SHOW TABLES WHERE Tables_in_db1 = 't1'")
            assert cur.fetchall() == (("t1",),)
            with pytest.raises(pymysql.err.MySQLError, match="Unknown column 'nope'"):
                cur.execute("SHOW TABLES WHERE nope = 1")
            cur.execute("ADMIN SHOW FRONTEND CONFIG LIKE 'plan_rate%'")
            assert {row[0]: row[2] for row in cur.fetchall()} == {
                "plan_rate_per_user": str(server.service.settings.plan_rate_per_user),
                "plan_rate_burst": str(server.service.settings.plan_rate_burst)}
            cur.execute("admin show frontend config like 'run_mode'")
            assert cur.fetchall()[0][:3] == ("run_mode", "[]", "shared_nothing")
    finally:
        conn.close()
    user = new_user(server, "pw", "db1.t1", prefix="cfg")
    with pytest.raises(pymysql.err.MySQLError, match="OPERATE privilege") as refused:
        mysql_rows(server.query_port, "ADMIN SHOW FRONTEND CONFIG", user, "pw")
    assert refused.value.args[0] == 1227


@pytest.mark.parametrize("sql, condition", [
    ("SELECT nocol, count(*) FROM demo.lineitem GROUP BY 1", "UNRESOLVED_COLUMN"),
    ("SELECT 1 / 0 FROM demo.lineitem LIMIT 1", "DIVIDE_BY_ZERO"),
    ("SELECT CAST(CASE WHEN l_orderkey < 1000 THEN '1' ELSE 'x' END AS INT) FROM demo.lineitem", "CAST_INVALID_INPUT"),
])
def test_spark_sqls_refusals_are_the_statements_errors_on_every_door(server, sql, condition):
    """A statement Spark SQL refuses, before it runs or while its tasks run, is answered with
    Spark's own words (its error condition and SQLSTATE, the statement's table names), as a
    SQL error on both doors: not an internal error with an id."""
    with pytest.raises(pymysql.err.MySQLError) as on_mysql:
        mysql_rows(server.query_port, sql)
    assert on_mysql.value.args[0] == 1064 and condition in on_mysql.value.args[1], on_mysql.value.args
    assert "starscan_table" not in on_mysql.value.args[1]
    with pytest.raises((DatabaseError, ProgrammingError), match=condition):
        flight_rows(server, sql)


def test_a_query_task_that_fails_after_sending_rows_fails_the_statement(spark):
    """The tasks of an FE query send their rows themselves (starscan.spark.result_stream): a
    task that fails after some of its rows were read ends the statement with an error,
    after the rows it had; Spark's next attempt never sends them twice."""
    from starscan.spark import pyspark_internals

    frame = spark.range(0, 60_000, numPartitions=1).selectExpr(
        "id", "CAST(CASE WHEN id < 45000 THEN '1' ELSE 'x' END AS INT) AS v")
    _, batches = pyspark_internals.arrow_batches(frame, "UTC")
    rows = 0
    with pytest.raises(Exception) as failed:
        for batch in batches:
            rows += batch.num_rows
    assert rows < 45_000
    assert "CAST_INVALID_INPUT" in str(failed.value) or "after sending" in str(failed.value), failed.value
    ids = [b.column("id") for b in pyspark_internals.arrow_batches(spark.range(0, 25_000, numPartitions=3), "UTC")[1]]
    assert sum(len(c) for c in ids) == 25_000 and [v for c in ids for v in c.to_pylist()] == list(range(25_000))


def test_a_query_the_client_stops_early_leaves_no_spark_job_running(server):
    """``SET sql_select_limit`` stops an FE query after its first rows: the query's Spark job
    is cancelled then, not left to run to its end or to fail on a closed socket."""
    import time

    conn = pymysql.connect(host="127.0.0.1", port=server.query_port, user="root", password="")
    try:
        with conn.cursor() as cur:
            cur.execute("SET sql_select_limit = 5")
            cur.execute("SELECT upper(a.l_comment) AS c FROM demo.lineitem a JOIN demo.lineitem b "
                        "ON a.l_orderkey = b.l_orderkey")
            assert len(cur.fetchall()) == 5
    finally:
        conn.close()
    tracker = server.spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 30
    while tracker.getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not tracker.getActiveJobsIds()
