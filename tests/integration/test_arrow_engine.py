"""The arrow engine on the shared server (real Spark, real Python workers): which plans it
takes, and bad input. Values and properties against Spark run in test_scan_values.py and
test_scan_properties.py on both engines (conftest `engine`)."""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.readers import Reader, engine_counts, plan_for, scan_engine_setting
from support.sockets import closed_without_a_word
from support.waits import wait_until

from starscan.client import ReadError
from starscan.core.thrift_defs import wire

pytestmark = pytest.mark.spark_line  # the Spark-version tier (docs/scaling.md)

OK = wire.TStatusCode.OK


@pytest.fixture
def engine_setting(server):
    with scan_engine_setting(server) as set_engine:
        yield set_engine


def fresh_table(server, name: str, files: dict[str, pa.Table]):
    location = server.warehouse.table_path("arrowdb", name)
    shutil.rmtree(location, ignore_errors=True)
    location.mkdir(parents=True)
    for rel, table in files.items():
        (location / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, location / rel)
    server.warehouse.invalidate("arrowdb", name)
    return location


def read_to_end(reader, cid: str, offset: int = 0):
    """get_next until eos or an error; returns (rows read, the final status)."""
    for _ in range(100_000):
        res = reader.next(cid, offset)
        if res.status.status_code != OK or res.eos:
            return offset, res.status
        offset += pa.ipc.open_stream(res.rows).read_all().num_rows
    raise AssertionError("no end")


def scan_status(client, be_addr, db, table, sql, batch_size=1024, **kw):
    """Plan, open and read to the end; returns (rows, the final status)."""
    plan, tablets = plan_for(client, db, table, sql)
    reader = Reader(be_addr)
    try:
        cid = reader.open_ok(db, table, plan, tablets, batch_size=batch_size, **kw)
        out = read_to_end(reader, cid)
        reader.close_scanner(cid)
        return out
    finally:
        reader.close()


def assert_the_server_goes_on(client):
    assert client.read("demo", "lineitem", "select l_orderkey from demo.lineitem where l_quantity > 49").num_rows > 0


def ran_on(server, before: dict) -> str:
    after = engine_counts(server)
    grown = [e for e in ("arrow", "sql") if after.get(e, 0) > before.get(e, 0)]
    assert len(grown) == 1, (before, after)
    return grown[0]


def test_auto_picks_arrow_where_exact_and_sql_elsewhere(server, client, spark, engine_setting):
    engine_setting("auto")
    for sql, engine in [
        ("select l_orderkey, l_shipdate from demo.lineitem where l_quantity > 10 and l_shipmode in ('AIR', 'RAIL')", "arrow"),
        ("select l_orderkey from demo.lineitem where l_shipdate between '1995-01-01' and DATE '1995-12-31'", "arrow"),
        ("select l_orderkey from demo.lineitem where l_comment like '%ly%'", "arrow"),
        ("select l_orderkey from demo.lineitem where upper(l_shipmode) = 'AIR'", "sql"),      # a function
        ("select l_orderkey from demo.lineitem where l_discount > 0.05", "arrow"),            # decimal
        ("select c_float from demo.all_types where c_float > 0", "arrow"),                     # NaN ordering
        ("select c_float from demo.all_types where c_double > cast('NaN' as double)", "sql"),  # a NaN literal
        ("select c_array from demo.all_types", "sql"),                                         # nested
    ]:
        before = engine_counts(server)
        table = sql.split(" from ")[1].split()[0].split(".")[1]
        got = client.read("demo", table, sql)
        assert ran_on(server, before) == engine, sql
        path = server.warehouse.table_path("demo", table)
        assert got.num_rows == spark.sql(sql.replace(f"demo.{table}", f"parquet.`{path}`")).count(), sql


