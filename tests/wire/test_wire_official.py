"""docs/protocol.md section 7, Thrift vectors 11-23, spoken by an independent client.

Nothing here shares starscan's IDL loading (thriftpy2): at test time Debian's Apache Thrift
compiler generates Python code from idl/StarrocksExternalService.thrift, and the official
Apache Thrift Python library talks to the running BE exactly like the Java connectors do
(plain TSocket, buffered, unframed TBinaryProtocol, strict write / lenient read).
Plans come from the FE over HTTP with httpx.
"""

from __future__ import annotations

import base64
import re
import threading
import time
from decimal import Decimal
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from support.thrift_gen import official_thrift_client
from support.waits import wait_until

IDL = Path(__file__).resolve().parents[2] / "idl" / "StarrocksExternalService.thrift"
AUTH = "Basic " + base64.b64encode(b"root:").decode()  # cm9vdDo=
VECTOR_SQL = "select `k1`,`v1` from `db1`.`t1` where (`k1` > 0)"
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# TStatusCode values known to starrocks-thrift-sdk 1.0.1 (docs/protocol.md 3): anything else
# makes the Java client throw while deserializing.
SDK_STATUS_CODES = frozenset(list(range(0, 23)) + list(range(30, 48)) + [50])

OK, NOT_FOUND, INVALID_ARGUMENT = 0, 31, 33
T_INT, T_VARCHAR, T_DATE, T_DATETIME, T_DECIMAL64 = 5, 15, 9, 10, 22


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    """The generated `starscan_wire` package plus the official library's pieces."""
    return official_thrift_client(tmp_path_factory.mktemp("thrift_gen_py"))


# ---- the client -------------------------------------------------------------------------
def check_status(st, what: str) -> None:
    """Vector 23 (and StarRocks' error shape) for every reply received in this file."""
    assert st is not None, f"{what}: reply has no status"
    assert st.status_code is not None, f"{what}: status without status_code"
    assert st.status_code in SDK_STATUS_CODES, f"{what}: status_code {st.status_code} unknown to the Java SDK"
    if st.status_code == OK:
        assert not st.error_msgs, f"{what}: OK with error_msgs {st.error_msgs!r}"
    else:
        assert st.error_msgs is not None and len(st.error_msgs) == 1, f"{what}: error_msgs {st.error_msgs!r}"


class Wire:
    """One connection, as a Java reader opens it; every reply is checked for vector 23."""

    def __init__(self, gen, be_addr, timeout_s: float = 120.0):
        self.gen = gen
        sock = gen.TSocket.TSocket(be_addr[0], be_addr[1])
        sock.setTimeout(int(timeout_s * 1000))
        self.transport = gen.TTransport.TBufferedTransport(sock)
        proto = gen.TBinaryProtocol.TBinaryProtocol(self.transport, strictRead=False, strictWrite=True)
        self.client = gen.service.Client(proto)
        self.transport.open()

    def open(self, plan: str, tablet_ids, batch_size: int | None = 2, **extra):
        t = self.gen.ttypes
        params = t.TScanOpenParams(
            cluster="default_cluster", database=extra.pop("database", "db1"), table=extra.pop("table", "t1"),
            tablet_ids=list(tablet_ids), opaqued_query_plan=plan, batch_size=batch_size,
            query_timeout=3600, mem_limit=2147483648, user="root", passwd="", **extra,
        )
        res = self.client.open_scanner(params)
        check_status(res.status, "open_scanner")
        assert res.context_id is not None and UUID_RE.match(res.context_id), res.context_id
        assert res.selected_columns is not None, "open_scanner must always set selected_columns"
        if res.status.status_code != OK:
            assert res.selected_columns == []
        return res

    def next(self, ctx: str, offset: int):
        res = self.client.get_next(self.gen.ttypes.TScanNextBatchParams(context_id=ctx, offset=offset))
        check_status(res.status, "get_next")
        if res.status.status_code != OK:
            assert res.eos is None and res.rows is None, "a failed get_next carries neither eos nor rows"
        elif res.eos:
            assert res.rows is None, "eos=true must not carry rows"
        else:
            assert res.eos is False and res.rows, "a data reply is eos=false with rows"
        return res

    def close_scanner(self, ctx: str | None):
        res = self.client.close_scanner(self.gen.ttypes.TScanCloseParams(context_id=ctx))
        check_status(res.status, "close_scanner")
        return res

    def close(self):
        self.transport.close()


