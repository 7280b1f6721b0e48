"""The public Python reader (`starscan.client.connect`) against the shared server: every
demo.all_types value equal to Spark's, with and without ``native_types``; a many-tablet
table read in parallel equals the serial read; each kind of failure is its own exception
class carrying the server's message; results go straight into DuckDB and pandas."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter

import pyarrow as pa
import pytest
from support.values import instant_to_zone, same, spark_to_starrocks

from starscan.client import (
    AuthenticationError,
    PermissionDenied,
    QueryError,
    ReadOptions,
    SnapshotGoneError,
    connect,
)


@pytest.fixture(scope="module")
def conn(fe_url):
    return connect(fe_url, "root", "", max_workers=4)


@pytest.fixture(scope="module")
def zone(server) -> str:
    return server.settings.time_zone


@pytest.fixture(scope="module")
def all_types_spark(spark, server):
    df = spark.read.parquet(str(server.warehouse.table_path("demo", "all_types")))
    return df.schema, {r["id"]: r for r in df.collect()}


@pytest.mark.parametrize("engine", ["sql"], indirect=True)  # the nested columns: the sql engine
def test_every_all_types_value_equals_spark(conn, all_types_spark, zone, engine):
    from pyspark.sql import types as T

    schema, want = all_types_spark
    got = conn.read_arrow("demo.all_types")
    assert sorted(got.column("id").to_pylist()) == sorted(want)
    types = {f.name: f.dataType for f in schema.fields}
    for row in got.to_pylist():
        for name, value in row.items():
            expected = spark_to_starrocks(want[row["id"]][name], types[name], zone)
            if isinstance(types[name], T.MapType) and value is not None:  # pyarrow gives maps as key/value pairs
                value = dict(value)
            assert same(value, expected), (name, row["id"], value, expected)


@pytest.mark.parametrize("engine", ["auto", "sql"], indirect=True)
def test_native_types_are_arrows_own(conn, all_types_spark, zone, engine):
    schema, want = all_types_spark
    cols = ["id", "c_date", "c_datetime", "c_datetime_ntz", "c_string"]
    got = conn.read_arrow("demo.all_types", columns=cols, native_types=True)
    assert got.schema.field("c_date").type == pa.date32()
    assert got.schema.field("c_datetime").type == pa.timestamp("us")
    assert got.schema.field("c_string").type == pa.utf8()
    for row in got.to_pylist():
        spark_row = want[row["id"]]
        assert row["c_date"] == spark_row["c_date"]
        expected_dt = spark_row["c_datetime"]
        assert row["c_datetime"] == (None if expected_dt is None else instant_to_zone(expected_dt, zone))
        assert row["c_datetime_ntz"] == spark_row["c_datetime_ntz"]
    wire = conn.read_arrow("demo.all_types", columns=cols)  # without: the wire's text
    assert wire.schema.field("c_date").type == pa.utf8()
    assert sorted(r["c_date"] for r in wire.to_pylist() if r["c_date"]) == \
        sorted(d.isoformat() for d in got.column("c_date").to_pylist() if d is not None)


def test_a_many_tablet_table_read_in_parallel_equals_the_serial_read(fe_url, spark, server):
    plan_tablets = len(server.warehouse.snapshot("db1", "sales").tablets)
    assert plan_tablets >= 4
    serial = connect(fe_url, max_workers=1).read_arrow("db1.sales", where="amount > 10")
    parallel = connect(fe_url, max_workers=4, request_tablet_size=1).read_arrow("db1.sales", where="amount > 10")
    rows = Counter(map(repr, parallel.to_pylist()))
    assert rows == Counter(map(repr, serial.to_pylist()))
    want = spark.read.parquet(str(server.warehouse.table_path("db1", "sales"))).where("amount > 10").count()
    assert parallel.num_rows == want > 0
    reader = connect(fe_url, max_workers=2, batch_size=7).read_batches("db1.sales", columns=["id"])
    sizes = [b.num_rows for b in reader]
    assert max(sizes) <= 7 and sum(sizes) == 400  # streamed, batch by batch


def test_each_kind_of_failure_is_its_own_class_with_the_servers_message(fe_url, server):
    with pytest.raises(AuthenticationError) as refused:
        connect(fe_url, "root", "wrong password").read_arrow("demo.all_types")
    assert refused.value.status == 401 and refused.value.message
    name = f"reader_{uuid.uuid4().hex[:8]}"
    server.users.set_password(name, "pw", create=True)
    server.users.grant(name, "db1.t1")
    with pytest.raises(PermissionDenied) as denied:
        connect(fe_url, name, "pw").read_arrow("demo.all_types")
    assert "SELECT privilege" in denied.value.message
    with pytest.raises(QueryError) as unknown:
        connect(fe_url).read_arrow("demo.no_such_table")
    assert "no_such_table" in unknown.value.message
    with pytest.raises(QueryError) as column:
        connect(fe_url).read_arrow("demo.all_types", columns=["nope"])
    assert "nope" in column.value.message
    with pytest.raises(SnapshotGoneError):
        connect(fe_url).read_arrow("db1.sales", since_version=123456)  # a version the server never had
    with pytest.raises(ValueError):
        ReadOptions.of({"starrocks.no.such.option": 1})
    assert connect(fe_url).read_arrow("db1.t1").num_rows == 3  # and the server goes on serving


def test_the_protocol_clients_own_calls_raise_the_same_classes(fe_url, server):
    """``StarscanClient`` step by step raises the classified errors too, with the call that
    failed; a BE that cannot be reached is a NetworkError, never thriftpy2's exception."""
    from starscan.client import NetworkError, ScanStats, ServerError, StarscanClient

    with pytest.raises(AuthenticationError) as refused:
        StarscanClient(fe_url, "root", "wrong password").plan("demo", "all_types", "select id from demo.all_types")
    assert refused.value.call == "_query_plan" and refused.value.status == 401
    client = StarscanClient(fe_url, retries=0, failovers=0, timeout_s=10)
    with pytest.raises(QueryError) as unknown:
        client.schema("demo", "no_such_table")
    assert unknown.value.call == "_schema" and "no_such_table" in unknown.value.message
    plan = client.plan("db1", "t1", "select * from db1.t1")
    tablets = [int(t) for t in plan["partitions"]]
    routings = next(iter(plan["partitions"].values()))["routings"]
    with pytest.raises(QueryError) as not_planned:  # a tablet the plan does not hold
        list(client.scan_group("db1", "t1", plan, routings, [max(tablets) + 1000], 1024, ScanStats()))
    assert not_planned.value.call == "open_scanner" and not_planned.value.kind == "NotFound"
    with pytest.raises(NetworkError) as unreachable:
        list(client.scan_group("db1", "t1", plan, ["127.0.0.1:1"], tablets, 1024, ScanStats()))
    assert unreachable.value.call == "open_scanner" and "127.0.0.1:1" in unreachable.value.message
    http = f"127.0.0.1:{server.http_port}"  # an HTTP server where a BE was planned: not the protocol's answer
    with pytest.raises(ServerError) as foreign:
        list(client.scan_group("db1", "t1", plan, [http], tablets, 1024, ScanStats()))
    assert foreign.value.call == "open_scanner" and "did not answer as the protocol says" in foreign.value.message


