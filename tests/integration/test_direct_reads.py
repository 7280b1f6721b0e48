"""Direct reads (starscan.arrow.direct, starscan.client.direct): plans that name the storage, read
by the client from the files themselves.

For demo.all_types and demo.lineitem, in the shared server's local warehouse and in a
warehouse on a real S3 API (moto's server, IAM on; the reader has read-only keys of its
own), ``direct=True``, ``direct=False`` and ``"auto"`` give the same rows in the same types.
Also: a file rewritten after planning is not read directly (the BE then reports the version
gone); a reader whose storage refuses it falls back to the BE; without the DIRECT_READ grant
a direct plan is a 403 (and "auto" reads through the BE); the plan carries no secret; the
audit line lists the files a direct plan disclosed.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

import httpx
import pyarrow as pa
import pytest
from support.s3 import moto_bucket, upload_folder
from support.servers import basic, running_server

from starscan.client import DirectReadDenied, DirectReadError, PermissionDenied, SnapshotGoneError, connect
from starscan.security.users import UserStore

BUCKET = "direct"
READER, PLAIN = "direct_reader", "plain_reader"
SCALAR_COLUMNS = ["id", "c_bool", "c_tinyint", "c_smallint", "c_int", "c_bigint", "c_float", "c_double", "c_decimal32",
                  "c_decimal64", "c_decimal128", "c_date", "c_datetime", "c_datetime_ntz", "c_string", "c_char",
                  "c_varchar", "c_binary"]
LINEITEM_WHERE = "l_quantity > 10 and l_shipmode in ('AIR', 'RAIL') and l_shipdate >= '1995-01-01'"


def _grant(users: UserStore) -> None:
    for name in (READER, PLAIN):
        if not users.exists(name):
            users.set_password(name, "pw", create=True)
        users.grant(name, "*.*")
    users.grant(READER, "direct_read:demo.*")
    users.grant(READER, "direct_read:scratch.*")


def _bag(table: pa.Table) -> Counter:
    return Counter(tuple(repr(v) for v in row.values()) for row in table.to_pylist())


@pytest.fixture(scope="module")
def local_server(server):
    _grant(server.users)
    return server


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server (tests/support/s3.py) with a bucket."""
    with moto_bucket(tmp_path_factory.mktemp("moto-direct") / "moto.log", BUCKET, reader=True) as store:
        yield store


@pytest.fixture(scope="module")
def s3_server(spark, server, s3, base_settings, tmp_path_factory):
    """A server whose warehouse is in the bucket: demo.all_types and demo.lineitem (the shared
    warehouse's files, uploaded) and scratch.t, which a test rewrites."""
    for table in ("all_types", "lineitem"):
        upload_folder(s3["fs"], server.warehouse.table_path("demo", table), f"{BUCKET}/wh/demo.db/{table}")
    scratch = tmp_path_factory.mktemp("scratch") / "t"
    spark.range(0, 500, numPartitions=2).selectExpr("id", "cast(id * 2 as int) as twice").write.parquet(str(scratch))
    upload_folder(s3["fs"], scratch, f"{BUCKET}/wh/scratch.db/t")
    settings = base_settings.model_copy(update={
        "warehouse": f"s3://{BUCKET}/wh", "state_dir": tmp_path_factory.mktemp("direct-state"), **s3["creds"],
        "audit_log": tmp_path_factory.mktemp("direct-audit") / "audit.log"})
    settings = type(settings).model_validate(settings.model_dump())
    with running_server(spark, settings) as srv:
        _grant(srv.users)
        yield srv


def _fe(srv) -> str:
    return f"http://127.0.0.1:{srv.http_port}"


@pytest.fixture(params=["local", "s3"])
def where(request, local_server, s3_server, s3):
    """(server, the reader's storage options) for each warehouse."""
    if request.param == "local":
        return local_server, None
    return s3_server, s3["reader"]


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("table,filtered", [("all_types", False), ("lineitem", False), ("lineitem", True)])
def test_direct_true_false_and_auto_give_the_same_rows(where, table, filtered, native):
    srv, storage = where
    conn = connect(_fe(srv), READER, "pw", max_workers=3, storage=storage)
    columns = SCALAR_COLUMNS if table == "all_types" else None
    clause = LINEITEM_WHERE if filtered else None
    through_be = conn.read_arrow(f"demo.{table}", columns, clause, native_types=native, direct=False)
    direct = conn.read_arrow(f"demo.{table}", columns, clause, native_types=native, direct=True)
    auto = conn.read_arrow(f"demo.{table}", columns, clause, native_types=native, direct="auto")
    assert through_be.num_rows > 0
    assert direct.schema == through_be.schema == auto.schema
    assert _bag(direct) == _bag(through_be) == _bag(auto)
    assert conn.direct_tablets >= 2 and not conn.fallbacks


def test_auto_reads_what_cannot_be_read_directly_through_the_be(local_server):
    """select * of all_types has nested columns: every tablet is marked not direct, with why."""
    conn = connect(_fe(local_server), READER, "pw")
    plan = conn.plan("demo", "all_types", "select * from demo.all_types", direct=True)
    entries = list(plan["partitions"].values())
    assert entries and all(e["direct"] is False and "c_array" in e["reason"] for e in entries)
    assert _bag(conn.read_arrow("demo.all_types", direct="auto")) == _bag(conn.read_arrow("demo.all_types"))
    assert conn.fallbacks and "not direct" in conn.fallbacks[0]
    with pytest.raises(DirectReadError, match="c_array"):
        conn.read_arrow("demo.all_types", direct=True)


