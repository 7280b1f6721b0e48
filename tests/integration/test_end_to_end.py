"""A reader pulls whole tables through starscan and gets exactly Spark's rows."""

from __future__ import annotations

import pyarrow as pa
from support.sockets import read_until_closed


def _spark_rows(spark, warehouse, db, table, columns="*", where=None):
    df = spark.read.parquet(str(warehouse.table_path(db, table)))
    if where:
        df = df.where(where)
    return df.selectExpr(*columns.split(",")) if columns != "*" else df


def test_lineitem_every_row(server, client, spark):
    table = client.read("demo", "lineitem", "select * from `demo`.`lineitem`", batch_size=1024)
    expected = spark.read.parquet(str(server.warehouse.table_path("demo", "lineitem")))
    assert table.num_rows == expected.count() > 0
    keys = sorted(zip(table.column("l_orderkey").to_pylist(), table.column("l_linenumber").to_pylist()))
    want = sorted((r[0], r[1]) for r in expected.select("l_orderkey", "l_linenumber").collect())
    assert keys == want
    assert table.schema.field("l_shipdate").type == pa.utf8()
    assert table.schema.field("l_quantity").type == pa.decimal128(15, 2)


def test_filtered_projection(server, client, spark):
    sql = "select l_orderkey, l_shipdate from demo.lineitem where l_quantity > 10"
    table = client.read("demo", "lineitem", sql, batch_size=4096)
    expected = spark.sql(
        f"select l_orderkey, cast(l_shipdate as string) s from parquet.`{server.warehouse.table_path('demo', 'lineitem')}` where l_quantity > 10"
    ).collect()
    assert table.column_names == ["l_orderkey", "l_shipdate"]
    assert sorted(zip(table.column(0).to_pylist(), table.column(1).to_pylist())) == sorted((r[0], r[1]) for r in expected)


def test_http_port_turns_nagle_off(server):
    """uvicorn writes a reply's headers and body with two sends: with Nagle's algorithm on,
    every keep-alive request after the first waited ~40 ms for the client's delayed ACK
    (found in bench/plan_latency.py: 44 ms for a 4 KB plan). The FE's accepted connection
    (found by its peer address among this process's sockets) must have TCP_NODELAY set."""
    import os
    import socket

    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 ")
        mine = sock.getsockname()
        found = []
        for name in os.listdir("/proc/self/fd"):
            try:
                fd = os.dup(int(name))
            except OSError:
                continue
            try:
                accepted = socket.socket(fileno=fd)
            except OSError:
                os.close(fd)
                continue
            with accepted:
                try:
                    if accepted.getpeername() == mine and accepted.getsockname()[1] == server.http_port:
                        found.append(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                except OSError:
                    pass
    assert found and all(found), found


def test_a_second_be_cannot_bind_a_port_in_use(server, spark, base_settings):
    """thriftpy2 sets SO_REUSEPORT on its server socket; with it a second BE would bind the
    same port silently and the kernel would split the readers between the two. The start
    fails instead, naming the port and its setting."""
    import pytest

    from starscan.app.ports import CannotListen
    from starscan.app.server import StarscanServer

    settings = base_settings.model_copy(update={"be_port": server.be_port})
    second = StarscanServer(settings, spark, fe=False, be=True)
    with pytest.raises(CannotListen, match=f"port {server.be_port} on .* \\(be_port\\) is in use"):
        second.start()
    second.stop()


def test_stop_ends_the_servers_threads(spark, base_settings):
    """A stopped server leaves no thread of its own behind (tests start many servers)."""
    from starscan.app.server import StarscanServer

    srv = StarscanServer(base_settings, spark, fe=False, be=True).start()
    worker = srv.ops.jobs._worker
    assert worker.is_alive()
    srv.stop()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert not srv.reaper._thread.is_alive()


def test_a_request_head_that_never_ends_is_refused_and_the_fe_keeps_serving(server, client):
    """The FE's HTTP parser (httptools) would buffer an endless header: the head is bounded."""
    import socket

    from starscan.planner.http_protocol import MAX_HEAD_BYTES

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # A small send buffer: what the client counts as sent is then what the server took
        # (Linux otherwise grows a loopback send buffer to megabytes, hiding the bound).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        sock.settimeout(30)
        sock.connect(("127.0.0.1", server.http_port))
        sock.sendall(b"POST /api/db1/t1/_query_plan HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        sent = 0
        try:
            while sent < 8 * MAX_HEAD_BYTES:
                sock.sendall(b"a" * 65536)
                sent += 65536
        except OSError:
            pass  # closed by the server while sending
        reply = read_until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 431 "), reply[:200]
    assert sent <= 4 * MAX_HEAD_BYTES
    assert client.plan("db1", "t1", "select k1 from db1.t1")["status"] == 200