def test_forced_arrow_refuses_a_plan_it_cannot_read_exactly(server, client, be_addr, engine_setting):
    engine_setting("arrow")
    rows, status = scan_status(client, be_addr, "demo", "lineitem",
                               "select l_orderkey from demo.lineitem where upper(l_shipmode) = 'AIR'")
    assert status.status_code == wire.TStatusCode.INVALID_ARGUMENT
    assert "scan_engine = arrow cannot run this scan" in status.error_msgs[0] and "func" in status.error_msgs[0]


@pytest.mark.parametrize("engine", ["arrow", "sql"])
def test_a_corrupt_file_fails_the_scan_with_its_name_and_the_server_goes_on(server, client, be_addr, engine_setting,
                                                                            engine):
    engine_setting(engine)
    location = fresh_table(server, f"corrupt_{engine}", {
        "part-0.parquet": pa.table({"id": list(range(100))}),
        "part-1.parquet": pa.table({"id": list(range(100, 200))}),
    })
    plan, tablets = plan_for(client, "arrowdb", f"corrupt_{engine}", f"select id from arrowdb.corrupt_{engine}")
    victim = location / "part-1.parquet"
    st = victim.stat()
    victim.write_bytes(b"\x13" * st.st_size)  # same size and mtime: the plan's checks pass
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    reader = Reader(be_addr)
    try:
        cid = reader.open_ok("arrowdb", f"corrupt_{engine}", plan, tablets)
        _, status = read_to_end(reader, cid)
    finally:
        reader.close()
    assert status.status_code == wire.TStatusCode.INTERNAL_ERROR, status
    assert "part-1.parquet" in status.error_msgs[0]
    assert f"table arrowdb.corrupt_{engine}" in status.error_msgs[0]
    assert_the_server_goes_on(client)


def test_a_file_rewritten_during_the_scan_gives_version_gone(server, client, be_addr, engine_setting):
    engine_setting("arrow")
    n = 40_000  # ~2.5 MB a file: more than the queue and the socket buffers hold ahead of the reader
    files = {f"part-{i}.parquet": pa.table({"id": list(range(i * n, i * n + n)), "pad": [f"{j:060d}" for j in range(n)]})
             for i in range(6)}
    location = fresh_table(server, "rewritten", files)
    plan, tablets = plan_for(client, "arrowdb", "rewritten", "select id, pad from arrowdb.rewritten")
    reader = Reader(be_addr)
    try:
        # A small queue: the scan stops after its first batches until the reader reads on.
        cid = reader.open_ok("arrowdb", "rewritten", plan, tablets, batch_size=100, mem_limit=1 << 16)
        first = reader.next(cid, 0)
        assert first.status.status_code == OK
        offset = pa.ipc.open_stream(first.rows).read_all().num_rows
        for rel in files:  # every file not yet read is rewritten
            pq.write_table(pa.table({"id": [-1], "pad": ["y"]}), location / rel)
        _, status = read_to_end(reader, cid, offset)
    finally:
        reader.close()
    assert status.status_code != OK, "a partial result ended with eos"
    message = status.error_msgs[0]
    assert "table arrowdb.rewritten version" in message and "is gone" in message, message
    assert "part-" in message and "was rewritten" in message, message
    assert_the_server_goes_on(client)


@pytest.mark.parametrize("engine", ["arrow", "sql"])
def test_a_column_whose_type_changed_between_files_is_an_error(server, client, be_addr, engine_setting, engine):
    engine_setting(engine)
    fresh_table(server, f"retyped_{engine}", {
        "part-0.parquet": pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}),
        "part-1.parquet": pa.table({"id": pa.array(["x", "y"], pa.string()), "v": ["c", "d"]}),
    })
    rows, status = scan_status(client, be_addr, "arrowdb", f"retyped_{engine}",
                               f"select id, v from arrowdb.retyped_{engine}")
    assert status.status_code == wire.TStatusCode.INTERNAL_ERROR, status
    message = status.error_msgs[0]
    assert f"table arrowdb.retyped_{engine}" in message, message
    if engine == "arrow":
        assert "column id of file part-1.parquet is string" in message
    else:  # Spark's reader names the column and both types, not the file
        assert "[id]" in message and "BINARY" in message, message
    assert_the_server_goes_on(client)


