"""`get_next` replies carry the rows the reader asked for (`batch_size`), whatever the size
of Spark's Arrow batches (4,096 rows): fewer only at the end of a split (at most one short
reply per split: its last rows are not joined with a cut of the next split's batch) or of
the scan, or when the scan is slower than `reply_fill_wait_s`. Real server, real Spark, a
real Thrift reader."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.readers import Reader, plan_for

from starscan.core.thrift_defs import wire


@pytest.fixture
def patient_fill(server):
    """A fill wait long enough that no reply of this test is cut short by a slow moment."""
    saved = server.service.settings.reply_fill_wait_s
    server.ops.update_config({"reply_fill_wait_s": "60"})
    yield
    server.ops.update_config({"reply_fill_wait_s": str(saved)})


def reply_sizes(client, be_addr, sql: str, batch_size: int) -> tuple[list[int], int]:
    """The rows of each reply, and the splits of the scan (a tablet is a split)."""
    plan, tablets = plan_for(client, "demo", "lineitem", sql)
    reader = Reader(be_addr)
    sizes, offset = [], 0
    try:
        cid = reader.open_ok("demo", "lineitem", plan, tablets, batch_size=batch_size)
        while True:
            res = reader.next(cid, offset)
            assert res.status.status_code == wire.TStatusCode.OK, res.status
            if res.eos:
                break
            table = pa.ipc.open_stream(res.rows).read_all()
            assert table.to_batches() and len(table.to_batches()) == 1  # one record batch a reply
            sizes.append(table.num_rows)
            offset += table.num_rows
        reader.close_scanner(cid)
    finally:
        reader.close()
    return sizes, len(tablets)


def assert_full_but_split_ends(sizes: list[int], splits: int, batch_size: int) -> None:
    assert len(sizes) > 1, "the table must need several replies"
    short = [n for n in sizes[:-1] if n != batch_size]
    assert len(short) <= splits, (splits, sizes)  # one split's end each, at most
    assert all(0 < n <= batch_size for n in sizes), sizes


@pytest.mark.parametrize("batch_size", [1000, 4096, 8192, 16384])
def test_every_reply_but_a_split_end_has_batch_size_rows(server, client, be_addr, spark, patient_fill, batch_size):
    total = spark.read.parquet(str(server.warehouse.table_path("demo", "lineitem"))).count()
    sizes, splits = reply_sizes(client, be_addr, "select * from demo.lineitem", batch_size)
    assert sum(sizes) == total
    assert_full_but_split_ends(sizes, splits, batch_size)


def test_filtered_scans_fill_their_replies_too(server, client, be_addr, spark, patient_fill):
    sql = "select l_orderkey, l_quantity from demo.lineitem where l_quantity > 25"
    want = spark.read.parquet(str(server.warehouse.table_path("demo", "lineitem"))).where("l_quantity > 25").count()
    sizes, splits = reply_sizes(client, be_addr, sql, 8192)
    assert sum(sizes) == want
    assert_full_but_split_ends(sizes, splits, 8192)
