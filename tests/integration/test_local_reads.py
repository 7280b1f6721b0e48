"""The BE's own reads: an arrow-engine scan's splits read in the BE's process, before its
first Spark task connects (``scan_local_reads``) and by readers in the BE's own read slots
(``scan_local_read_slots``), both on by default. The same rows as Spark SQL, the same
errors as a task's, yields and closes that lose no row and no slot (the suite's shared
server reads on Spark's tasks only)."""

from __future__ import annotations

import shutil
import uuid
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.readers import NOT_FOUND, OK, Reader, plan_for
from support.servers import running_server
from support.waits import wait_until

QUERIES = [
    "select l_orderkey, l_partkey, l_comment from demo.lineitem",
    "select l_orderkey, l_shipdate, l_extendedprice from demo.lineitem where l_quantity > 30 and l_shipmode = 'AIR'",
    "select l_orderkey, l_discount from demo.lineitem where l_linenumber in (1, 3) or l_orderkey < 500",
]


@pytest.fixture
def any_file_size(monkeypatch):
    """The suite's tables are of small files: let their scans into the BE's own slots too (a
    scan of files under OWN_READ_MIN_FILE_BYTES on average runs on Spark's tasks)."""
    from starscan.provider import scheduler

    monkeypatch.setattr(scheduler, "OWN_READ_MIN_FILE_BYTES", 0)


@pytest.fixture(scope="module")
def own_be(spark, base_settings, server):
    """A BE with two read slots of its own; a reader that stops reading yields after 0.3 s."""
    settings = base_settings.model_copy(update={"scan_local_reads": True, "scan_local_read_slots": 2,
                                                "scan_yield_after_s": 0.3, "http_port": 0, "be_port": 0,
                                                "query_port": 0})
    with running_server(spark, settings) as srv:
        yield srv


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


def _spark_rows(spark, srv, sql: str) -> Counter:
    view = f"lineitem_own_{uuid.uuid4().hex[:6]}"
    spark.read.parquet(str(srv.warehouse.table_path("demo", "lineitem"))).createOrReplaceTempView(view)
    return Counter(tuple(_wire(v) for v in r) for r in spark.sql(sql.replace("demo.lineitem", view)).collect())


def _rows(batches) -> Counter:
    got: Counter = Counter()
    for batch in batches:
        got.update(zip(*(batch.column(i).to_pylist() for i in range(batch.num_columns))))
    return got


def _splits_read(srv) -> tuple[float, float]:
    """starscan_splits_read from /metrics: (read by the BE itself, by Spark's tasks)."""
    from support.readers import scrape, value

    samples = scrape(f"http://127.0.0.1:{srv.http_port}")
    return tuple(value(samples, "starscan_splits_read_total", reader=r) for r in ("be", "spark"))


def _settled(srv, cid: str):
    """The scan of ``cid`` once its producer has ended, and the BE's slot scheduler."""
    scan = srv.contexts.get(cid).scan
    assert scan.done.wait(30)
    return scan, srv.service.push_listener().scheduler


@pytest.mark.parametrize("sql", QUERIES)
def test_a_scan_in_the_bes_own_slots_gives_spark_sqls_rows_without_a_task(any_file_size, own_be, client, spark, sql):
    plan, tablets = plan_for(client, "demo", "lineitem", sql)
    listener = own_be.service.push_listener()
    connections = dict(listener.accepted)
    before = _splits_read(own_be)
    reader = Reader(("127.0.0.1", own_be.be_port))
    try:
        cid = reader.open_ok("demo", "lineitem", plan, tablets, batch_size=2048)
        batches, _ = reader.drain_batches(cid)
        scan, scheduler = _settled(own_be, cid)
        assert scan.engine == "arrow" and scan.splits > 1 and scan.own_reader_runs >= 1
        assert scan.local_splits == scan.splits  # every split read in the BE's process
        assert listener.accepted == connections  # and no Spark task pushed a row
        assert scheduler.own_slots_taken == 0
        # the rows the BE's readers took from the files: at least those sent, at most the table's
        table_rows = spark.read.parquet(str(own_be.warehouse.table_path("demo", "lineitem"))).count()
        assert sum(b.num_rows for b in batches) <= scan.rows_read <= table_rows
        if " where " not in sql:
            assert scan.rows_read == table_rows
        reader.close_scanner(cid)
    finally:
        reader.close()
    wait_until(lambda: _splits_read(own_be) == (before[0] + scan.splits, before[1]), 10,
               what="starscan_splits_read to count the scan's splits as the BE's")
    assert Counter({tuple(_wire(v) for v in k): n for k, n in _rows(batches).items()}) == _spark_rows(spark, own_be, sql)