def test_partition_values_spelled_oddly_go_to_the_sql_engine(server, client, engine_setting):
    engine_setting("auto")
    fresh_table(server, "oddparts", {
        "i=01/f.parquet": pa.table({"id": [1]}),
        "i=+2/f.parquet": pa.table({"id": [2]}),     # both read exactly as Spark parses them
        "i=\u0663/f.parquet": pa.table({"id": [3]}),  # an Arabic-Indic 3: Java's parseInt reads 3
        "i=4/f.parquet": pa.table({"id": [4]}),
    })
    before = engine_counts(server)
    got = client.read("arrowdb", "oddparts", "select id, i from arrowdb.oddparts")
    assert ran_on(server, before) == "sql"
    assert sorted(zip(got.column("id").to_pylist(), got.column("i").to_pylist())) == [(1, 1), (2, 2), (3, 3), (4, 4)]
    before = engine_counts(server)
    got = client.read("arrowdb", "oddparts", "select id, i from arrowdb.oddparts where i <> 4 and id < 3")
    assert ran_on(server, before) == "sql"  # pruning cannot drop the odd folder: its value is not certain
    assert sorted(got.column("id").to_pylist()) == [1, 2]


DOUBLES = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.5, None, 1e308, -2.5, 3.0, 9007199254740993.0]


@pytest.mark.parametrize("predicate", [
    "x > 1.5", "x >= 1.5", "x < 1.5", "x <= 1.5", "x = 0", "x != 0", "x = -0.0", "x > 3", "1.5 < x", "3 >= x",
    "x between -3 and 2", "x not between 0 and 2", "x in (0, 1.5, 3)", "x not in (0, 1.5)", "x > 1E308",
    "x > 9007199254740992", "not (x > 1.5)", "x > 1.5 or x is null", "x >= 1.25",
])
def test_double_comparisons_with_literals_run_on_arrow_and_equal_spark(server, client, spark, engine_setting,
                                                                        predicate):
    """Spark orders NaN above every number (so NaN > c is TRUE) and calls -0.0 = 0.0; the
    arrow engine's translation must give the same rows, NULLs included."""
    engine_setting("auto")
    fresh_table(server, "doubles", {"part-0.parquet": pa.table({
        "id": pa.array(range(len(DOUBLES)), pa.int32()), "x": pa.array(DOUBLES, pa.float64())})})
    before = engine_counts(server)
    got = client.read("arrowdb", "doubles", f"select id from arrowdb.doubles where {predicate}")
    assert ran_on(server, before) == "arrow", predicate
    spark.createDataFrame([(i, x) for i, x in enumerate(DOUBLES)], "id int, x double").createOrReplaceTempView("dbl")
    want = sorted(r[0] for r in spark.sql(f"select id from dbl where {predicate}").collect())
    assert sorted(r["id"] for r in got.to_pylist()) == want, predicate


@pytest.mark.parametrize("scan_engine", ["arrow", "sql"])
def test_local_spark_tasks_push_through_the_bes_unix_socket(server, client, be_addr, spark, engine_setting, scan_engine):
    """Spark runs on the BE's machine here (local[N]): its tasks find the BE's Unix socket and
    push through it (a third less kernel CPU per byte than local TCP), for both engines."""
    engine_setting(scan_engine)
    listener = server.service.push_listener()
    assert spark.sparkContext.master.startswith("local") and listener.local_path is not None
    before = dict(listener.accepted)
    rows, status = scan_status(client, be_addr, "demo", "lineitem", "select * from demo.lineitem")
    assert status.status_code == OK and rows == spark.read.parquet(
        str(server.warehouse.table_path("demo", "lineitem"))).count()
    assert listener.accepted["local"] > before["local"]
    assert listener.accepted["tcp"] == before["tcp"]


