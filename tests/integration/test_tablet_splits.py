"""Tablets as splits (starscan.tables.tablets, starscan.plans.tablet_lists) on real servers: small files
packed, a large file cut into runs of row groups, plans of large tables that carry a digest
instead of their tablet list, and what happens when a plan does not match the files.

Rows are compared with what Spark SQL reads from the same files, as multisets: a row group
read twice or never fails the test, on both engines."""

from __future__ import annotations

import shutil
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import engine_counts
from support.readers import OK, Reader, plan_for
from support.servers import running_server

from starscan.plans import codec as plan_codec

on_both_engines = pytest.mark.usefixtures("engine")
DB = "splitdb"
ROWS, GROUP_ROWS = 60_000, 5_000


@pytest.fixture
def sizing(server):
    """Tablet sizes set through the run-time config, as an operator would; restored after."""
    saved = {k: getattr(server.settings, k) for k in
             ("tablet_target_bytes", "tablet_open_cost_bytes", "plan_inline_tablets_max_bytes")}

    def set_sizing(**changes) -> None:
        server.ops.update_config(changes)

    yield set_sizing
    server.ops.update_config(saved)


def _table(server, name: str):
    location = server.warehouse.table_path(DB, name)
    shutil.rmtree(location, ignore_errors=True)
    location.mkdir(parents=True)
    return location


def _big_and_small(location) -> int:
    """One file of ROWS rows in row groups of GROUP_ROWS, and 40 files of 5 rows; returns the
    compressed size of the big file's largest row group."""
    ids = pa.array(range(ROWS), pa.int64())
    pq.write_table(pa.table({"id": ids, "s": pa.array([f"v{i % 977}" for i in range(ROWS)]),
                             "x": pa.array([i * 0.5 for i in range(ROWS)])}),
                   location / "big.parquet", row_group_size=GROUP_ROWS)
    for k in range(40):
        base = ROWS + 5 * k
        pq.write_table(pa.table({"id": pa.array(range(base, base + 5), pa.int64()),
                                 "s": pa.array([f"small{k}"] * 5), "x": pa.array([0.25] * 5)}),
                       location / f"small-{k:02d}.parquet")
    meta = pq.read_metadata(location / "big.parquet")
    return max(sum(meta.row_group(i).column(j).total_compressed_size for j in range(meta.num_columns))
               for i in range(meta.num_row_groups))


def _spark_rows(spark, location, where: str, columns: list[str]) -> Counter:
    df = spark.read.parquet(str(location))
    df.createOrReplaceTempView("splits_expected")
    rows = spark.sql(f"select {', '.join(columns)} from splits_expected where {where}").collect()
    return Counter(tuple(r) for r in rows)


def _scan(be_addr, plan: str, tablets: list[int], table: str, columns: list[str]) -> Counter:
    reader = Reader(be_addr)
    try:
        cid = reader.open_ok(DB, table, plan, tablets, batch_size=4096)
        batches, _ = reader.drain_batches(cid)
        reader.close_scanner(cid)
        return Counter(row for b in batches for row in zip(*[b.column(c).to_pylist() for c in columns]))
    finally:
        reader.close()


def test_cut_and_packed_tablets_read_each_row_once(server, spark, client, be_addr, sizing, engine):
    location = _table(server, "events")
    group_bytes = _big_and_small(location)
    sizing(tablet_target_bytes=3 * group_bytes + 1, tablet_open_cost_bytes=1024)
    snap = server.warehouse.snapshot(DB, "events")
    cuts = [t for t in snap.tablets if t.is_cut]
    assert len(cuts) == ROWS // GROUP_ROWS // 3 and sum(t.rows for t in cuts) == ROWS
    packed = [t for t in snap.tablets if not t.is_cut]
    assert 1 <= len(packed) < 40 and sum(len(t.files) for t in packed) == 40

    columns = ["id", "s", "x"]
    where = "s <> 'v5' and id not in (12345, 60003) and (s like 'v1%' or s like 'small1%' or id > 30000)"
    sql = f"select id, s, x from {DB}.events where {where}"
    expected = _spark_rows(spark, location, where, columns)
    plan, tablets = plan_for(client, DB, "events", sql)
    assert sorted(tablets) == sorted(t.tablet_id for t in snap.tablets)
    # Every tablet on a scanner of its own, as the Spark connector reads with one tablet per
    # partition; then all of them on one scanner.
    before = engine_counts(server).get("arrow", 0)
    per_tablet: Counter = Counter()
    for tid in tablets:
        per_tablet.update(_scan(be_addr, plan, [tid], "events", columns))
    assert per_tablet == expected
    assert _scan(be_addr, plan, tablets, "events", columns) == expected
    arrow_scans = engine_counts(server).get("arrow", 0) - before
    assert arrow_scans == (len(tablets) + 1 if engine == "auto" else 0)


