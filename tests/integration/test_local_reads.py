"""The BE's own reads (``scan_local_reads``, on by default): an arrow-engine scan's splits
read in the BE's process until its first Spark task connects (arrow-engine scans only). The
same rows as Spark SQL,
and the same errors as a task's (the suite's shared server reads on Spark's tasks only)."""

from __future__ import annotations

import shutil
import uuid
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.readers import NOT_FOUND, OK, Reader, plan_for
from support.servers import running_server

QUERIES = [
    "select l_orderkey, l_partkey, l_comment from demo.lineitem",
    "select l_orderkey, l_shipdate, l_extendedprice from demo.lineitem where l_quantity > 30 and l_shipmode = 'AIR'",
    "select l_orderkey, l_discount from demo.lineitem where l_linenumber in (1, 3) or l_orderkey < 500",
]


@pytest.fixture(scope="module")
def local_be(spark, base_settings, server):
    settings = base_settings.model_copy(update={"scan_local_reads": True, "http_port": 0, "be_port": 0, "query_port": 0})
    with running_server(spark, settings) as srv:
        yield srv


@pytest.mark.parametrize("sql", QUERIES)
def test_the_bes_own_reads_give_spark_sqls_rows(local_be, client, spark, sql):
    plan, tablets = plan_for(client, "demo", "lineitem", sql)
    reader = Reader(("127.0.0.1", local_be.be_port))
    got: Counter = Counter()
    local = 0
    try:
        for tablet in tablets:  # a scanner per tablet: its first splits are the BE's
            cid = reader.open_ok("demo", "lineitem", plan, [tablet], batch_size=2048)
            for batch in reader.drain_batches(cid)[0]:
                got.update(zip(*(batch.column(i).to_pylist() for i in range(batch.num_columns))))
            local += local_be.contexts.get(cid).scan.local_splits
            reader.close_scanner(cid)
    finally:
        reader.close()
    assert local > 0  # the BE read splits itself
    spark_sql = sql.replace("demo.lineitem", "lineitem_local_reads")
    spark.read.parquet(str(local_be.warehouse.table_path("demo", "lineitem"))).createOrReplaceTempView("lineitem_local_reads")
    want = Counter(tuple(_wire(v) for v in r) for r in spark.sql(spark_sql).collect())
    assert Counter({tuple(_wire(v) for v in k): n for k, n in got.items()}) == want


def _wire(value):
    import datetime as dt
    from decimal import Decimal

    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def test_a_file_removed_under_the_bes_own_read_is_version_gone(local_be, client):
    """Whichever reads the next split, the BE or a task, a planned file removed under the
    scan gives NOT_FOUND "... is gone ... during the scan", never eos."""
    name = f"gone_{uuid.uuid4().hex[:8]}"
    folder = local_be.warehouse.table_path("demo", name)
    folder.mkdir(parents=True)
    n = 20_000
    for i in range(8):
        pq.write_table(pa.table({"id": list(range(i * n, i * n + n)), "pad": [f"{j:060d}" for j in range(n)]}),
                       folder / f"part-{i}.parquet")
    plan, tablets = plan_for(client, "demo", name, f"select id, pad from demo.{name}")
    reader = Reader(("127.0.0.1", local_be.be_port))
    try:
        cid = reader.open_ok("demo", name, plan, tablets, batch_size=100, mem_limit=1 << 16)
        first = reader.next(cid, 0)
        assert first.status.status_code == OK and not first.eos
        shutil.rmtree(folder)
        offset = pa.ipc.open_stream(first.rows).read_all().num_rows
        while True:
            res = reader.next(cid, offset)
            if res.status.status_code != OK or res.eos:
                break
            offset += pa.ipc.open_stream(res.rows).read_all().num_rows
        assert not res.eos and offset < 8 * n
        assert res.status.status_code == NOT_FOUND, res.status
        assert "is gone" in res.status.error_msgs[0] and "during the scan" in res.status.error_msgs[0]
        reader.close_scanner(cid)
    finally:
        reader.close()