def test_results_go_straight_into_duckdb_and_pandas(conn):
    import duckdb

    lineitem = conn.read_arrow("demo.lineitem", columns=["l_returnflag", "l_quantity"], native_types=True)
    counts = duckdb.sql("select l_returnflag, count(*) as n from lineitem group by l_returnflag order by 1").fetchall()
    assert sum(n for _, n in counts) == lineitem.num_rows
    frame = conn.read_arrow("demo.all_types", columns=["id", "c_date", "c_double"], native_types=True).to_pandas()
    assert len(frame) > 0 and str(frame["c_double"].dtype) == "float64"
    assert all(d is None or isinstance(d, dt.date) for d in frame["c_date"].tolist()) or \
        str(frame["c_date"].dtype).startswith("datetime64")


def test_a_reader_dropped_after_one_batch_closes_its_scanners(fe_url, server):
    import gc

    from support.waits import wait_until

    def open_scanners() -> int:
        return sum(1 for ctx in server.contexts.snapshot() if ctx.info.table == "db1.sales")

    assert open_scanners() == 0
    reader = connect(fe_url, max_workers=2, request_tablet_size=1, batch_size=5).read_batches("db1.sales")
    assert reader.read_next_batch().num_rows > 0
    assert open_scanners() > 0
    del reader
    gc.collect()
    wait_until(lambda: open_scanners() == 0, timeout_s=30, what="the dropped reader's scanners to close")


def test_the_be_acknowledges_an_ordered_scan_and_only_that(client, be_addr):
    """The ordered property's acknowledgement (protocol_extensions.ORDERED_ACK) is what lets
    a client resume by skipping rows; StarRocks' readers never send the property and get
    StarRocks' own OK status."""
    from support.readers import Reader, plan_for

    from starscan.core.protocol_extensions import ORDERED_ACK, ORDERED_PROPERTY

    opaque, tablets = plan_for(client, "db1", "sales", "select id from db1.sales")
    reader = Reader(be_addr)
    try:
        ordered = reader.open("db1", "sales", opaque, tablets, properties={ORDERED_PROPERTY: "true"})
        plain = reader.open("db1", "sales", opaque, tablets)
        assert ordered.status.status_code == plain.status.status_code == 0
        assert ordered.status.error_msgs == [ORDERED_ACK] and not plain.status.error_msgs
        assert reader.drain(ordered.context_id) == reader.drain(plain.context_id) == 400
    finally:
        reader.close()


def test_a_read_left_unfinished_does_not_keep_the_program_from_ending(fe_url, tmp_path):
    """A script that takes one batch of a read with several workers and ends, ends: the
    workers must not hold the interpreter at exit while the read is still referenced."""
    import subprocess
    import sys

    script = tmp_path / "leave.py"
    script.write_text(
        "from starscan.client import connect\n"
        f"conn = connect({fe_url!r}, 'root', '', max_workers=3, request_tablet_size=1, batch_size=100)\n"
        "reader = conn.read_batches('demo.lineitem')\n"
        "reader.read_next_batch()\n"
        "print('took one')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "took one", done.stderr[-2000:]
