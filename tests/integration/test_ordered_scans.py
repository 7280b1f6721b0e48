"""Ordered scans (docs/operations.md "Rows in a fixed order"): a scanner asked for its rows in
a fixed order reads its splits with all its readers at once, as any scanner does, and hands
its rows out split after split (provider/result_queue.py). The order must be the one a single
reader gives, whatever the BE's settings, since a resumed scan on another BE skips rows by
their position: a BE with one reader per scanner and BEs with three (in its own read slots,
or on Spark's tasks) give the same rows in the same order, equal to Spark SQL's rows."""

from __future__ import annotations

import shutil
import time
import uuid
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.readers import Reader, plan_for
from support.servers import running_server
from support.waits import wait_until

from starscan.core.protocol_extensions import ORDERED_PROPERTY

FILES, ROWS, ROW_GROUP = 6, 8_000, 1_000


@pytest.fixture
def any_file_size(monkeypatch):
    """The table's files are small: let its scans into the BE's own slots too (a scan of files
    under OWN_READ_MIN_FILE_BYTES on average runs on Spark's tasks)."""
    from starscan.provider import scheduler

    monkeypatch.setattr(scheduler, "OWN_READ_MIN_FILE_BYTES", 0)


@pytest.fixture
def small_splits(monkeypatch):
    """Splits of this table's size, so that how many readers a scanner runs would change
    where its files are cut (an unordered scan's splits are a share of the scan per reader;
    MIN_SPLIT_BYTES keeps them at 16 MiB or more)."""
    from starscan.provider import arrow_engine

    monkeypatch.setattr(arrow_engine, "MIN_SPLIT_BYTES", 1 << 10)


@pytest.fixture(scope="module")
def table(server):
    """``demo.ordered_*``: FILES files of ROWS rows in row groups of ROW_GROUP, ids running on
    from file to file."""
    name = f"ordered_{uuid.uuid4().hex[:8]}"
    folder = server.warehouse.table_path("demo", name)
    folder.mkdir(parents=True)
    for i in range(FILES):
        ids = list(range(i * ROWS, (i + 1) * ROWS))
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "pad": [f"{j:040d}" for j in ids]}),
                       folder / f"part-{i:03d}.parquet", row_group_size=ROW_GROUP)
    yield name
    shutil.rmtree(folder, ignore_errors=True)


def _be(spark, base_settings, **update):
    return running_server(spark, base_settings.model_copy(update={
        "scan_local_reads": True, "http_port": 0, "be_port": 0, "query_port": 0, **update}))


@pytest.fixture(scope="module")
def one_reader_be(spark, base_settings, server):
    with _be(spark, base_settings, scan_tasks_per_scanner=1, scan_local_read_slots=1) as srv:
        yield srv


@pytest.fixture(scope="module", params=[3, 0], ids=["own-read-slots", "spark-tasks"])
def three_reader_be(spark, base_settings, server, request):
    with _be(spark, base_settings, scan_tasks_per_scanner=3, scan_local_read_slots=request.param,
             scan_yield_after_s=0.3) as srv:
        yield srv


def _ordered_ids(be, plan, tablets, table: str, pause_after: int | None = None, before_reading=None,
                 **open_kw) -> tuple[list[int], object]:
    """The ids of an ordered scan read to its end (pausing ``pause_after`` replies in for
    longer than the BE's scan_yield_after_s; calling ``before_reading(scan)`` before the
    first reply), and the scan."""
    reader = Reader(("127.0.0.1", be.be_port))
    try:
        opened = reader.open("demo", table, plan, tablets, batch_size=1000, properties={ORDERED_PROPERTY: "true"},
                             **open_kw)
        assert opened.status.status_code == 0, opened.status
        cid, ids, offset = opened.context_id, [], 0
        if before_reading is not None:
            before_reading(be.contexts.get(cid).scan)
        while True:
            if pause_after is not None and len(ids) >= pause_after * 1000:
                # Away until a reader gave its slot back, then for longer than scan_yield_after_s
                # again: the readers of later splits, waiting for their turn, yield too.
                sink = be.contexts.get(cid).scan.sink
                wait_until(lambda sink=sink: sink.yields > 0, 60, what="a reader to yield while the scan's reader is away")
                time.sleep(1.0)
                pause_after = None
            res = reader.next(cid, offset)
            assert res.status.status_code == 0, res.status
            if res.eos:
                break
            batch = pa.ipc.open_stream(res.rows).read_all()
            ids += batch.column(0).to_pylist()
            offset += batch.num_rows
        scan = be.contexts.get(cid).scan
        assert scan.done.wait(30)
        reader.close_scanner(cid)
        return ids, scan
    finally:
        reader.close()


@pytest.mark.parametrize("where", ["id >= 1500 and id not in (2001, 9000)", "(id + 1) % 7 <> 4"],
                         ids=["arrow-engine", "sql-engine"])
def test_an_ordered_scan_read_by_three_readers_has_the_one_readers_order(any_file_size, small_splits, table,
                                                                        one_reader_be, three_reader_be, client, spark,
                                                                        where):
    plan, tablets = plan_for(client, "demo", table, f"select id, pad from demo.{table} where {where}")
    one, single = _ordered_ids(one_reader_be, plan, tablets, table)
    own_slots = "+" not in where and three_reader_be.settings.scan_local_read_slots > 0

    def more_than_one_reader(scan) -> None:
        """With a queue far smaller than the scan, the first reader cannot read the scan alone
        before rows are taken: wait until a second reader started, or the first gave its slot
        back (then another reader must go on), however late the scan's driver thread runs."""
        wait_until(lambda: scan.own_reader_runs >= 2 or scan.sink is not None and scan.sink.yields > 0, 60,
                   what="a second reader in the BE's own slots, or the first to yield")

    three, scan = _ordered_ids(three_reader_be, plan, tablets, table, **(
        {"before_reading": more_than_one_reader, "mem_limit": 1 << 17} if own_slots else {}))
    assert single.splits == scan.splits > 1    # the same splits, whatever reads them
    assert three == one                        # the same rows in the same order
    assert scan.engine == ("sql" if "+" in where else "arrow")  # the arrow engine has no addition
    if own_slots:
        assert scan.own_reader_runs >= 2       # read by more than one reader
    frame = spark.read.parquet(str(three_reader_be.warehouse.table_path("demo", table)))
    assert Counter(three) == Counter(r["id"] for r in frame.where(where).select("id").collect())
    assert len(three) == len(set(three))


def test_an_ordered_scan_whose_reader_pauses_loses_no_row_and_keeps_its_order(any_file_size, small_splits, table,
                                                                           one_reader_be, three_reader_be, client):
    """The reader away for longer than scan_yield_after_s with a small queue: readers of
    later splits, waiting for their turn, give their slots back too; the scan goes on from
    where each split stopped."""
    plan, tablets = plan_for(client, "demo", table, f"select id, pad from demo.{table}")
    one, _ = _ordered_ids(one_reader_be, plan, tablets, table)
    paused, scan = _ordered_ids(three_reader_be, plan, tablets, table, pause_after=3, mem_limit=1 << 17)
    assert scan.sink.yields > 0
    assert paused == one
    assert sorted(paused) == list(range(FILES * ROWS))
