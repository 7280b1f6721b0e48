"""The opaque plan (starscan/plans/codec.py, starscan/expr/__init__.py): round trips, tamper and expiry
detection, secret rotation and persistence, and a plan that outlives the server that
issued it (a second server on the same warehouse reads it)."""

from __future__ import annotations

import base64
import json
import os
import stat
import time
from decimal import Decimal

import httpx
import pyarrow as pa
import pytest

from starscan import expr as E
from starscan.core.errors import PlanInvalid
from starscan.core.thrift_defs import plan as plan_idl
from starscan.core.thrift_defs import wire
from starscan.planner.sql import parse
from starscan.plans import codec as P

ROOT_AUTH = "Basic cm9vdDo="
T1_SQL = "select `k1`, `v1`, `m` from `db1`.`t1` where (`k1` > 0)"


def query_plan(fe_url: str, db: str, table: str, sql: str) -> dict:
    resp = httpx.post(f"{fe_url}/api/{db}/{table}/_query_plan", content=json.dumps({"sql": sql}),
                      headers={"Authorization": ROOT_AUTH, "Content-Type": "application/json"}, timeout=180)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == 200 and body["opaqued_query_plan"]
    return body


@pytest.fixture(scope="module")
def t1_plan(fe_url) -> dict:
    return query_plan(fe_url, "db1", "t1", T1_SQL)


def copy_plan(plan):
    return P.from_bytes(P.to_bytes(plan))


# =====================================================================================
# Round trips
# =====================================================================================
def test_plan_round_trip(server, t1_plan):
    text = t1_plan["opaqued_query_plan"]
    first = P.decode(text, server.signer)
    again = P.encode(first, server.signer)
    second = P.decode(again, server.signer)
    assert first == second
    assert P.to_bytes(first) == P.to_bytes(second)
    # Serialization and HMAC are deterministic: the same plan encodes to the same text.
    assert again == text
    assert P.from_bytes(P.to_bytes(first)) == first


def test_plan_contents_match_the_rest_answer(server, t1_plan):
    plan = P.decode(t1_plan["opaqued_query_plan"], server.signer)
    snap = server.warehouse.snapshot("db1", "t1")
    assert (plan.database, plan.table, plan.user) == ("db1", "t1", "root")
    assert {str(t.tablet_id) for t in P.tablets_of(plan)} == set(t1_plan["partitions"]) == {str(t.tablet_id) for t in snap.tablets}
    for entry in t1_plan["partitions"].values():
        assert entry["version"] == plan.version == snap.version
        assert entry["schemaHash"] == plan.schema_hash
    assert [(c.name, c.primitive_type, c.is_slot_ref) for c in plan.columns] == [
        ("k1", 5, True), ("v1", 15, True), ("m", 22, True)]
    assert [c.nullable for c in plan.columns] == [False, True, True]
    assert E.unflatten(plan.predicate) == parse(T1_SQL, "db1", "t1").predicate
    assert plan.expires_at_ms - plan.issued_at_ms == server.settings.plan_ttl_s * 1000
    assert abs(plan.issued_at_ms - time.time() * 1000) < 3600_000
    assert os.path.isabs(plan.table_location)
    files = {f.path for t in P.tablets_of(plan) for f in t.files}
    assert all((server.warehouse.table_path("db1", "t1") / f).is_file() for f in files)


PREDICATES = [
    "k1 > 0",
    "`k1` = 1 and v1 = 'a'",
    "k1 in (1, 2, 3) or v1 is null",
    "k1 not in (4, 5)",
    "v1 is not null",
    "v1 like 'a%'",
    "v1 not like '%b' escape '!'",
    "k1 between 1 and 2",
    "k1 not between -5 and -1",
    "not (k1 >= 2 or k1 <= -2147483648)",
    "cast(k1 as bigint) + 1 > 2 * 3 - 1",
    "d = '2024-01-02' and dt < '2024-01-02 03:04:05.000123'",
    "m = 12.34 or m < -0.01e0",
    "case when k1 > 1 then true else false end",
    "coalesce(v1, 'x') <=> lower(upper('A'))",
    "k1 is true or k1 % 2 != 0",
    "length(trim(v1)) > 0 and substring(v1, 1, 1) = 'a'",
    "k1 > 9223372036854775807 or k1 < -9223372036854775809",
]


