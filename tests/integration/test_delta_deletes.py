"""Delta deletion vectors (rows deleted without rewriting their file): every reader leaves
the deleted rows out, on both engines, against delta-rs' own reader of the same table.

delta-rs reads deletion vectors but does not write them, so the vectors are written here
from the Delta protocol (tests/support/delta_log.py) in all three storages: a file in the
table folder (``u``, one under a prefix folder), inline in the log (``i``) and a file at an
absolute URI (``p``); a later commit replaces one file's vector, and a checkpoint holds the
others, so the planner's log replay is checked too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, WriterProperties, write_deltalake
from support.delta_log import commit_deletion_vectors, inline_vector, stored_vector, write_v2_checkpoint

pytestmark = pytest.mark.spark_line  # the Spark-version tier (docs/scaling.md)

on_both_engines = pytest.mark.usefixtures("engine")
ROWS_PER_FILE = 3000


def _rows(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([f"r{i}" for i in ids]),
                     "x": pa.array([None if i % 13 == 0 else i * 0.5 for i in ids], pa.float64())})


def _oracle(location: Path, where: str = "") -> list[tuple]:
    """delta-rs' answer (its own DataFusion reader, which applies deletion vectors)."""
    table = QueryBuilder().register("t", DeltaTable(str(location))).execute(f"select id, v, x from t{where}").read_all()
    return sorted(tuple(r.values()) for r in pa.table(table).to_pylist())


@pytest.fixture(scope="module")
def deleted(server, tmp_path_factory):
    """lake.dv: three files of 3,000 rows in row groups of 1,000; about 10 % of the rows
    deleted by vectors of each storage kind; a checkpoint; then file 0's vector replaced."""
    location = server.warehouse.table_path("lake", "dv")
    shutil.rmtree(location, ignore_errors=True)
    location.parent.mkdir(parents=True, exist_ok=True)
    props = WriterProperties(max_row_group_size=1000)
    for n in range(3):
        write_deltalake(str(location), _rows(n * 10_000, ROWS_PER_FILE), mode="append", writer_properties=props,
                        configuration={"delta.enableDeletionVectors": "true"})
    files = sorted(pa.table(DeltaTable(str(location)).get_add_actions(flatten=False)).column("path").to_pylist(),
                   key=lambda p: (location / p).stat().st_mtime_ns)
    rows = {p: ROWS_PER_FILE for p in files}
    elsewhere = tmp_path_factory.mktemp("dv-elsewhere")
    first = stored_vector(location, [0, 999, 1000, 2999], "u")
    commit_deletion_vectors(location, {
        files[0]: first,
        files[1]: inline_vector(list(range(0, ROWS_PER_FILE, 10))),                    # every 10th row
        files[2]: stored_vector(location, list(range(1500, 1800)), "p", elsewhere=elsewhere),
    }, rows)
    DeltaTable(str(location)).create_checkpoint()
    commit_deletion_vectors(location, {                                                # file 0 again
        files[0]: stored_vector(location, [0, 999, 1000, 2999, *range(2000, 2300)], "u", prefix="ab"),
    }, rows, replaced={files[0]: first})
    assert (location / "_delta_log" / "_last_checkpoint").exists()
    assert len(_oracle(location)) == 3 * ROWS_PER_FILE - 304 - 300 - 300             # delta-rs agrees
    server.warehouse.invalidate("lake", "dv")
    return location


@on_both_engines
@pytest.mark.parametrize("where", [
    "",
    " where id between 900 and 1100 or id >= 22000",                 # across row groups, on the arrow engine
    " where v = 'r11500' or v = 'r11501' or v = 'r21600'",
    " where id % 7 = 3 and x is not null",                           # a sample of rows and a NULL check
])
def test_rows_deleted_by_deletion_vectors_are_left_out(server, client, deleted, where):
    got = client.read("lake", "dv", f"select id, v, x from lake.dv{where}")
    assert sorted(tuple(r.values()) for r in got.to_pylist()) == _oracle(deleted, where)


