"""Bad input of every kind against the running server: each gets a clear error, the server
keeps serving, and a bystander scanner opened before any of it reads every one of its rows
untouched at the end. (Garbage and truncated Thrift bytes and unknown methods are in
test_wire_golden.py; limits in test_limits.py.)"""

from __future__ import annotations

import base64
import json
import socket
import struct
import time

import httpx
import pyarrow as pa
import pytest
from support.sockets import read_until_closed

from starscan.client import thrift_client
from starscan.core.thrift_defs import wire
from starscan.plans import codec as P

OK = wire.TStatusCode.OK
INVALID_ARGUMENT = wire.TStatusCode.INVALID_ARGUMENT
NOT_FOUND = wire.TStatusCode.NOT_FOUND
NOT_AUTHORIZED = wire.TStatusCode.NOT_AUTHORIZED
T1_SQL = "select k1, v1 from db1.t1"
ROOT = "Basic " + base64.b64encode(b"root:").decode()


class Bystander:
    """A scanner of demo.lineitem opened before the bad input, read a batch at a time between
    the tests; at the end its rows must be exactly Spark's."""

    def __init__(self, client, be_addr):
        body = client.plan("demo", "lineitem", "select l_orderkey, l_linenumber from demo.lineitem")
        self.conn = thrift_client(*be_addr, timeout_s=120)
        res = self.conn.open_scanner(wire.TScanOpenParams(
            cluster="default_cluster", database="demo", table="lineitem",
            tablet_ids=[int(t) for t in body["partitions"]], opaqued_query_plan=body["opaqued_query_plan"],
            batch_size=500, keep_alive_min=60))
        assert res.status.status_code == OK, res.status
        self.context_id = res.context_id
        self.offset = 0
        self.rows: list[tuple[int, int]] = []
        self.eos = False

    def step(self) -> None:
        if self.eos:
            return
        res = self.conn.get_next(wire.TScanNextBatchParams(context_id=self.context_id, offset=self.offset))
        assert res.status.status_code == OK, res.status
        if res.eos:
            self.eos = True
            return
        table = pa.ipc.open_stream(res.rows).read_all()
        self.rows.extend(zip(table.column(0).to_pylist(), table.column(1).to_pylist()))
        self.offset += table.num_rows

    def finish(self) -> list[tuple[int, int]]:
        while not self.eos:
            self.step()
        self.conn.close_scanner(wire.TScanCloseParams(context_id=self.context_id))
        self.conn.close()
        return self.rows


@pytest.fixture(scope="module")
def bystander(client, be_addr, server, spark):
    b = Bystander(client, be_addr)
    b.step()
    yield b
    rows = b.finish()
    from starscan.tables.catalog import Warehouse  # noqa: F401  (the table is the session warehouse's)

    want = spark.read.parquet(str(server.warehouse.table_path("demo", "lineitem"))).select("l_orderkey", "l_linenumber").collect()
    assert sorted(rows) == sorted((r[0], r[1]) for r in want), "the bystander scanner lost or doubled rows"


@pytest.fixture
def still_serving(bystander, client):
    """Runs after each test: a normal scan is answered correctly and the bystander reads on."""
    yield
    table = client.read("db1", "t1", T1_SQL, batch_size=2)
    assert sorted(table.column("k1").to_pylist()) == [1, 2, 3]
    bystander.step()


@pytest.fixture(scope="module")
def t1_plan(client) -> dict:
    return client.plan("db1", "t1", T1_SQL)


def open_with(be_addr, body: dict | None = None, **kwargs):
    args = dict(cluster="default_cluster", database="db1", table="t1", batch_size=1024)
    if body is not None:
        args.update(tablet_ids=[int(t) for t in body["partitions"]], opaqued_query_plan=body["opaqued_query_plan"])
    args.update(kwargs)
    conn = thrift_client(*be_addr)
    try:
        res = conn.open_scanner(wire.TScanOpenParams(**args))
        if res.status.status_code == OK:
            conn.close_scanner(wire.TScanCloseParams(context_id=res.context_id))
        return res
    finally:
        conn.close()


def msg(res) -> str:
    return " ".join(res.status.error_msgs or [])


# ---- plans --------------------------------------------------------------------------------
def _flip(text: str, at: int) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[at] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize("case", ["not-base64", "base64-of-garbage", "flipped-byte-body", "flipped-byte-signature",
                                  "truncated", "empty"])