def test_a_plan_names_each_tablets_files_and_how_to_read_them(s3_server, s3):
    conn = connect(_fe(s3_server), READER, "pw")
    plan = conn.plan("demo", "lineitem", f"select l_orderkey, l_shipdate from demo.lineitem where {LINEITEM_WHERE}",
                     direct=True)
    section = plan["direct"]
    assert section["table"] == "demo.lineitem" and section["format"] == "parquet"
    assert section["columns"] == [["l_orderkey", "l_orderkey"], ["l_shipdate", "l_shipdate"]]
    assert section["predicate"][0]["kind"] == "op" and section["timeZone"]
    for entry in plan["partitions"].values():
        assert entry["routings"] and entry["direct"] is True and entry["format"] == "parquet"
        for f in entry["files"]:
            assert f["storagePath"].startswith(f"s3://{BUCKET}/wh/demo.db/lineitem/") and f["size"] > 0
            info = s3["fs"].get_file_info(f["storagePath"][len("s3://"):])
            assert info.size == f["size"]
    assert "opaqued_query_plan" in plan  # the same plan reads through the BE as well


def test_the_plan_carries_no_secret(s3_server, s3):
    r = httpx.post(f"{_fe(s3_server)}/api/demo/lineitem/_query_plan",
                   content=json.dumps({"sql": "select * from demo.lineitem", "direct": True}),
                   headers={"Authorization": basic(READER, "pw")}, timeout=60)
    assert r.status_code == 200 and '"storagePath"' in r.text
    secrets = [s3["creds"]["s3_access_key_id"], s3["creds"]["s3_secret_access_key"],
               s3_server.signer._load().secret.decode()]  # the plan secret the server signs with
    for secret in secrets:
        assert secret and secret not in r.text


def test_without_the_grant_a_direct_plan_is_a_403_and_auto_reads_through_the_be(local_server, server):
    r = httpx.post(f"{_fe(local_server)}/api/demo/lineitem/_query_plan",
                   content=json.dumps({"sql": "select * from demo.lineitem", "direct": True}),
                   headers={"Authorization": basic(PLAIN, "pw")}, timeout=60)
    assert r.status_code == 403 and "DIRECT_READ" in r.text and "--direct-read" in r.text
    conn = connect(_fe(local_server), PLAIN, "pw")
    with pytest.raises(DirectReadDenied, match="DIRECT_READ") as denied:  # its own kind, not the message's words
        conn.read_arrow("demo.lineitem", direct=True)
    assert isinstance(denied.value, PermissionDenied) and denied.value.kind == "DirectReadDenied"
    assert conn.read_arrow("demo.lineitem", ["l_orderkey"], direct="auto").num_rows == \
        conn.read_arrow("demo.lineitem", ["l_orderkey"]).num_rows
    assert conn.direct_tablets == 0
    bad = httpx.post(f"{_fe(local_server)}/api/demo/lineitem/_query_plan",
                     content=json.dumps({"sql": "select * from demo.lineitem", "direct": "yes"}),
                     headers={"Authorization": basic(READER, "pw")}, timeout=60)
    assert bad.status_code == 400 and 'must be true or false' in bad.json()["exception"]


def test_a_reader_the_storage_refuses_falls_back_to_the_be(s3_server, s3):
    wrong = {**s3["reader"], "secret_access_key": "not-the-key"}
    conn = connect(_fe(s3_server), READER, "pw", storage=wrong, request_retries=0)
    want = connect(_fe(s3_server), READER, "pw").read_arrow("demo.lineitem")
    got = conn.read_arrow("demo.lineitem", direct="auto")
    assert _bag(got) == _bag(want)
    assert conn.direct_tablets == 0 and conn.fallback_tablets >= 2
    assert "connect(storage=...)" in conn.fallbacks[0]  # the reader's own keys were refused, not the server's
    with pytest.raises(DirectReadError, match="refused"):
        conn.read_arrow("demo.lineitem", direct=True)


def test_a_file_rewritten_after_planning_is_not_read_directly(s3_server, s3):
    conn = connect(_fe(s3_server), READER, "pw", storage=s3["reader"])
    plan = conn.plan("scratch", "t", "select id, twice from scratch.t", direct=True)
    before = conn.read_planned("scratch", "t", plan, direct="auto").read_all()
    assert before.num_rows == 500 and conn.direct_tablets == 2
    victim = next(iter(plan["partitions"].values()))["files"][0]["storagePath"][len("s3://"):]
    with s3["fs"].open_input_stream(victim) as f:
        data = f.read()
    with s3["fs"].open_output_stream(victim) as f:  # the same bytes, written again: a new identity
        f.write(data)
    with pytest.raises(SnapshotGoneError, match="is gone"):
        conn.read_planned("scratch", "t", plan, direct="auto").read_all()
    assert any("was rewritten" in why for why in conn.fallbacks)
    with pytest.raises(DirectReadError, match="was rewritten"):
        conn.read_planned("scratch", "t", plan, direct=True).read_all()
    fresh = conn.read_arrow("scratch.t", direct=True)  # a new plan names the new file
    assert _bag(fresh) == _bag(before)


def test_every_direct_plan_is_audited_with_the_files_it_disclosed(s3_server):
    tag = uuid.uuid4().hex[:8]
    conn = connect(_fe(s3_server), READER, "pw")
    plan = conn.plan("demo", "lineitem", f"select l_orderkey from demo.lineitem where l_comment <> '{tag}'", direct=True)
    named = sorted(f["storagePath"] for e in plan["partitions"].values() for f in e.get("files", ()))
    lines = [json.loads(line) for line in s3_server.settings.effective_audit_log.read_text().splitlines()]
    mine = [line for line in lines if tag in (line.get("sql") or "")]
    assert len(mine) == 1 and mine[0]["direct"] is True and sorted(mine[0]["direct_files"]) == named and named