@pytest.fixture(scope="module")
def v2_checkpointed(server):
    """lake.dv_v2: two files with vectors (in a file, inline), a V2 checkpoint whose add
    actions are in a sidecar file (the commits it covers removed, as log cleanup does),
    then a file appended after it."""
    location = server.warehouse.table_path("lake", "dv_v2")
    shutil.rmtree(location, ignore_errors=True)
    location.parent.mkdir(parents=True, exist_ok=True)
    for n in range(2):
        write_deltalake(str(location), _rows(n * 10_000, 1000), mode="append",
                        configuration={"delta.enableDeletionVectors": "true"})
    files = sorted(pa.table(DeltaTable(str(location)).get_add_actions(flatten=False)).column("path").to_pylist())
    commit_deletion_vectors(location, {files[0]: stored_vector(location, [0, 1, 500, 999], "u"),
                                       files[1]: inline_vector(list(range(0, 1000, 3)))}, {p: 1000 for p in files})
    version = write_v2_checkpoint(location)
    # A commit after it, appending a file (delta-rs' writer does not take V2 checkpoints yet).
    import pyarrow.parquet as pq

    pq.write_table(_rows(50_000, 100), location / "appended.parquet")
    stat = (location / "appended.parquet").stat()
    (location / "_delta_log" / f"{version + 1:020d}.json").write_text(json.dumps({"add": {
        "path": "appended.parquet", "partitionValues": {}, "size": stat.st_size,
        "modificationTime": int(stat.st_mtime * 1000), "dataChange": True,
        "stats": json.dumps({"numRecords": 100})}}) + "\n")
    assert not (location / "_delta_log" / f"{0:020d}.json").exists()
    assert len(_oracle(location)) == 2000 - 4 - 334 + 100                             # delta-rs agrees
    server.warehouse.invalidate("lake", "dv_v2")
    return location


@on_both_engines
@pytest.mark.parametrize("where", ["", " where id < 10 or id >= 10990"])
def test_vectors_in_a_v2_checkpoints_sidecar_are_applied(server, client, v2_checkpointed, where):
    got = client.read("lake", "dv_v2", f"select id, v, x from lake.dv_v2{where}")
    assert sorted(tuple(r.values()) for r in got.to_pylist()) == _oracle(v2_checkpointed, where)


@on_both_engines
def test_nested_columns_of_a_table_with_vectors_are_read_by_the_reader(server, client):
    """Arrays, maps and structs of files with deleted rows: starscan's reader reads them as
    they are under Spark SQL (the arrow engine leaves nested columns to it)."""
    location = server.warehouse.table_path("lake", "dv_nested")
    shutil.rmtree(location, ignore_errors=True)
    ids = list(range(400))
    data = pa.table({
        "id": pa.array(ids, pa.int64()),
        "a": pa.array([[i, None, i + 1] if i % 5 else None for i in ids], pa.list_(pa.int32())),
        "m": pa.array([[("k", i)] if i % 3 else [] for i in ids], pa.map_(pa.string(), pa.int64())),
        "s": pa.array([{"x": i, "y": None if i % 7 == 0 else f"s{i}"} for i in ids],
                      pa.struct([("x", pa.int64()), ("y", pa.string())]))})
    write_deltalake(str(location), data, configuration={"delta.enableDeletionVectors": "true"})
    path = pa.table(DeltaTable(str(location)).get_add_actions(flatten=False)).column("path")[0].as_py()
    commit_deletion_vectors(location, {path: inline_vector(list(range(0, 400, 4)))}, {path: 400})
    server.warehouse.invalidate("lake", "dv_nested")
    want = pa.table(QueryBuilder().register("t", DeltaTable(str(location)))
                    .execute("select id, a, m, s from t where id < 200").read_all())
    got = client.read("lake", "dv_nested", "select id, a, m, s from lake.dv_nested where id < 200")
    assert len(got) == len(want) == 150

    def rows(table):
        out = []
        for r in table.to_pylist():
            m = r["m"]
            m = sorted(m.items()) if isinstance(m, dict) else sorted(tuple(kv) for kv in (m or []))
            out.append((r["id"], r["a"], m, r["s"]))
        return sorted(out, key=lambda t: t[0])

    assert rows(got) == rows(want)