def test_forged_plans_are_refused(be_addr, t1_plan, still_serving, case):
    text = t1_plan["opaqued_query_plan"]
    forged = {
        "not-base64": "this is %%% not base64!",
        "base64-of-garbage": base64.b64encode(b"\x01\x02garbage" * 20).decode(),
        "flipped-byte-body": _flip(text, 40),
        "flipped-byte-signature": _flip(text, len(base64.b64decode(text)) - 20),
        "truncated": text[: len(text) // 2],
        "empty": "",
    }[case]
    res = open_with(be_addr, {**t1_plan, "opaqued_query_plan": forged})
    assert res.status.status_code == INVALID_ARGUMENT, res.status
    assert msg(res)  # a reason a person can act on


def test_expired_plan(be_addr, server, t1_plan, still_serving):
    plan = P.decode(t1_plan["opaqued_query_plan"], server.signer)
    plan.expires_at_ms = int(time.time() * 1000) - 1000
    res = open_with(be_addr, {**t1_plan, "opaqued_query_plan": P.encode(plan, server.signer)})
    assert res.status.status_code == INVALID_ARGUMENT and "expired" in msg(res) and "ask the FE for a new plan" in msg(res)


def test_another_users_plan(be_addr, t1_plan, still_serving):
    res = open_with(be_addr, t1_plan, user="mallory", passwd="x")
    assert res.status.status_code == NOT_AUTHORIZED and "issued to 'root'" in msg(res)


def test_plan_for_another_table(be_addr, t1_plan, still_serving):
    res = open_with(be_addr, t1_plan, database="demo", table="lineitem")
    assert res.status.status_code == INVALID_ARGUMENT and "the plan is for db1.t1" in msg(res)


@pytest.mark.parametrize("tablets", [[1], [2**63 - 1], [-5], [0]])
def test_tablet_ids_outside_the_plan(be_addr, t1_plan, still_serving, tablets):
    res = open_with(be_addr, t1_plan, tablet_ids=tablets)
    assert res.status.status_code == NOT_FOUND and f"tablet_id: {tablets[0]} not found" in msg(res)


@pytest.mark.parametrize("batch_size", [0, -1, 70000, 2**31 - 1, -(2**31)])
def test_batch_size_out_of_range(be_addr, t1_plan, still_serving, batch_size):
    res = open_with(be_addr, t1_plan, batch_size=batch_size)
    assert res.status.status_code == INVALID_ARGUMENT
    assert f"current value is [{batch_size}]" in msg(res)


@pytest.mark.parametrize("offset", [-1, 1, 10**12, 2**63 - 1, -(2**63)])
def test_odd_offsets(be_addr, t1_plan, still_serving, offset):
    conn = thrift_client(*be_addr)
    try:
        res = conn.open_scanner(wire.TScanOpenParams(
            cluster="default_cluster", database="db1", table="t1", tablet_ids=[int(t) for t in t1_plan["partitions"]],
            opaqued_query_plan=t1_plan["opaqued_query_plan"], batch_size=1))
        assert res.status.status_code == OK
        bad = conn.get_next(wire.TScanNextBatchParams(context_id=res.context_id, offset=offset))
        assert bad.status.status_code == NOT_FOUND and f"send_offset={offset}" in msg(bad)
        # The scanner itself is intact: offset 0 still reads the first row.
        good = conn.get_next(wire.TScanNextBatchParams(context_id=res.context_id, offset=0))
        assert good.status.status_code == OK and pa.ipc.open_stream(good.rows).read_all().num_rows == 1
        conn.close_scanner(wire.TScanCloseParams(context_id=res.context_id))
    finally:
        conn.close()


# ---- wrong field types on the wire ----------------------------------------------------------
def _i32(v):
    return struct.pack(">i", v)


def _s(b: bytes) -> bytes:
    return _i32(len(b)) + b


def _call(name: bytes, args: bytes, seqid: int = 7) -> bytes:
    return b"\x80\x01\x00\x01" + _s(name) + _i32(seqid) + args


@pytest.mark.parametrize("args", [
    pytest.param(b"\x0c\x00\x01" + b"\x0b\x00\x06" + _s(b"1024") + b"\x00\x00", id="batch_size-as-string"),
    pytest.param(b"\x0c\x00\x01" + b"\x0f\x00\x04\x0b" + _i32(2) + _s(b"a") + _s(b"b") + b"\x00\x00", id="tablet_ids-of-strings"),
    pytest.param(b"\x0c\x00\x01" + b"\x08\x00\x05" + _i32(5) + b"\x00\x00", id="plan-as-i32"),
    pytest.param(b"\x08\x00\x01" + _i32(5) + b"\x00", id="params-as-i32"),
    pytest.param(b"\x0c\x00\x01" + b"\x0d\x00\x0a\x0b\x0b" + _i32(1) + _s(b"k") + _s(b"v") + b"\x00\x00", id="map-field-where-i16"),
    pytest.param(b"\x0c\x00\x01" + b"\x0f\x00\x04\x0a" + _i32(-1) + b"\x00\x00", id="negative-list-size"),
    pytest.param(b"\x0c\x00\x01" + b"\x0f\x00\x04\x0a" + _i32(2**30) + b"\x00" * 16, id="list-size-far-beyond-the-bytes"),
])
def test_wrong_field_types(be_addr, still_serving, args):
    """Fields of the wrong type are skipped (Thrift's rule) or the connection is dropped;
    either way the reply, if any, is a well-formed status and nothing else is disturbed."""
    with socket.create_connection(be_addr, timeout=30) as sock:
        sock.sendall(_call(b"open_scanner", args))
        sock.shutdown(socket.SHUT_WR)
        data = read_until_closed(sock)
    if data:
        assert data.startswith(b"\x80\x01\x00") and b"open_scanner" in data[:24]


# ---- HTTP ---------------------------------------------------------------------------------
def post(fe_url, path: str, content, auth: str = ROOT) -> httpx.Response:
    return httpx.post(f"{fe_url}{path}", content=content, headers={"Authorization": auth}, timeout=60)


@pytest.mark.parametrize("body, status, text", [
    (b"not json at all", 400, "malformed json"),
    (b"[" * 100_000 + b"]" * 100_000, 400, "malformed json"),
    (b'{"sql": ' * 5000 + b'"x"' + b"}" * 5000, 400, ""),
    (json.dumps({"sql": 12}).encode(), 400, "POST body must contains [sql] root object"),
    (b"\xff\xfe\x00garbage", 400, "malformed json"),
])
def test_bodies_that_are_not_plans(fe_url, still_serving, body, status, text):
    resp = post(fe_url, "/api/db1/t1/_query_plan", body)
    assert resp.status_code == status, resp.text[:300]
    assert text in resp.json()["exception"]


def test_ten_megabyte_sql(fe_url, still_serving):
    sql = "select k1 from db1.t1 where " + " or ".join(["k1 = 1"] * 1_500_000)
    assert len(sql) > 10_000_000
    resp = post(fe_url, "/api/db1/t1/_query_plan", json.dumps({"sql": sql}))
    assert resp.status_code == 413 and "max_request_body_bytes" in resp.json()["exception"]


@pytest.mark.parametrize("sql", [
    "select k1 from db1.t1; drop table db1.t1",
    "select k1 from db1.t1; select * from demo.lineitem",
    "select k1 from db1.t1 union select l_orderkey from demo.lineitem",
    "select k1 from db1.t1 union all select k1 from db1.t1",
    "select input_file_name() from db1.t1",
    "select k1 from db1.t1 where input_file_name() like '%parquet'",
    "select reflect('java.lang.Runtime', 'getRuntime') from db1.t1",
    "select java_method('java.lang.System', 'getenv', 'HOME') from db1.t1",
    "select k1 from db1.t1 where k1 = java_method('java.lang.Math', 'abs', -1)",
    "select k1 from db1.t1 where v1 = '' or reflect('java.lang.Thread', 'sleep', 100000) is null",
    "select k1 from db1.t1 where v1 = (select v1 from db1.t1 limit 1)",
    "select * from parquet.`/etc/passwd`",
    "select k1 from db1.t1 where k1 in (select l_orderkey from demo.lineitem)",
])
def test_sql_injection_attempts_are_refused(fe_url, still_serving, sql):
    resp = post(fe_url, "/api/db1/t1/_query_plan", json.dumps({"sql": sql}))
    assert resp.status_code in (400, 500), resp.text[:300]
    assert resp.json()["exception"]


@pytest.mark.parametrize("sql", [
    "select k1 from db1.t1 -- where k1 = 1; drop table db1.t1",
    "select k1 from db1.t1 /* ; drop table db1.t1 */ where k1 > 0",
    "select k1 from db1.t1 where v1 = 'x'' or ''1''=''1'",
    "select k1 from db1.t1 where v1 = 'a; drop table db1.t1; --'",
])
def test_quotes_and_comments_stay_data(fe_url, client, still_serving, sql):
    """What looks like injection inside comments and string literals is just text."""
    resp = post(fe_url, "/api/db1/t1/_query_plan", json.dumps({"sql": sql}))
    assert resp.status_code == 200, resp.text[:300]
    rows = client.read("db1", "t1", sql)
    got = rows.column("k1").to_pylist() if rows.num_columns else []
    assert set(got) <= {1, 2, 3}
    if "'x''" in sql or "'a;" in sql:
        assert got == []  # the quote is part of the literal: no row has that value


@pytest.mark.parametrize("path, status", [
    ("/api/..%2F..%2Fetc/passwd/_query_plan", 404),
    ("/api/db1/..%2F..%2F..%2Fetc%2Fpasswd/_query_plan", 404),
    ("/api/../db1/t1/_query_plan", 404),
    ("/api/db1/../_schema", 404),
    ("/api/%2E%2E/t1/_query_plan", 404),
    ("/api/db1%00/t1/_query_plan", 404),
    ("/api/_starscan/users.json/_query_plan", 404),
])
def test_path_traversal_in_names(fe_url, still_serving, path, status):
    resp = post(fe_url, path, json.dumps({"sql": "select * from db1.t1"}))
    assert resp.status_code == status, resp.text[:300]
    assert "root:" not in resp.text and "password_hash" not in resp.text


@pytest.mark.parametrize("db, table, sql, status", [
    ("数据", "表", "select * from `数据`.`表`", 404),
    ("db1", "t1", "select `k1`, `v1` from `db1`.`t1`", 200),
    ("db1", "t1", "select k1 as `名字` from db1.t1", 200),
    ("db1", "t1", "select `k1` from `db1`.`t1` where `v1` = 'ü✓'", 200),
    ("d`b", "t`1", "select * from `d``b`.`t``1`", 404),
])
def test_unicode_and_backticked_identifiers(fe_url, still_serving, db, table, sql, status):
    from urllib.parse import quote

    resp = post(fe_url, f"/api/{quote(db)}/{quote(table)}/_query_plan", json.dumps({"sql": sql}))
    assert resp.status_code == status, resp.text[:300]
    if status == 404:
        assert db in resp.json()["exception"]


@pytest.mark.parametrize("elem_type", [0, 1, 5, 7, 9, 17])
def test_a_list_of_zero_width_elements_is_refused_at_once(be_addr, still_serving, elem_type):
    """An unknown field holding a list of two billion elements of a type with no bytes on the
    wire: skipping it element by element would hold the server for minutes. The connection
    is dropped without a reply instead."""
    args = (b"\x0c\x00\x01" + b"\x0b\x00\x01" + _s(b"0badc0de-0000-4000-8000-00000000feed")
            + b"\x0f\x00\x63" + bytes([elem_type]) + _i32(2**31 - 1) + b"\x00\x00")
    with socket.create_connection(be_addr, timeout=60) as sock:
        sock.sendall(_call(b"get_next", args))
        data = read_until_closed(sock)
    assert data == b""


def test_a_scanner_whose_reader_asks_gets_error_kinds_and_others_do_not(be_addr):
    """``starscan.error_kind`` in open_scanner's properties: every error status of that
    scanner carries ``starscan:error=<Kind>`` after the message (the failed open, and
    get_next repeating it); without it, and for a context the BE does not hold, the status is
    StarRocks' own."""
    client = thrift_client(*be_addr, timeout_s=60)
    try:
        def open_bad(properties):
            return client.open_scanner(wire.TScanOpenParams(
                cluster="default_cluster", database="db1", table="t1", tablet_ids=[1], batch_size=16,
                opaqued_query_plan="@@@", user="root", passwd="", properties=properties))

        asked = open_bad({"starscan.error_kind": "true"})
        assert asked.status.status_code == wire.TStatusCode.INVALID_ARGUMENT
        assert len(asked.status.error_msgs) == 2 and asked.status.error_msgs[1] == "starscan:error=PlanInvalid"
        again = client.get_next(wire.TScanNextBatchParams(context_id=asked.context_id, offset=0))
        assert again.status.error_msgs == asked.status.error_msgs
        plain = open_bad(None)
        assert plain.status.error_msgs == asked.status.error_msgs[:1]
        unknown = client.get_next(wire.TScanNextBatchParams(context_id="no-such-context", offset=0))
        assert unknown.status.status_code == wire.TStatusCode.NOT_FOUND
        assert unknown.status.error_msgs == ["context_id: no-such-context not found"]
        for cid in (asked.context_id, plain.context_id):
            client.close_scanner(wire.TScanCloseParams(context_id=cid))
    finally:
        client.close()