def test_a_reader_that_stops_reading_yields_its_own_slot_and_loses_no_row(any_file_size, own_be, client, spark):
    """The queue full and the reader away for longer than scan_yield_after_s: the BE's reader
    gives its slot back; the scan goes on from where its split stopped when the reader reads
    again, with no row lost or repeated."""

    sql = QUERIES[0]
    plan, tablets = plan_for(client, "demo", "lineitem", sql)
    reader = Reader(("127.0.0.1", own_be.be_port))
    scheduler = own_be.service.push_listener().scheduler
    try:
        cid = reader.open_ok("demo", "lineitem", plan, tablets, batch_size=256, mem_limit=1 << 16)
        first = reader.next_batch(cid, 0)
        scan = own_be.contexts.get(cid).scan
        # the slot is free while the reader is away
        wait_until(lambda: scan.sink.yields and scheduler.own_slots_taken == 0, 10,
                   what="the reader's own slot to be given back while it is away")
        rest, _ = reader.drain_batches(cid, first.num_rows)
        scan, scheduler = _settled(own_be, cid)
        assert scan.local_splits == scan.splits and scheduler.own_slots_taken == 0
        reader.close_scanner(cid)
    finally:
        reader.close()
    got = Counter({tuple(_wire(v) for v in k): n for k, n in _rows([first, *rest]).items()})
    assert got == _spark_rows(spark, own_be, sql)


@pytest.fixture(scope="module")
def one_slot_be(spark, base_settings, server):
    """One read slot of the BE's own, and no reads before a scan's Spark tasks connect."""
    settings = base_settings.model_copy(update={"scan_local_reads": False, "scan_local_read_slots": 1,
                                                "http_port": 0, "be_port": 0, "query_port": 0})
    with running_server(spark, settings) as srv:
        yield srv


def test_a_scan_finding_the_bes_slots_taken_runs_on_sparks_tasks(any_file_size, one_slot_be, client, spark):
    sql = QUERIES[1]
    plan, tablets = plan_for(client, "demo", "lineitem", sql)
    listener = one_slot_be.service.push_listener()
    scheduler = listener.scheduler
    assert scheduler.take_own_slot() and not scheduler.take_own_slot()  # as if another scan's reader held it
    connections = sum(listener.accepted.values())
    before = _splits_read(one_slot_be)
    reader = Reader(("127.0.0.1", one_slot_be.be_port))
    try:
        cid = reader.open_ok("demo", "lineitem", plan, tablets, batch_size=2048)
        batches, _ = reader.drain_batches(cid)
        scan, _ = _settled(one_slot_be, cid)
        assert scan.local_splits == 0 and sum(listener.accepted.values()) > connections  # Spark's tasks read it
        reader.close_scanner(cid)
    finally:
        reader.close()
        scheduler.give_own_slot()
    wait_until(lambda: _splits_read(one_slot_be) == (before[0], before[1] + scan.splits), 10,
               what="starscan_splits_read to count the scan's splits as Spark's")
    assert scheduler.own_slots_taken == 0
    assert Counter({tuple(_wire(v) for v in k): n for k, n in _rows(batches).items()}) == _spark_rows(spark, one_slot_be, sql)


def test_closing_a_scan_mid_read_gives_its_own_slots_back(any_file_size, own_be, client):
    plan, tablets = plan_for(client, "demo", "lineitem", QUERIES[0])
    reader = Reader(("127.0.0.1", own_be.be_port))
    try:
        cid = reader.open_ok("demo", "lineitem", plan, tablets, batch_size=256, mem_limit=1 << 16)
        reader.next_batch(cid, 0)
        scan = own_be.contexts.get(cid).scan
        reader.close_scanner(cid)
        assert scan.done.wait(30)
        assert not scan.sink.all_ended()  # closed before its end
    finally:
        reader.close()
    assert own_be.service.push_listener().scheduler.own_slots_taken == 0


def test_a_scan_of_small_files_runs_on_sparks_tasks_whatever_slots_are_free(own_be, client, spark):
    """Files under OWN_READ_MIN_FILE_BYTES on average: a reader's time is Python around each
    file, under the BE's one interpreter lock, so the scan's readers are Spark tasks (the BE
    still reads its first split while none has connected)."""
    from starscan.provider import scheduler

    name = f"small_{uuid.uuid4().hex[:8]}"
    folder = own_be.warehouse.table_path("demo", name)
    folder.mkdir(parents=True)
    for i in range(40):
        pq.write_table(pa.table({"id": list(range(i * 100, i * 100 + 100))}), folder / f"part-{i:02d}.parquet")
    assert sum(f.stat().st_size for f in folder.iterdir()) < 40 * scheduler.OWN_READ_MIN_FILE_BYTES
    plan, tablets = plan_for(client, "demo", name, f"select id from demo.{name}")
    reader = Reader(("127.0.0.1", own_be.be_port))
    try:
        cid = reader.open_ok("demo", name, plan, tablets, batch_size=64, mem_limit=1 << 16)
        batches, _ = reader.drain_batches(cid)
        scan, scheduler = _settled(own_be, cid)
        assert scan.own_reader_runs == 0 and scheduler.own_slots_taken == 0  # no reader in the BE's slots
        reader.close_scanner(cid)
    finally:
        reader.close()
    assert sorted(v for b in batches for v in b.column(0).to_pylist()) == list(range(4000))