@pytest.fixture
def wire(gen, be_addr):
    w = Wire(gen, be_addr)
    yield w
    w.close()


def query_plan(fe_url: str, sql: str, db: str = "db1", table: str = "t1") -> dict:
    r = httpx.post(f"{fe_url}/api/{db}/{table}/_query_plan", content='{"sql": "' + sql + '"}',
                   headers={"Authorization": AUTH, "Content-Type": "application/json; charset=UTF-8"}, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == 200
    return body


@pytest.fixture(scope="module")
def vector_plan(fe_url) -> tuple[str, list[int]]:
    body = query_plan(fe_url, VECTOR_SQL)
    tablets = [int(k) for k in body["partitions"]]
    assert len(tablets) == 2, body["partitions"]  # 2 files = 2 tablets
    return body["opaqued_query_plan"], tablets


def arrow(rows: bytes) -> pa.Table:
    reader = pa.ipc.open_stream(rows)
    batches = list(reader)
    assert len(batches) == 1, "one record batch per rows blob"
    return pa.Table.from_batches(batches, schema=reader.schema)


def drain(w: Wire, ctx: str) -> list[pa.Table]:
    out, offset = [], 0
    for _ in range(10_000):
        res = w.next(ctx, offset)
        assert res.status.status_code == OK, res.status
        if res.eos:
            return out
        table = arrow(res.rows)
        assert table.num_rows > 0
        out.append(table)
        offset += table.num_rows
    raise AssertionError("no eos")


# ---- vectors 11-16: one connection, one scanner --------------------------------------------
def test_vectors_11_to_16_scan_lifecycle(wire, vector_plan):
    plan, tablets = vector_plan
    ttypes = wire.gen.ttypes

    # 11
    opened = wire.open(plan, tablets, batch_size=2)
    assert opened.status.status_code == ttypes.TStatusCode.OK == OK
    ctx = opened.context_id
    assert len(ctx) == 36 and ctx == ctx.lower()
    assert [(c.name, c.type) for c in opened.selected_columns] == [
        ("k1", ttypes.TPrimitiveType.INT), ("v1", ttypes.TPrimitiveType.VARCHAR)]
    assert ttypes.TPrimitiveType.INT == T_INT and ttypes.TPrimitiveType.VARCHAR == T_VARCHAR

    # 12
    first = wire.next(ctx, 0)
    assert first.status.status_code == OK and first.eos is False
    t1 = arrow(first.rows)
    assert t1.schema.equals(pa.schema([pa.field("k1", pa.int32(), nullable=False), pa.field("v1", pa.utf8())]))
    assert t1.num_rows == 2

    # 13 (starscan's deliberate difference: the previous offset replays the same batch)
    again = wire.next(ctx, 0)
    assert again.status.status_code == OK and again.eos is False
    assert again.rows == first.rows
    again2 = wire.next(ctx, 0)
    assert again2.rows == first.rows
    bad = wire.next(ctx, 1)  # neither the current (2) nor the previous (0) offset
    assert bad.status.status_code == ttypes.TStatusCode.NOT_FOUND == NOT_FOUND
    assert bad.status.error_msgs == [f"context_id={ctx}, send_offset=1, context_offset=2"]
    assert bad.eos is None and bad.rows is None
    # nothing was consumed by the replays or the mismatch

    # 14
    second = wire.next(ctx, 2)
    assert second.status.status_code == OK and second.eos is False
    t2 = arrow(second.rows)
    assert t2.num_rows == 1
    assert t2.schema.equals(t1.schema)
    rows = sorted(zip(pa.concat_tables([t1, t2]).column("k1").to_pylist(),
                      pa.concat_tables([t1, t2]).column("v1").to_pylist()))
    assert rows == [(1, "a"), (2, "b"), (3, None)]
    # only the previous offset replays: 0 is now two batches back
    stale = wire.next(ctx, 0)
    assert stale.status.status_code == NOT_FOUND
    assert stale.status.error_msgs == [f"context_id={ctx}, send_offset=0, context_offset=3"]
    assert wire.next(ctx, 2).rows == second.rows
    end = wire.next(ctx, 3)
    assert end.status.status_code == OK and end.eos is True and end.rows is None
    end_again = wire.next(ctx, 3)
    assert end_again.status.status_code == OK and end_again.eos is True and end_again.rows is None

    # 15
    off7 = wire.next(ctx, 7)
    assert off7.status.status_code == NOT_FOUND and off7.eos is None
    assert off7.status.error_msgs == [f"context_id={ctx}, send_offset=7, context_offset=3"]

    # 16
    assert wire.close_scanner(ctx).status.status_code == OK
    assert wire.close_scanner(ctx).status.status_code == OK
    gone = wire.next(ctx, 3)
    assert gone.status.status_code == NOT_FOUND
    assert gone.status.error_msgs == [f"context_id: {ctx} not found"]
    assert gone.eos is None


# ---- vectors 17-19: refused opens -----------------------------------------------------------
def test_vector_17_garbage_plan(wire, vector_plan, server):
    _, tablets = vector_plan
    res = wire.open("@@@", tablets)
    assert res.status.status_code == INVALID_ARGUMENT
    assert res.selected_columns == []
    assert len(res.context_id) == 36
    # a failed open stays registered until GC, as in StarRocks
    assert res.context_id in {c.context_id for c in server.contexts.snapshot()}
    assert wire.close_scanner(res.context_id).status.status_code == OK


@pytest.mark.parametrize("batch_size, message", [
    (None, "batch_size is not set"),
    (70000, "batch_size is out of range, it must be in the range (0, 65536], current value is [70000]"),
    (0, "batch_size is out of range, it must be in the range (0, 65536], current value is [0]"),
    (-1, "batch_size is out of range, it must be in the range (0, 65536], current value is [-1]"),
    (65537, "batch_size is out of range, it must be in the range (0, 65536], current value is [65537]"),
])
def test_vector_18_batch_size(wire, vector_plan, batch_size, message):
    plan, tablets = vector_plan
    res = wire.open(plan, tablets, batch_size=batch_size)
    assert res.status.status_code == INVALID_ARGUMENT
    assert res.status.error_msgs == [message]
    assert res.selected_columns == []
    wire.close_scanner(res.context_id)


def test_vector_18_batch_size_upper_bound_is_allowed(wire, vector_plan):
    plan, tablets = vector_plan
    res = wire.open(plan, tablets, batch_size=65536)
    assert res.status.status_code == OK, res.status
    tables = drain(wire, res.context_id)
    assert sum(t.num_rows for t in tables) == 3
    assert wire.close_scanner(res.context_id).status.status_code == OK


def test_vector_19_unknown_tablet(wire, vector_plan):
    plan, _ = vector_plan
    res = wire.open(plan, [99])
    assert res.status.status_code == NOT_FOUND
    assert res.status.error_msgs == ["tablet_id: 99 not found"]
    assert res.selected_columns == []
    wire.close_scanner(res.context_id)


# ---- vector 20: keep-alive reaper -----------------------------------------------------------
def test_vector_20_idle_context_is_reaped(wire, vector_plan, server):
    plan, tablets = vector_plan
    res = wire.open(plan, tablets, batch_size=2, keep_alive_min=1)
    assert res.status.status_code == OK
    ctx = res.context_id
    first = wire.next(ctx, 0)
    assert first.status.status_code == OK and first.eos is False
    # keep_alive_min=1 plus a GC tick would take > 1 min: shorten this context's keep-alive.
    context = server.contexts.get(ctx)
    assert context.keep_alive_s == 60.0  # keep_alive_min=1 was honoured
    context.keep_alive_s = 0.5
    wait_until(lambda: ctx not in {c.context_id for c in server.contexts.snapshot()}, 60, interval_s=0.1,
               what="the reaper to reclaim the idle context")
    gone = wire.next(ctx, 2)
    assert gone.status.status_code == NOT_FOUND
    assert gone.status.error_msgs == [f"context_id: {ctx} not found"]
    assert gone.eos is None and gone.rows is None
    assert wire.close_scanner(ctx).status.status_code == OK  # idempotent for reaped ids too


# ---- vector 21: empty scan ------------------------------------------------------------------
def test_vector_21_empty_scan_ends_at_once(wire, fe_url):
    body = query_plan(fe_url, "select `k1`,`v1` from `db1`.`t1` where (`k1` > 1000)")
    tablets = [int(k) for k in body["partitions"]]
    assert tablets, "k1 is no partition column: the tablets must be kept"
    res = wire.open(body["opaqued_query_plan"], tablets, batch_size=2)
    assert res.status.status_code == OK
    assert [(c.name, c.type) for c in res.selected_columns] == [("k1", T_INT), ("v1", T_VARCHAR)]
    first = wire.next(res.context_id, 0)
    assert first.status.status_code == OK
    assert first.eos is True and first.rows is None
    assert wire.next(res.context_id, 0).eos is True
    assert wire.close_scanner(res.context_id).status.status_code == OK


# ---- vector 22: types -----------------------------------------------------------------------
def test_vector_22_types(wire, fe_url):
    # DECIMALV2 and LARGEINT columns cannot arise from Spark types (no Spark type maps to
    # them), so the vector's DECIMALV2 1.5 / LARGEINT max parts do not apply to starscan.
    body = query_plan(fe_url, "select * from `db1`.`t1`")
    tablets = [int(k) for k in body["partitions"]]
    res = wire.open(body["opaqued_query_plan"], tablets, batch_size=1024)
    assert res.status.status_code == OK
    assert [(c.name, c.type) for c in res.selected_columns] == [
        ("k1", T_INT), ("v1", T_VARCHAR), ("d", T_DATE), ("dt", T_DATETIME), ("m", T_DECIMAL64)]
    tables = drain(wire, res.context_id)
    assert wire.close_scanner(res.context_id).status.status_code == OK
    expected_schema = pa.schema([
        pa.field("k1", pa.int32(), nullable=False), pa.field("v1", pa.utf8()), pa.field("d", pa.utf8()),
        pa.field("dt", pa.utf8()), pa.field("m", pa.decimal128(10, 2)),
    ])
    for t in tables:
        assert t.schema.equals(expected_schema), t.schema
    table = pa.concat_tables(tables).combine_chunks()
    by_k1 = {r["k1"]: r for r in table.to_pylist()}
    assert by_k1 == {
        1: {"k1": 1, "v1": "a", "d": "2024-01-02", "dt": "2024-01-02 03:04:05", "m": Decimal("12.34")},
        2: {"k1": 2, "v1": "b", "d": "1969-12-31", "dt": "2024-01-02 03:04:05.000123", "m": Decimal("-0.01")},
        3: {"k1": 3, "v1": None, "d": None, "dt": None, "m": None},
    }
    # decimal128(10,2) carries the unscaled integer: 12.34 -> 1234 (little-endian 16 bytes)
    m = table.column("m").chunk(0)
    raw = m.buffers()[1].to_pybytes()
    k1 = table.column("k1").to_pylist()
    unscaled = {k1[i]: int.from_bytes(raw[(m.offset + i) * 16:(m.offset + i + 1) * 16], "little", signed=True)
                for i in range(len(m)) if m[i].is_valid}
    assert unscaled == {1: 1234, 2: -1}


# ---- connection behaviour -------------------------------------------------------------------
def test_connection_survives_a_pause_between_calls(wire, vector_plan):
    plan, tablets = vector_plan
    res = wire.open(plan, tablets, batch_size=2)
    assert res.status.status_code == OK
    time.sleep(4)  # thriftpy2's server default (client_timeout=3000 ms) would drop us here
    first = wire.next(res.context_id, 0)
    assert first.status.status_code == OK and arrow(first.rows).num_rows == 2
    time.sleep(4)
    second = wire.next(res.context_id, 2)
    assert second.status.status_code == OK and arrow(second.rows).num_rows == 1
    assert wire.close_scanner(res.context_id).status.status_code == OK


def test_computed_select_item_is_refused_at_open(wire, fe_url):
    body = query_plan(fe_url, "select k1+1 from db1.t1")
    tablets = [int(k) for k in body["partitions"]]
    assert tablets
    res = wire.open(body["opaqued_query_plan"], tablets, batch_size=2)
    assert res.status.status_code == INVALID_ARGUMENT
    assert res.status.error_msgs == ["output expr is not slot ref"]
    assert res.selected_columns == []
    wire.close_scanner(res.context_id)


def test_two_concurrent_connections(gen, be_addr, vector_plan):
    plan, tablets = vector_plan
    a, b = Wire(gen, be_addr, timeout_s=60), Wire(gen, be_addr, timeout_s=60)
    try:
        # Interleaved on two live connections: a server serving one connection at a time
        # would never answer b while a stays open.
        ra = a.open(plan, tablets, batch_size=1)
        rb = b.open(plan, tablets, batch_size=1)
        assert ra.status.status_code == rb.status.status_code == OK
        assert ra.context_id != rb.context_id
        got = {"a": [], "b": []}
        offsets = {"a": 0, "b": 0}
        done = set()
        while len(done) < 2:
            for name, w, ctx in (("a", a, ra.context_id), ("b", b, rb.context_id)):
                if name in done:
                    continue
                res = w.next(ctx, offsets[name])
                assert res.status.status_code == OK, res.status
                if res.eos:
                    done.add(name)
                    continue
                t = arrow(res.rows)
                assert t.num_rows == 1  # batch_size=1
                got[name] += t.column("k1").to_pylist()
                offsets[name] += t.num_rows
        assert sorted(got["a"]) == sorted(got["b"]) == [1, 2, 3]
        # the other connection's context is visible but its offsets are its own
        cross = a.next(rb.context_id, 0)
        assert cross.status.status_code == NOT_FOUND
        assert cross.status.error_msgs == [f"context_id={rb.context_id}, send_offset=0, context_offset=3"]
        assert a.close_scanner(ra.context_id).status.status_code == OK
        assert b.close_scanner(rb.context_id).status.status_code == OK
    finally:
        a.close()
        b.close()


def test_two_connections_in_parallel_threads(gen, be_addr, vector_plan):
    plan, tablets = vector_plan
    barrier = threading.Barrier(2, timeout=60)
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def reader(i: int) -> None:
        try:
            w = Wire(gen, be_addr, timeout_s=120)
            try:
                barrier.wait()
                res = w.open(plan, tablets, batch_size=1)
                assert res.status.status_code == OK, res.status
                results[i] = sorted(k for t in drain(w, res.context_id) for k in t.column("k1").to_pylist())
                assert w.close_scanner(res.context_id).status.status_code == OK
            finally:
                w.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    assert results == {0: [1, 2, 3], 1: [1, 2, 3]}


# ---- replies begun before they are ready (starscan/thrift/reply_keepalive.py) --------------------
@pytest.fixture
def early_replies(server):
    """Every reply that is not ready within 2 ms is begun at once and kept alive every 2 ms
    (the scans run as Spark jobs, which take longer): the keep-alive path on every call."""
    saved = server.service.settings.reply_keepalive_s
    server.ops.update_config({"reply_keepalive_s": 0.002})
    yield server.thrift.keepalive
    server.ops.update_config({"reply_keepalive_s": saved})


def test_a_reply_begun_early_reads_exactly_in_the_official_client(gen, be_addr, fe_url, early_replies, vector_plan):
    """Replies begun before they were ready (the header, then fields no IDL version has, then
    the reply's own fields) are read by Apache Thrift's generated Python code as the same
    rows, with a socket timeout far shorter than the calls (as the Flink connector's 1 s is
    shorter than a call that waits for a starting Spark)."""
    begun_before = early_replies.replies_begun
    plan, tablets = vector_plan
    w = Wire(gen, be_addr, timeout_s=0.05)
    try:
        opened = w.open(plan, tablets, batch_size=1)
        assert opened.status.status_code == OK
        rows = pa.concat_tables(drain(w, opened.context_id))
        w.close_scanner(opened.context_id)
    finally:
        w.close()
    assert sorted(rows.column("k1").to_pylist()) == [1, 2, 3]
    assert early_replies.replies_begun > begun_before, "no reply was begun early: the test did not test it"