@pytest.mark.parametrize("pred", PREDICATES)
def test_expr_flatten_round_trip(pred):
    tree = parse(f"select * from db1.t1 where {pred}", "db1", "t1").predicate
    assert tree is not None
    flat = E.flatten(tree)

    def count(e: E.Expr) -> int:
        return 1 + sum(count(c) for c in e.children)

    assert len(flat.nodes) == count(tree)
    assert E.unflatten(flat) == tree
    # ... and through the Thrift bytes the plan carries.
    from thriftpy2.protocol import TBinaryProtocolFactory
    from thriftpy2.utils import deserialize, serialize

    raw = serialize(flat, TBinaryProtocolFactory())
    assert E.unflatten(deserialize(plan_idl.TExpr(), raw, TBinaryProtocolFactory())) == tree


def test_expr_unflatten_rejects_malformed_lists():
    tree = parse("select * from db1.t1 where k1 > 0 and v1 = 'a'", "db1", "t1").predicate
    nodes = list(E.flatten(tree).nodes)
    with pytest.raises(PlanInvalid, match="truncated"):
        E.unflatten(plan_idl.TExpr(nodes=nodes[:-1]))
    with pytest.raises(PlanInvalid, match="trailing"):
        E.unflatten(plan_idl.TExpr(nodes=nodes + [nodes[-1]]))
    with pytest.raises(PlanInvalid):
        E.unflatten(plan_idl.TExpr(nodes=[]))
    bad = plan_idl.TExprNode(kind="exec", num_children=0, name="rm -rf")
    with pytest.raises(PlanInvalid, match="unknown node"):
        E.unflatten(plan_idl.TExpr(nodes=[bad]))
    negative = plan_idl.TExprNode(kind="op", num_children=-1, name="and")
    with pytest.raises(PlanInvalid):
        E.unflatten(plan_idl.TExpr(nodes=[negative]))
    deep = [plan_idl.TExprNode(kind="op", num_children=1, name="not") for _ in range(2000)]
    deep.append(plan_idl.TExprNode(kind="literal", num_children=0, literal_type="boolean", literal_value="true"))
    with pytest.raises(PlanInvalid, match="deeply"):
        E.unflatten(plan_idl.TExpr(nodes=deep))


# =====================================================================================
# Tampering, garbage, expiry, other secrets
# =====================================================================================
def _flip(text: str, pos: int, mask: int) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[pos] ^= mask
    return base64.b64encode(bytes(raw)).decode("ascii")


def _signature_range(raw: bytes) -> tuple[int, int]:
    """Where the HMAC sits in the TSignedPlan bytes (it is unique: 32 random-looking bytes)."""
    from thriftpy2.protocol import TBinaryProtocolFactory
    from thriftpy2.utils import deserialize

    wrapper = deserialize(plan_idl.TSignedPlan(), raw, TBinaryProtocolFactory())
    start = raw.index(wrapper.signature)
    assert len(wrapper.signature) == 32
    body_start = raw.index(wrapper.plan)
    return start, body_start


def test_tampered_plan_is_rejected_at_chosen_positions(server, t1_plan):
    text = t1_plan["opaqued_query_plan"]
    raw = base64.b64decode(text)
    sig, body = _signature_range(raw)
    positions = {
        0, 1, 2, 3, 4,                        # format_version field
        body - 1, body, body + 1,            # plan length / first body bytes
        body + 40, body + 200, (body + sig) // 2, sig - 5,   # inside the body
        sig, sig + 7, sig + 16, sig + 31,    # inside the signature
        len(raw) - 3, len(raw) - 2, len(raw) - 1,            # key id and the final STOP byte
    }
    for pos in sorted(positions):
        for mask in (0x01, 0x80, 0xFF):
            with pytest.raises(PlanInvalid):
                P.decode(_flip(text, pos, mask), server.signer)