# ---- the page cache ---------------------------------------------------------------------------
# Row groups the BE's page cache answered during the repeated random queries below.
PAGE_CACHE: dict[str, int] = {"hits": 0, "queries": 0}


@pytest.fixture(scope="module")
def own_be_tables(spark, own_be):
    from support.random_queries import TableInfo

    from starscan.client import StarscanClient

    reader = StarscanClient(f"http://127.0.0.1:{own_be.http_port}", "root", "")
    return reader, [TableInfo(spark, own_be, "demo", "all_types", None), TableInfo(spark, own_be, "demo", "lineitem", 0.01)]


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=5, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_page_cache_answers_of_random_queries_match_spark(any_file_size, own_be, own_be_tables, spark, data):
    """The BE's page cache (starscan.arrow.chunk_cache: decoded column chunks of the files its
    own readers read, on by default): each random query runs twice, the second time from the
    chunks the first kept (the suite's tables are settled by now), and both give Spark SQL's
    rows, in random projections, predicates and batch sizes."""
    from support.random_queries import arrow_counts, columns_strategy, differ, predicate, run_both

    reader, tables = own_be_tables
    info = data.draw(st.sampled_from(tables), label="table")
    columns = data.draw(columns_strategy(info.columns), label="columns")
    where = data.draw(predicate(info.scalar, info.samples, info.zone), label="where")
    batch_size = data.draw(st.integers(100, 8192), label="batch_size")  # (tiny batches: the other properties)
    template = info.sql(columns, where)
    got, want, sql = run_both(spark, reader, info, template, batch_size)
    assert differ(want, got) is None, (sql, batch_size)
    hits = own_be.service.chunk_cache.hits
    again = list(reader.batches(info.db, info.table, sql, batch_size=batch_size))  # Spark's answer is the same
    got = arrow_counts(again, [f.type for f in again[0].schema]) if again else Counter()
    assert differ(want, got) is None, (sql, batch_size)
    PAGE_CACHE["hits"] += own_be.service.chunk_cache.hits - hits
    PAGE_CACHE["queries"] += 1


def test_the_page_cache_answered_the_repeated_queries(own_be):
    """(After the property above.) Its second runs read row groups from memory, and
    /metrics says so."""
    from support.readers import scrape, value

    assert PAGE_CACHE["queries"] and PAGE_CACHE["hits"] > 0, PAGE_CACHE
    samples = scrape(f"http://127.0.0.1:{own_be.http_port}")
    assert value(samples, "starscan_page_cache_hits_total") >= PAGE_CACHE["hits"]
    assert value(samples, "starscan_page_cache_bytes") == own_be.service.chunk_cache.nbytes > 0
    assert value(samples, "starscan_page_cache_max_bytes") == own_be.settings.page_cache_bytes > 0


def test_the_page_cache_is_turned_off_and_on_at_run_time(any_file_size, own_be, client, spark):
    import httpx

    url, cache = f"http://127.0.0.1:{own_be.http_port}/api/update_config", own_be.service.chunk_cache
    before = cache.max_bytes
    try:
        assert httpx.post(url, params={"page_cache_max_bytes": "0"}, auth=("root", ""), timeout=30).status_code == 200
        assert not cache.enabled and len(cache) == 0
        sql = QUERIES[0]
        plan, tablets = plan_for(client, "demo", "lineitem", sql)
        reader = Reader(("127.0.0.1", own_be.be_port))
        try:
            cid = reader.open_ok("demo", "lineitem", plan, tablets, batch_size=2048)
            batches, _ = reader.drain_batches(cid)
            scan, _ = _settled(own_be, cid)
            assert scan.local_splits == scan.splits > 0
            reader.close_scanner(cid)
        finally:
            reader.close()
        assert Counter({tuple(_wire(v) for v in k): n for k, n in _rows(batches).items()}) == \
            _spark_rows(spark, own_be, sql)
        assert len(cache) == 0  # read from the files, nothing kept
    finally:
        httpx.post(url, params={"page_cache_max_bytes": str(before)}, auth=("root", ""), timeout=30)
    assert cache.max_bytes == before