# ---- bad input on a running server: the scan fails clearly or reads exactly, and the server goes on ----
def padded_files(n_files: int, rows: int) -> dict[str, pa.Table]:
    """~60 bytes a row: more than a small scanner queue and the socket buffers hold."""
    return {f"part-{i}.parquet": pa.table({"id": list(range(i * rows, i * rows + rows)),
                                            "pad": [f"{j:060d}" for j in range(rows)]})
            for i in range(n_files)}


def read_ids(reader, cid: str, offset: int, ids: list) -> tuple[list, object]:
    """get_next until eos or an error, collecting the ids; returns (ids, the final status)."""
    for _ in range(100_000):
        res = reader.next(cid, offset)
        if res.status.status_code != OK or res.eos:
            return ids, res.status
        got = pa.ipc.open_stream(res.rows).read_all()
        ids += got.column("id").to_pylist()
        offset += got.num_rows
    raise AssertionError("no end")


@pytest.mark.parametrize("engine", ["arrow", "sql"])
def test_a_truncated_file_fails_clearly_with_the_table_and_file(server, client, be_addr, engine_setting, engine):
    """A writer that died mid-file left half a Parquet file (no footer) in the table's folder:
    the plan or the scan fails naming the table and the file; no partial result ends with eos."""
    engine_setting(engine)
    name = f"truncated_{engine}"
    location = fresh_table(server, name, padded_files(2, 2000))
    victim = location / "part-1.parquet"
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    server.warehouse.invalidate("arrowdb", name)
    try:
        plan, tablets = plan_for(client, "arrowdb", name, f"select id from arrowdb.{name}")
    except ReadError as exc:  # refusing at plan time is a clear answer too
        message = str(exc)
    else:
        reader = Reader(be_addr)
        try:
            cid = reader.open_ok("arrowdb", name, plan, tablets)
            _, status = read_to_end(reader, cid)
        finally:
            reader.close()
        assert status.status_code != OK, "a partial result ended with eos"
        message = status.error_msgs[0]
    assert f"arrowdb.{name}" in message and "part-1.parquet" in message, message
    assert_the_server_goes_on(client)


def test_forged_and_replayed_push_connections_during_a_scan_add_nothing(server, client, be_addr, engine_setting):
    """While a real scan's tasks push into its BE, connections with a forged token, a token one
    bit off the live one, an ended scan's real token, or no protocol at all are closed without
    a word; the scan still delivers exactly its rows."""
    import socket

    from starscan.provider.push.wire import HELLO, MAGIC

    engine_setting("arrow")
    fresh_table(server, "pushed", padded_files(4, 20_000))
    listener = server.service.push_listener()
    plan, tablets = plan_for(client, "arrowdb", "pushed", "select id from arrowdb.pushed")
    reader = Reader(be_addr)
    try:
        ended = reader.open_ok("arrowdb", "pushed", plan, tablets)  # an earlier scan, read to its end
        spent = server.contexts.get(ended).scan
        assert read_to_end(reader, ended)[1].status_code == OK
        assert spent.done.wait(30)
        spent_token = spent.sink.token
        cid = reader.open_ok("arrowdb", "pushed", plan, tablets, batch_size=100, mem_limit=1 << 16)
        first = reader.next(cid, 0)
        assert first.status.status_code == OK and not first.eos
        ids = pa.ipc.open_stream(first.rows).read_all().column("id").to_pylist()
        live = server.contexts.get(cid).scan.sink.token
        assert live != spent_token
        for hello in (HELLO.pack(MAGIC, b"\x00" * 32, 0, 0),
                      HELLO.pack(MAGIC, live[:-1] + bytes([live[-1] ^ 1]), 0, 0),
                      HELLO.pack(MAGIC, spent_token, 0, 0),
                      b"GET / HTTP/1.1\r\n\r\n" + b"x" * 64):
            s = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
            s.sendall(hello)
            assert closed_without_a_word(s), "the BE answered a connection it must not accept"
        ids, status = read_ids(reader, cid, len(ids), ids)
        reader.close_scanner(cid)
    finally:
        reader.close()
    assert status.status_code == OK
    assert sorted(ids) == list(range(80_000))
    assert_the_server_goes_on(client)