@on_both_engines
def test_partitions_of_tiny_files_become_one_tablet_each_and_prune(server, spark, client, be_addr, sizing):
    location = _table(server, "tiny")
    for p in range(3):
        for k in range(30):
            folder = location / f"p={p}"
            folder.mkdir(exist_ok=True)
            base = (p * 30 + k) * 4
            pq.write_table(pa.table({"id": pa.array(range(base, base + 4), pa.int64())}), folder / f"f{k:02d}.parquet")
    sizing(tablet_target_bytes=64 << 20, tablet_open_cost_bytes=128 << 10)
    body = client.plan(DB, "tiny", f"select id, p from {DB}.tiny")
    assert len(body["partitions"]) == 3
    plan, tablets = plan_for(client, DB, "tiny", f"select id, p from {DB}.tiny where p = 1 and id > 130")
    assert len(tablets) == 1
    assert _scan(be_addr, plan, tablets, "tiny", ["id", "p"]) == _spark_rows(spark, location, "p = 1 and id > 130",
                                                                              ["id", "p"])


def test_a_large_tables_plan_carries_a_digest_and_any_be_of_the_warehouse_reads_it(
        server, spark, client, be_addr, base_settings, sizing):
    location = _table(server, "many")
    for k in range(300):
        pq.write_table(pa.table({"id": pa.array([k], pa.int64())}), location / f"part-{k:04d}.parquet")
    sizing(tablet_target_bytes=1024, tablet_open_cost_bytes=1 << 20, plan_inline_tablets_max_bytes=1024)
    body = client.plan(DB, "many", f"select id from {DB}.many")
    assert len(body["partitions"]) == 300
    decoded = plan_codec.decode(body["opaqued_query_plan"], server.signer)
    assert decoded.tablets == b"" and len(decoded.tablets_digest) == 16 and len(decoded.tablet_ids) == 300
    assert len(body["opaqued_query_plan"]) < 8000  # the ids; the 300 tablets' files would take ~30 KB
    plan, tablets = body["opaqued_query_plan"], [int(t) for t in body["partitions"]]
    expected = Counter((k,) for k in range(300))
    assert _scan(be_addr, plan, tablets, "many", ["id"]) == expected

    # A BE of another process (it never saw the plan's tablet list) rebuilds it from the files.
    settings = server.settings.model_copy(update={"be_port": 0, "http_port": 0, "query_port": 0, "flight_sql_port": 0, "be_flight_port": 0})
    with running_server(spark, settings) as other:
        other_be = ("127.0.0.1", other.be_port)
        by_id = server.warehouse.snapshot(DB, "many").by_id
        assert _scan(other_be, plan, tablets[:7], "many", ["id"]) == Counter(
            (int(by_id[tid].files[0].path[5:9]),) for tid in tablets[:7])
    # Once the table changed, a BE that does not hold the list cannot know what the plan read.
    pq.write_table(pa.table({"id": pa.array([999], pa.int64())}), location / "part-9999.parquet")
    server.warehouse.invalidate(DB, "many")
    with running_server(spark, settings) as fresh:
        reader = Reader(("127.0.0.1", fresh.be_port))
        try:
            opened = reader.open(DB, "many", plan, tablets[:1])
            assert opened.status.status_code != OK
            message = " ".join(opened.status.error_msgs or [])
            assert f"table {DB}.many version {decoded.version} is gone" in message and "new plan" in message
        finally:
            reader.close()
    # The BE that holds the list still reads the planned version: its files are unchanged.
    assert _scan(be_addr, plan, tablets, "many", ["id"]) == expected


@pytest.mark.parametrize("engine_name", ["arrow", "sql"])
def test_a_tablet_past_the_end_of_its_file_is_a_clear_error(server, client, be_addr, sizing, engine_name):
    location = _table(server, "pastend")
    group_bytes = _big_and_small(location)
    sizing(tablet_target_bytes=3 * group_bytes + 1, tablet_open_cost_bytes=1024)
    body = client.plan(DB, "pastend", f"select id from {DB}.pastend")
    plan = plan_codec.decode(body["opaqued_query_plan"], server.signer)
    tablets = plan_codec.tablets_of(plan)
    cut = next(t for t in tablets if t.first_row_group is not None)
    cut.first_row_group, cut.rows = 40, 15_000  # a plan that does not match the file: row groups 40-42 of 12
    plan.tablets = plan_codec.pack_tablets(tablets)
    forged = plan_codec.encode(plan, server.signer)  # as if an FE had planned it
    saved = server.settings.scan_engine
    server.ops.update_config({"scan_engine": engine_name})
    reader = Reader(be_addr)
    try:
        cid = reader.open_ok(DB, "pastend", forged, [cut.tablet_id])
        offset, eos = 0, False
        for _ in range(1000):
            res = reader.next(cid, offset)
            if res.status.status_code != OK:
                break
            if res.eos:
                eos = True
                break
            offset += pa.ipc.open_stream(res.rows).read_all().num_rows
        assert not eos, "a tablet the file does not hold must not end with eos"
        message = " ".join(res.status.error_msgs or [])
        assert f"{DB}.pastend" in message and "big.parquet" in message and "row groups 40-42" in message, message
    finally:
        reader.close()
        server.ops.update_config({"scan_engine": saved})
    # The server keeps serving.
    plan_text, ids = plan_for(client, DB, "pastend", f"select id from {DB}.pastend")
    assert sum(_scan(be_addr, plan_text, ids, "pastend", ["id"]).values()) == ROWS + 200