def test_tampered_plan_is_rejected_at_every_position(server, t1_plan):
    text = t1_plan["opaqued_query_plan"]
    size = len(base64.b64decode(text))
    accepted = []
    for pos in range(size):
        for mask in (0x01, 0x10, 0xFF):
            try:
                P.decode(_flip(text, pos, mask), server.signer)
            except PlanInvalid:
                continue
            accepted.append((pos, mask))
    assert accepted == []


def test_truncated_or_extended_plan_is_rejected(server, t1_plan):
    raw = base64.b64decode(t1_plan["opaqued_query_plan"])
    for cut in (1, 10, len(raw) // 2, len(raw) - 1):
        with pytest.raises(PlanInvalid):
            P.decode(base64.b64encode(raw[:cut]).decode(), server.signer)
    for extra in (b"\x00", b"\x00" * 8, b"garbage"):
        with pytest.raises(PlanInvalid):
            P.decode(base64.b64encode(raw + extra).decode(), server.signer)


def test_body_swapped_between_plans_is_rejected(server, fe_url, t1_plan):
    """Signature of one plan, body of another: the signature covers the body."""
    other = query_plan(fe_url, "db1", "sales", "select id from db1.sales where region = 'eu'")
    from thriftpy2.protocol import TBinaryProtocolFactory
    from thriftpy2.utils import deserialize, serialize

    proto = TBinaryProtocolFactory()
    a = deserialize(plan_idl.TSignedPlan(), base64.b64decode(t1_plan["opaqued_query_plan"]), proto)
    b = deserialize(plan_idl.TSignedPlan(), base64.b64decode(other["opaqued_query_plan"]), proto)
    forged = plan_idl.TSignedPlan(format_version=a.format_version, plan=b.plan, signature=a.signature, key_id=a.key_id)
    with pytest.raises(PlanInvalid, match="signature"):
        P.decode(base64.b64encode(serialize(forged, proto)).decode(), server.signer)


@pytest.mark.parametrize("garbage", ["@@@", "not base64!", "cm9vdDo", "\u00e9t\u00e9", "YWJj\n===="])
def test_garbage_base64(server, garbage):
    with pytest.raises(PlanInvalid, match="validate error"):
        P.decode(garbage, server.signer)


@pytest.mark.parametrize("raw", [b"hello", b"\x00", b"\x0b\x00\x01" + b"\xff" * 8, b"\x80" * 64])
def test_base64_of_garbage_bytes(server, raw):
    with pytest.raises(PlanInvalid):
        P.decode(base64.b64encode(raw).decode(), server.signer)


def test_empty_plan(server):
    with pytest.raises(PlanInvalid, match="empty"):
        P.decode("", server.signer)


def test_expired_plan(server, t1_plan):
    plan = copy_plan(P.decode(t1_plan["opaqued_query_plan"], server.signer))
    now = int(time.time() * 1000)
    plan.issued_at_ms = now - 120_000
    plan.expires_at_ms = now - 60_000
    text = P.encode(plan, server.signer)
    with pytest.raises(PlanInvalid, match="expired"):
        P.decode(text, server.signer)


def test_expiry_boundary(server, t1_plan):
    text = t1_plan["opaqued_query_plan"]
    plan = P.decode(text, server.signer)
    assert P.decode(text, server.signer, now_ms=plan.expires_at_ms) == plan
    with pytest.raises(PlanInvalid, match="expired"):
        P.decode(text, server.signer, now_ms=plan.expires_at_ms + 1)


def test_plan_of_another_secret(server, t1_plan):
    plan = P.decode(t1_plan["opaqued_query_plan"], server.signer)
    foreign = P.encode(plan, P.PlanSigner(b"some other secret"))
    with pytest.raises(PlanInvalid, match="signature"):
        P.decode(foreign, server.signer)
    # The server's plan is refused by a server with another secret, too.
    with pytest.raises(PlanInvalid, match="signature"):
        P.decode(t1_plan["opaqued_query_plan"], P.PlanSigner(b"some other secret"))


def test_key_id_swap_is_rejected(server, t1_plan):
    """A plan signed with another secret but labelled with the server's key id."""
    from thriftpy2.protocol import TBinaryProtocolFactory
    from thriftpy2.utils import deserialize, serialize

    proto = TBinaryProtocolFactory()
    foreign = P.encode(P.decode(t1_plan["opaqued_query_plan"], server.signer), P.PlanSigner(b"mallory"))
    wrapper = deserialize(plan_idl.TSignedPlan(), base64.b64decode(foreign), proto)
    wrapper.key_id = P.key_id(server.signer.secret)
    with pytest.raises(PlanInvalid, match="signature"):
        P.decode(base64.b64encode(serialize(wrapper, proto)).decode(), server.signer)


def test_secret_rotation(server, t1_plan):
    plan = P.decode(t1_plan["opaqued_query_plan"], server.signer)
    old, new = b"old-secret-" + b"x" * 20, b"new-secret-" + b"y" * 20
    old_text = P.encode(plan, P.PlanSigner(old))
    new_text = P.encode(plan, P.PlanSigner(new))
    rotated = P.PlanSigner(new, previous=(old,))
    assert P.decode(old_text, rotated) == plan
    assert P.decode(new_text, rotated) == plan
    # New plans are signed with the new secret only.
    assert P.encode(plan, rotated) == new_text
    with pytest.raises(PlanInvalid):
        P.decode(old_text, P.PlanSigner(new))
    with pytest.raises(PlanInvalid):
        P.decode(new_text, P.PlanSigner(old))
    with pytest.raises(PlanInvalid):
        P.decode(old_text, P.PlanSigner(new, previous=(b"unrelated",)))
    # Tampering is still detected with previous secrets.
    with pytest.raises(PlanInvalid):
        P.decode(_flip(old_text, len(base64.b64decode(old_text)) // 2, 0x01), rotated)


def test_load_or_create_secret(tmp_path):
    state = tmp_path / "wh" / "_starscan"
    first = P.load_or_create_secret(state, None)
    path = state / "plan_secret"
    assert path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first) >= 32
    assert path.read_bytes().strip() == first
    assert P.load_or_create_secret(state, None) == first  # persisted, reused
    assert list(state.iterdir()) == [path]                 # no temporary files left
    # A configured secret wins and does not touch the file.
    assert P.load_or_create_secret(state, "configured") == b"configured"
    assert path.read_bytes().strip() == first
    other = tmp_path / "other"
    assert P.load_or_create_secret(other, "configured") == b"configured"
    assert not (other / "plan_secret").exists()
    # Another warehouse gets another secret.
    assert P.load_or_create_secret(tmp_path / "wh2", None) != first


def test_server_secret_is_kept_in_the_warehouse(server):
    assert server.settings.plan_secret is None
    assert P.load_or_create_secret(server.settings.state_path, None) == server.signer.secret


def test_tampered_plan_refused_by_the_be(be_addr, t1_plan):
    from starscan.client import thrift_client

    raw = base64.b64decode(t1_plan["opaqued_query_plan"])
    tampered = _flip(t1_plan["opaqued_query_plan"], len(raw) // 2, 0x01)
    c = thrift_client(*be_addr)
    try:
        res = c.open_scanner(wire.TScanOpenParams(
            cluster="default_cluster", database="db1", table="t1",
            tablet_ids=[int(k) for k in t1_plan["partitions"]], opaqued_query_plan=tampered,
            batch_size=16, user="root", passwd=""))
        assert res.status.status_code == wire.TStatusCode.INVALID_ARGUMENT
        assert res.context_id
        assert res.selected_columns == []
        c.close_scanner(wire.TScanCloseParams(context_id=res.context_id))
    finally:
        c.close()


# =====================================================================================
# A plan outlives the server that issued it
# =====================================================================================
def _read_all(host: str, port: int, plan: dict, db: str, table: str, batch_size: int = 2) -> pa.Table:
    from starscan.client import thrift_client

    c = thrift_client(host, port)
    batches = []
    try:
        opened = c.open_scanner(wire.TScanOpenParams(
            cluster="default_cluster", database=db, table=table,
            tablet_ids=[int(k) for k in plan["partitions"]], opaqued_query_plan=plan["opaqued_query_plan"],
            batch_size=batch_size, user="root", passwd=""))
        assert opened.status.status_code == wire.TStatusCode.OK, opened.status
        assert len(opened.context_id) == 36
        offset = 0
        try:
            for _ in range(10_000):
                res = c.get_next(wire.TScanNextBatchParams(context_id=opened.context_id, offset=offset))
                assert res.status.status_code == wire.TStatusCode.OK, res.status
                if res.eos:
                    break
                for batch in pa.ipc.open_stream(res.rows):
                    assert batch.num_rows <= batch_size
                    batches.append(batch)
                    offset += batch.num_rows
            else:
                pytest.fail("no eos")
        finally:
            closed = c.close_scanner(wire.TScanCloseParams(context_id=opened.context_id))
            assert closed.status.status_code == wire.TStatusCode.OK
    finally:
        c.close()
    return pa.Table.from_batches(batches)


def test_plan_survives_a_restart(server, spark, fe_url):
    from starscan.app.server import StarscanServer

    issued = query_plan(fe_url, "db1", "t1", T1_SQL)
    settings = server.settings.model_copy(update={"http_port": 0, "be_port": 0, "flight_sql_port": 0, "be_flight_port": 0})
    second = StarscanServer(settings, spark)
    second.start()
    try:
        assert second.be_port and second.be_port != server.be_port
        assert second.http_port and second.http_port != server.http_port
        # Same warehouse: same secret, same tables.
        assert second.signer.secret == server.signer.secret
        assert second.warehouse.root == server.warehouse.root
        assert {"demo", "db1"} <= set(second.warehouse.databases())
        assert {"t1", "sales"} <= set(second.warehouse.tables("db1"))
        assert {"lineitem", "all_types"} <= set(second.warehouse.tables("demo"))

        table = _read_all("127.0.0.1", second.be_port, issued, "db1", "t1")
        assert table.column_names == ["k1", "v1", "m"]
        rows = sorted(zip(*(table.column(n).to_pylist() for n in table.column_names)))
        assert rows == [(1, "a", Decimal("12.34")), (2, "b", Decimal("-0.01")), (3, None, None)]

        # The second FE plans the same tablets and version, routed to its own BE.
        mine = query_plan(f"http://127.0.0.1:{second.http_port}", "db1", "t1", T1_SQL)
        assert set(mine["partitions"]) == set(issued["partitions"])
        for key, entry in mine["partitions"].items():
            assert entry["routings"] == [f"127.0.0.1:{second.be_port}"]
            assert entry["version"] == issued["partitions"][key]["version"]
            assert entry["schemaHash"] == issued["partitions"][key]["schemaHash"]
        # ... and its plans are good on the first server's BE.
        again = _read_all("127.0.0.1", server.be_port, mine, "db1", "t1", batch_size=1024)
        assert again.num_rows == 3
    finally:
        second.stop()
    # The session server is untouched.
    assert query_plan(fe_url, "db1", "t1", T1_SQL)["partitions"].keys() == issued["partitions"].keys()
    assert _read_all("127.0.0.1", server.be_port, issued, "db1", "t1").num_rows == 3
