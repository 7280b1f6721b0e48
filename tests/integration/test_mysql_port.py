"""The FE's MySQL protocol port (query_port) with real MySQL clients over real sockets:
PyMySQL, Oracle's mysql-connector-python and Debian's `mariadb` command line.

Everything is checked against the real server of the session (conftest `server`): users
are created in its users file, schemas come from the tables' Spark schemas."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pymysql
import pytest
from support.readers import runtime_settings
from support.servers import new_user

from starscan.spark.types import STRING_LENGTH, starrocks_type

CONNECTOR_COLUMNS_SQL = ("SELECT `COLUMN_NAME`, `ORDINAL_POSITION`, `COLUMN_KEY`, `DATA_TYPE`, `COLUMN_SIZE`, "
                         "`DECIMAL_DIGITS` FROM `information_schema`.`COLUMNS` WHERE `TABLE_SCHEMA`=%s AND `TABLE_NAME`=%s;")


# ---- helpers ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def port(server) -> int:
    assert server.query_port and server.query_port != server.http_port
    return server.query_port


def _new_user(server, password: str, *grants: str) -> str:
    return new_user(server, password, *grants, prefix="m")


@pytest.fixture(scope="module")
def alice(server) -> tuple[str, str]:
    """Sees db1.t1 only."""
    return _new_user(server, "alice-pw", "db1.t1"), "alice-pw"


def connect(port: int, user: str = "root", password: str = "", database: str | None = None, **kw):
    return pymysql.connect(host="127.0.0.1", port=port, user=user, password=password, database=database,
                           connect_timeout=20, read_timeout=120, **kw)


def rows(conn, sql: str, args=None) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def header(conn, sql: str, args=None) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return [d[0] for d in cur.description]


def expected_columns(server, db: str, table: str) -> list[tuple]:
    """What StarRocks' FE reports for each column (Type.getColumnSize / getDecimalDigits /
    toMysqlDataTypeString), derived independently from the Spark schema."""
    from pyspark.sql import types as T

    schema = server.planner.schemas.schema(server.warehouse.snapshot(db, table))
    out = []
    for i, f in enumerate(schema.fields, 1):
        dt = f.dataType
        simple = {T.ByteType: ("tinyint", 3, 0), T.ShortType: ("smallint", 5, 0), T.IntegerType: ("int", 10, 0),
                  T.LongType: ("bigint", 19, 0), T.FloatType: ("float", 7, 7), T.DoubleType: ("double", 15, 15),
                  T.BooleanType: ("tinyint", None, 0), T.DateType: ("date", None, None),
                  T.TimestampType: ("datetime", None, None), T.TimestampNTZType: ("datetime", None, None),
                  T.BinaryType: ("varbinary", None, None)}
        if type(dt) in simple:
            want = simple[type(dt)]
        elif isinstance(dt, T.DecimalType):
            want = ("decimal", dt.precision, dt.scale)
        elif isinstance(dt, T.StringType):
            srt = starrocks_type(f)
            want = (srt.name.lower(), srt.column_size or STRING_LENGTH, None)
        elif isinstance(dt, T.ArrayType):
            want = ("array", None, None)
        elif isinstance(dt, T.MapType):
            want = ("map", None, None)
        elif isinstance(dt, T.StructType):
            want = ("struct", None, None)
        else:
            raise AssertionError(f"all_types has a column of unexpected type {dt}")
        out.append((f.name, i, "", *want))
    return out


def _as_tuple(row) -> tuple:
    name, pos, key, data_type, size, digits = row
    return (name, int(pos), key, data_type, None if size is None else int(size), None if digits is None else int(digits))


# ---- connect and authenticate ----------------------------------------------------------
def test_root_with_empty_password_connects_and_version_is_starrocks_like(port):
    from starscan.planner.mysql.variables import MYSQL_VERSION

    with connect(port) as conn:
        assert conn.get_server_info() == MYSQL_VERSION
        assert rows(conn, "select version()") == [(MYSQL_VERSION,)]
        (comment,), = rows(conn, "select @@version_comment limit 1")
        assert comment.startswith("StarRocks version ")
        assert rows(conn, "select 1 + 1") == [(2,)]


def test_password_login_and_wrong_password(port, alice, fe_url):
    from support.readers import scrape, value

    user, pw = alice
    with connect(port, user, pw) as conn:
        assert rows(conn, "select current_user()") == [(user,)]
    before = value(scrape(fe_url), "starscan_auth_failures_total", port="mysql")
    for bad_user, bad_pw in [(user, "wrong"), (user, ""), ("nobody", "x"), ("nobody", "")]:
        with pytest.raises(pymysql.err.OperationalError) as err:
            connect(port, bad_user, bad_pw)
        assert err.value.args[0] == 1045
        assert f"Access denied for user '{bad_user}'" in err.value.args[1]
    # Refused MySQL logins are counted with the HTTP and BE ones.
    assert value(scrape(fe_url), "starscan_auth_failures_total", port="mysql") - before == 4


def test_password_set_before_the_mysql_port_must_be_set_again(server, port):
    user = _new_user(server, "old-pw", "*.*")
    # A users file written before the MySQL port holds no double-SHA1 for the user.
    path = server.users.path
    data = json.loads(path.read_text())
    del data["users"][user]["mysql_native_password"]
    path.write_text(json.dumps(data))
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000))
    with pytest.raises(pymysql.err.OperationalError) as err:
        connect(port, user, "old-pw")
    assert err.value.args[0] == 1045
    server.users.set_password(user, "old-pw")
    with connect(port, user, "old-pw") as conn:
        assert rows(conn, "select 1") == [(1,)]


def test_stored_hash_is_mysql_double_sha1(server):
    import hashlib

    user = _new_user(server, "s3cret")
    stored = json.loads(server.users.path.read_text())["users"][user]["mysql_native_password"]
    assert stored == hashlib.sha1(hashlib.sha1(b"s3cret").digest()).hexdigest()
    assert "s3cret" not in server.users.path.read_text()


# ---- what the Spark connector asks ------------------------------------------------------
def test_connector_column_query_matches_spark_schema_for_all_types(server, port):
    want = expected_columns(server, "demo", "all_types")
    assert len(want) >= 10
    with connect(port) as conn:
        assert header(conn, CONNECTOR_COLUMNS_SQL, ("demo", "all_types")) == [
            "COLUMN_NAME", "ORDINAL_POSITION", "COLUMN_KEY", "DATA_TYPE", "COLUMN_SIZE", "DECIMAL_DIGITS"]
        got = [_as_tuple(r) for r in rows(conn, CONNECTOR_COLUMNS_SQL, ("demo", "all_types"))]
    assert got == want


def test_connector_column_query_with_mysql_connector_python(server, port):
    import mysql.connector

    want = expected_columns(server, "db1", "t1")
    conn = mysql.connector.connect(host="127.0.0.1", port=port, user="root", password="", connection_timeout=20)
    try:
        cur = conn.cursor()
        cur.execute(CONNECTOR_COLUMNS_SQL, ("db1", "t1"))
        got = [_as_tuple(r) for r in cur.fetchall()]
        assert [d[0] for d in cur.description][0] == "COLUMN_NAME"
        assert got == want
        # db1.t1: k1 INT NOT NULL, v1 VARCHAR(20), d DATE, dt DATETIME, m DECIMAL(10,2)
        assert got == [("k1", 1, "", "int", 10, 0), ("v1", 2, "", "varchar", 20, None), ("d", 3, "", "date", None, None),
                       ("dt", 4, "", "datetime", None, None), ("m", 5, "", "decimal", 10, 2)]
        cur.execute("select version()")
        assert cur.fetchall()[0][0]
        cur.close()
    finally:
        conn.close()


def test_connector_database_and_table_queries(server, port):
    with connect(port) as conn:
        dbs = [r[0] for r in rows(conn, "show databases;")]
        assert header(conn, "show databases;") == ["Database"]
        assert {"demo", "db1", "information_schema"} <= set(dbs)
        assert rows(conn, "select SCHEMA_NAME from information_schema.schemata where SCHEMA_NAME in (%s);", ("demo",)) == [("demo",)]
        assert rows(conn, "select SCHEMA_NAME from information_schema.schemata where SCHEMA_NAME in (%s) AND CATALOG_NAME = 'def';",
                    ("db1",)) == [("db1",)]
        assert rows(conn, "select SCHEMA_NAME from information_schema.schemata where SCHEMA_NAME in (%s);", ("nope",)) == []
        got = rows(conn, "select TABLE_SCHEMA, TABLE_NAME from information_schema.tables "
                         "where TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA in (%s) ;", ("demo",))
        assert sorted(got) == [("demo", t) for t in server.warehouse.tables("demo")]


# ---- JDBC connect-time chatter, SHOW / DESC / USE ---------------------------------------
def test_jdbc_connect_chatter(port):
    with connect(port) as conn:
        for sql in ["SET NAMES utf8mb4", "SET character_set_results = NULL", "SET autocommit=1",
                    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", "SET sql_mode='STRICT_TRANS_TABLES'"]:
            rows(conn, sql)
        got = rows(conn, "/* mysql-connector-j-8.0.33 */SELECT  @@session.auto_increment_increment AS auto_increment_increment, "
                         "@@character_set_client AS character_set_client, @@character_set_connection AS character_set_connection, "
                         "@@character_set_results AS character_set_results, @@character_set_server AS character_set_server, "
                         "@@collation_server AS collation_server, @@collation_connection AS collation_connection, "
                         "@@init_connect AS init_connect, @@interactive_timeout AS interactive_timeout, @@license AS license, "
                         "@@lower_case_table_names AS lower_case_table_names, @@max_allowed_packet AS max_allowed_packet, "
                         "@@net_write_timeout AS net_write_timeout, @@performance_schema AS performance_schema, "
                         "@@query_cache_size AS query_cache_size, @@query_cache_type AS query_cache_type, "
                         "@@sql_mode AS sql_mode, @@system_time_zone AS system_time_zone, @@time_zone AS time_zone, "
                         "@@transaction_isolation AS transaction_isolation, @@wait_timeout AS wait_timeout")
        assert len(got) == 1 and len(got[0]) == 21
        assert rows(conn, "select @@sql_mode") == [("STRICT_TRANS_TABLES",)]
        assert rows(conn, "select @@transaction_isolation") == [("READ-COMMITTED",)]
        assert rows(conn, "SHOW VARIABLES LIKE 'lower_case_table_names'") == [("lower_case_table_names", "0")]
        assert rows(conn, "select @@tx_isolation, @@autocommit") == [("REPEATABLE-READ", 1)]


def test_use_show_tables_desc_show_create(server, port):
    with connect(port) as conn:
        rows(conn, "USE db1")
        assert rows(conn, "select database()") == [("db1",)]
        tables = [r[0] for r in rows(conn, "SHOW TABLES")]
        assert header(conn, "SHOW TABLES") == ["Tables_in_db1"]
        assert sorted(tables) == server.warehouse.tables("db1")
        desc = rows(conn, "DESC t1")
        assert desc == [("k1", "int(11)", "NO", "false", None, ""), ("v1", "varchar(20)", "YES", "false", None, ""),
                        ("d", "date", "YES", "false", None, ""), ("dt", "datetime", "YES", "false", None, ""),
                        ("m", "decimal(10,2)", "YES", "false", None, "")]
        assert rows(conn, "describe demo.all_types") and rows(conn, "show full columns from t1 like 'k%'")[0][0] == "k1"
        (name, ddl), = rows(conn, "SHOW CREATE TABLE db1.t1")
        assert name == "t1"
        assert ddl.startswith("CREATE TABLE `t1` (\n  `k1` int(11) NOT NULL")
        assert "`m` decimal(10,2) NULL" in ddl
        (_, ddl), = rows(conn, "SHOW CREATE TABLE sales")
        assert "PARTITION BY (`region`, `day`)" in ddl
        with pytest.raises(pymysql.err.OperationalError) as err:
            rows(conn, "USE no_such_db")
        assert err.value.args[0] == 1049
        with pytest.raises(pymysql.err.ProgrammingError) as err:
            rows(conn, "DESC no_such_table")
        assert err.value.args[0] == 1146
        assert rows(conn, "select database()") == [("db1",)]


# ---- grants hide tables -----------------------------------------------------------------
def test_grants_hide_tables(server, port, alice):
    user, pw = alice
    with connect(port, user, pw) as conn:
        assert [r[0] for r in rows(conn, "show databases")] == ["information_schema", "db1"]
        assert rows(conn, "show tables from db1") == [("t1",)]
        assert rows(conn, "select TABLE_SCHEMA, TABLE_NAME from information_schema.tables") == [("db1", "t1")]
        assert rows(conn, CONNECTOR_COLUMNS_SQL, ("demo", "all_types")) == []
        assert len(rows(conn, CONNECTOR_COLUMNS_SQL, ("db1", "t1"))) == 5
        assert {r[0] for r in rows(conn, "select distinct TABLE_NAME from information_schema.columns")} == {"t1"}
        with pytest.raises(pymysql.err.OperationalError) as err:
            rows(conn, "use demo")
        assert err.value.args[0] == 1049
        for sql in ["desc db1.sales", "show create table db1.sales"]:
            with pytest.raises(pymysql.err.ProgrammingError) as err:
                rows(conn, sql)
            assert err.value.args[0] == 1146
        with pytest.raises(pymysql.err.OperationalError) as err:
            rows(conn, "select * from demo.all_types limit 1")
        assert err.value.args[0] == 1142
        assert len(rows(conn, "select k1 from db1.t1")) == 3


# ---- plain SELECTs on Spark -------------------------------------------------------------
def test_plain_select_runs_on_spark(port):
    with connect(port, database="db1") as conn:
        got = rows(conn, "select k1, v1, d, dt, m from db1.t1 where k1 <= 2")
        assert header(conn, "select k1, upper(v1) as up from t1 limit 1") == ["k1", "up"]
        import datetime as dt
        from decimal import Decimal

        assert sorted(got) == [
            (1, "a", dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5), Decimal("12.34")),
            (2, "b", dt.date(1969, 12, 31), dt.datetime(2024, 1, 2, 3, 4, 5, 123), Decimal("-0.01")),
        ]
        assert rows(conn, "select k1 from t1 where v1 is null") == [(3,)]
        assert len(rows(conn, "select * from db1.t1")) == 3
        assert rows(conn, "select k1 from t1 where k1 > 1 limit 0") == []
        assert len(rows(conn, "select * from demo.lineitem limit 7")) == 7


def test_every_row_comes_back_and_only_a_limit_someone_sets_cuts_it(server, port):
    """No silent cap: a whole-table SELECT answers every row (the table has more rows than
    the 10,000 the port once cut at); MySQL's sql_select_limit limits as MySQL's does (a
    LIMIT of the statement's own wins); an operator's query_max_rows fails the statement
    with an error naming it, never a shorter answer."""
    location = str(server.warehouse.snapshot("demo", "lineitem").location)
    want = sorted(tuple(r) for r in server.spark.read.parquet(location).select("l_orderkey", "l_linenumber").collect())
    assert len(want) > 10_000
    with connect(port) as conn:
        assert sorted(rows(conn, "select l_orderkey, l_linenumber from demo.lineitem")) == want
        rows(conn, "SET sql_select_limit = 100")
        assert len(rows(conn, "select l_orderkey from demo.lineitem")) == 100
        assert len(rows(conn, "select l_orderkey from demo.lineitem limit 150")) == 150
        assert len(rows(conn, "select l_orderkey, count(*) from demo.lineitem group by l_orderkey")) == 100
        rows(conn, "SET sql_select_limit = DEFAULT")
        assert len(rows(conn, "select l_orderkey from demo.lineitem")) == len(want)
        with runtime_settings(server, query_max_rows=1000):
            for sql in ("select l_orderkey from demo.lineitem", "select l_orderkey from demo.lineitem order by 1"):
                with pytest.raises(pymysql.err.OperationalError) as failed:
                    rows(conn, sql)
                assert "query_max_rows=1000" in str(failed.value)
            assert len(rows(conn, "select l_orderkey from demo.lineitem limit 1000")) == 1000
        assert rows(conn, "select 1") == [(1,)]  # the connection is still usable
        assert len(rows(conn, "select l_orderkey from demo.lineitem where l_orderkey < 0")) == 0


# ---- other statements: an error, and the connection stays usable ------------------------
@pytest.mark.parametrize("sql, code", [
    ("insert into db1.t1 values (9, 'x', null, null, null)", 1235),
    ("drop table db1.t1", 1235),
    ("create database x", 1235),
    ("select reflect('java.lang.System', 'exit', 0), count(*) from db1.t1", 1064),
    ("select count(*) from db1.t1 join db1.nope on true", 1146),
    ("select reflect('java.lang.System', 'exit', 0) from db1.t1", 1064),
    ("select nope from db1.t1", 1064),
    ("select * from db1.nope", 1146),
    ("select * from nope.t1", 1049),
    ("selec 1 form", 1064),
    ("SHOW FRONTENDS", 1235),
])
def test_unsupported_statement_then_a_working_one(port, sql, code):
    with connect(port) as conn:
        with pytest.raises(pymysql.err.MySQLError) as err:
            rows(conn, sql)
        assert err.value.args[0] == code, err.value.args
        assert err.value.args[1]
        assert rows(conn, "select k1 from db1.t1 where k1 = 1") == [(1,)]


def test_select_without_database_is_no_database_selected(port):
    with connect(port) as conn:
        with pytest.raises(pymysql.err.MySQLError) as err:
            rows(conn, "select * from t1")
        assert err.value.args[0] == 1046


# ---- the mariadb command line -----------------------------------------------------------
def _mariadb() -> str:
    binary = shutil.which("mariadb") or shutil.which("mysql")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("the mariadb/mysql client is missing: apt-get install mariadb-client (quickstart.sh test does)")
        pytest.skip("no mariadb/mysql client (apt-get install mariadb-client)")
    return binary


def _cli(port: int, *args: str, sql: str, user: str = "root", password: str | None = None, stdin: bool = False):
    cmd = [_mariadb(), "-h127.0.0.1", f"-P{port}", f"-u{user}", "--protocol=TCP", "--batch",
           "--skip-ssl", *args]
    if password:
        cmd.insert(4, f"-p{password}")
    if not stdin:
        cmd += ["-e", sql]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, input=sql if stdin else None)


def test_mariadb_cli(server, port, alice):
    out = _cli(port, sql="show databases; select version(); use db1; show tables; desc t1; "
                         "select k1, v1 from t1 where k1 = 1;")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "demo" in text and "db1" in text
    assert "Tables_in_db1\nsales\nt1\n" in text
    assert "k1\tint(11)\tNO\tfalse\tNULL\t\n" in text
    assert text.rstrip().endswith("k1\tv1\n1\ta")
    user, pw = alice
    out = _cli(port, sql="show databases", user=user, password=pw)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Database", "information_schema", "db1"]
    out = _cli(port, sql="select 1", user=user, password="wrong")
    assert out.returncode != 0
    assert "1045" in out.stderr and "Access denied" in out.stderr
    # An error in a script, then the next statement on the same connection (--force).
    out = _cli(port, "--force", sql="delete from db1.t1;\nselect k1 from db1.t1 where k1 = 2;\n", stdin=True)
    assert "ERROR 1235" in out.stderr, (out.stdout, out.stderr)
    assert out.stdout.split() == ["k1", "2"]


# ---- configuration and lifecycle --------------------------------------------------------
def test_query_port_setting(monkeypatch):
    from starscan.core.errors import ConfigError
    from starscan.settings.config import load_settings

    assert load_settings().query_port == 9030
    monkeypatch.setenv("STARSCAN_QUERY_PORT", "19030")
    assert load_settings().query_port == 19030
    assert load_settings(query_port=29030).query_port == 29030  # the --query-port flag
    monkeypatch.setenv("STARSCAN_QUERY_PORT", "70000")
    with pytest.raises(ConfigError, match="query_port"):
        load_settings()


def test_cli_has_query_port_flag():
    from typer.testing import CliRunner

    from starscan.app.cli import app

    out = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0
    assert "--query-port" in out.output


def test_port_stops_cleanly_and_closes_connections(server, base_settings):
    import socket

    from starscan.planner.mysql import MysqlPort

    extra = MysqlPort(base_settings, server.statements, server.users).start()
    assert extra.port and extra.port != server.query_port
    conn = connect(extra.port)
    assert rows(conn, "select 1") == [(1,)]
    extra.stop()
    with pytest.raises(pymysql.err.MySQLError):
        rows(conn, "select 1")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", extra.port), timeout=2).close()
    # The session's port is unaffected.
    with connect(server.query_port) as other:
        assert rows(other, "select 1") == [(1,)]


def test_show_grants_names_direct_read_as_its_own_privilege(server, port):
    name = _new_user(server, "pw", "db1.*", "direct_read:db1.t1")
    with connect(port, name, "pw") as conn:
        assert sorted(r[0] for r in rows(conn, "SHOW GRANTS")) == [
            f"GRANT DIRECT_READ ON db1.t1 TO '{name}'@'%'", f"GRANT SELECT ON db1.* TO '{name}'@'%'"]