def push_workers_of(server, port: int) -> list:
    """Spark's Python worker processes with a push connection to the BE's TCP port open."""
    import psutil

    me = psutil.Process()
    found = []
    for proc in me.children(recursive=True):
        try:
            conns = proc.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if any(c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED for c in conns):
            found.append(proc)
    return found


@pytest.mark.parametrize("engine", ["arrow", "sql"])
def test_a_python_worker_killed_mid_split_loses_the_scan_no_row(server, client, be_addr, engine_setting, no_yield,
                                                                monkeypatch, engine):
    """SIGKILL to a Spark Python worker while it pushes a split: the scan reads on. The reader
    whose task died is lost, and the split it left half-read is read on from where its rows
    stopped (by Spark's retry of the task: local Spark runs as local[N,4]; or, when the job
    failed, by the scan's next reader), and the scan ends with exactly its rows, none twice.
    The tasks keep their slots while the reader waits (no yield), so they are there to kill."""
    import signal

    engine_setting(engine)
    lost_before = (server.ops.metrics.registry.get_sample_value("starscan_scan_readers_lost_total") or 0)
    fresh_table(server, "killed", padded_files(4, 20_000))
    listener = server.service.push_listener()
    monkeypatch.setattr(listener, "local_path", None)  # TCP, so the task's process can be found by its connection
    plan, tablets = plan_for(client, "arrowdb", "killed", "select id from arrowdb.killed")
    reader = Reader(be_addr)
    try:
        cid = reader.open_ok("arrowdb", "killed", plan, tablets, batch_size=100, mem_limit=1 << 16)
        first = reader.next(cid, 0)
        assert first.status.status_code == OK and not first.eos
        ids = pa.ipc.open_stream(first.rows).read_all().column("id").to_pylist()
        victims = wait_until(lambda: push_workers_of(server, listener.port), 30,
                             what="a Spark worker holding a push connection")
        victims[0].send_signal(signal.SIGKILL)
        victims[0].wait(30)  # it died: a task of the scan was lost (its split may have been all sent)
        ids, status = read_ids(reader, cid, len(ids), ids)
        scan = server.contexts.get(cid).scan
        reader.close_scanner(cid)
    finally:
        reader.close()
    assert status.status_code == OK, status
    assert sorted(ids) == list(range(80_000)) and len(ids) == 80_000, "rows lost or repeated"
    assert (server.ops.metrics.registry.get_sample_value("starscan_scan_readers_lost_total") or 0) - lost_before == scan.readers_lost  # starscan_scan_readers_lost
    assert_the_server_goes_on(client)


def test_tasks_that_cannot_reach_the_be_fail_the_scan_clearly(server, client, be_addr, engine_setting, monkeypatch):
    """The BE advertises a push address its Spark tasks cannot reach (a wrong advertise_host):
    the scan fails with a message that names the address, instead of waiting or ending early."""
    engine_setting("arrow")
    fresh_table(server, "unreachable", padded_files(1, 100))
    listener = server.service.push_listener()
    monkeypatch.setattr(listener, "local_path", None)
    monkeypatch.setattr(listener, "advertised_host", "127.0.0.2")  # loopback, but nothing listens there
    rows, status = scan_status(client, be_addr, "arrowdb", "unreachable", "select id from arrowdb.unreachable")
    assert status.status_code != OK, "a scan whose tasks reached nobody ended with eos"
    message = status.error_msgs[0]
    assert "arrowdb.unreachable" in message and f"127.0.0.2:{listener.port}" in message, message
    monkeypatch.undo()
    assert_the_server_goes_on(client)