def test_direct_reads_apply_the_vectors_and_readers_that_do_not_say_so_get_the_be(server, fe_url, deleted):
    """The bundled client says it applies row-level deletes: its direct plan names each
    file's vector (a storage URI) and its own reader leaves the rows out. A reader that does
    not say so (an older client) gets those tablets marked not direct, with the reason."""
    import httpx

    from starscan.client import connect

    if not server.users.exists("dv_direct"):
        server.users.set_password("dv_direct", "pw", create=True)
    server.users.grant("dv_direct", "lake.*")
    server.users.grant("dv_direct", "direct_read:lake.*")
    conn = connect(fe_url, "dv_direct", "pw")
    plan = conn.plan("lake", "dv", "select id from lake.dv", direct=True)
    files = [f for p in plan["partitions"].values() for f in p["files"]]
    assert files and any(f.get("rowDeletes") for f in files)
    got = conn.read_arrow("lake.dv", ["id", "v", "x"], direct=True)
    assert conn.direct_tablets > 0 and not conn.fallbacks
    assert sorted(tuple(r.values()) for r in got.to_pylist()) == _oracle(deleted)
    older = httpx.post(f"{fe_url}/api/lake/dv/_query_plan", json={"sql": "select id from lake.dv", "direct": True},
                       auth=("dv_direct", "pw"), timeout=60).json()
    reasons = {p.get("reason") for p in older["partitions"].values()}
    assert reasons and all(r and "deletion vector" in r for r in reasons), reasons


def test_a_broken_vector_fails_the_scan_by_name_and_the_server_serves_on(server, client, tmp_path):
    location = server.warehouse.table_path("lake", "dv_broken")
    shutil.rmtree(location, ignore_errors=True)
    write_deltalake(str(location), _rows(0, 100), configuration={"delta.enableDeletionVectors": "true"})
    path = pa.table(DeltaTable(str(location)).get_add_actions(flatten=False)).column("path")[0].as_py()
    vector = stored_vector(location, [1, 2, 3], "u")
    commit_deletion_vectors(location, {path: vector}, {path: 100})
    assert len(_oracle(location)) == 97
    stored = next(location.glob("deletion_vector_*.bin"))
    raw = bytearray(stored.read_bytes())
    raw[-1] ^= 0xFF  # the vector's CRC-32
    stored.write_bytes(bytes(raw))
    server.warehouse.invalidate("lake", "dv_broken")
    with pytest.raises(Exception) as failed:
        client.read("lake", "dv_broken", "select id from lake.dv_broken")
    message = str(failed.value)
    assert "deletion vector" in message and "CRC-32" in message and "dv_broken" in message, message
    assert client.read("demo", "all_types", "select c_int from demo.all_types").num_rows > 0


def test_a_delete_by_vector_ends_incremental_reads_with_409(server, client, fe_url):
    location = server.warehouse.table_path("lake", "dv_since")
    shutil.rmtree(location, ignore_errors=True)
    write_deltalake(str(location), _rows(0, 50), configuration={"delta.enableDeletionVectors": "true"})
    path = pa.table(DeltaTable(str(location)).get_add_actions(flatten=False)).column("path")[0].as_py()
    write_deltalake(str(location), _rows(100, 5), mode="append")                      # 1: an append
    server.warehouse.invalidate("lake", "dv_since")
    plan = client.plan("lake", "dv_since", "select id from lake.dv_since", since_version=0)
    assert sorted(client.read("lake", "dv_since", "select id from lake.dv_since", plan=plan)
                  .column("id").to_pylist()) == list(range(100, 105))
    commit_deletion_vectors(location, {path: inline_vector([4])}, {path: 50})         # 2: a delete
    server.warehouse.invalidate("lake", "dv_since")
    import httpx
    from support.servers import basic

    answer = httpx.post(f"{fe_url}/api/lake/dv_since/_query_plan",
                        content=json.dumps({"sql": "select id from lake.dv_since", "since_version": 1}),
                        headers={"Authorization": basic("root", "")}, timeout=60)
    assert answer.status_code == 409 and "removed rows" in answer.json()["exception"], answer.text
    ids = client.read("lake", "dv_since", "select id from lake.dv_since").column("id").to_pylist()
    assert sorted(ids) == [i for i in range(50) if i != 4] + list(range(100, 105))


def test_the_mysql_port_leaves_deleted_rows_out(server, deleted):
    import pymysql

    conn = pymysql.connect(host="127.0.0.1", port=server.query_port, user="root", password="", connect_timeout=20,
                           read_timeout=120)
    try:
        with conn.cursor() as cur:
            cur.execute("select id, v from lake.dv where id < 1010 or (id >= 20000 and id < 20010)")
            got = sorted((int(i), v) for i, v in cur.fetchall())
    finally:
        conn.close()
    want = [(i, v) for i, v, _ in _oracle(deleted, " where id < 1010 or (id >= 20000 and id < 20010)")]
    assert got == want and len(got) == 1010 - 3 + 10
