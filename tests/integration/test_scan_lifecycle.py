"""Scanner lifecycle on the real server: concurrency, close, GC, replay, lost replies,
query_timeout, vanished snapshots and the queue's memory bound.

Waits are bounded polls (``wait_until``); the only fixed waits watch for something that must
NOT happen, and are counted in reaper ticks rather than seconds.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.readers import Reader, arrow_rows, job_states, one_batch, plan_for, spark_rows
from support.waits import wait_until
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport import TMemoryBuffer

from starscan.core.errors import StarscanError
from starscan.core.thrift_defs import wire

OK = wire.TStatusCode.OK
NOT_FOUND = wire.TStatusCode.NOT_FOUND
TIMEOUT = wire.TStatusCode.TIMEOUT
MIB = 1 << 20
# Above one Spark Arrow batch of lineitem (4096 rows, ~0.8 MB) and far below the table
# (~6 MB): the queue fills and production pauses.
SMALL_MEM_LIMIT = 2 * MIB

# Every test here runs on both engines (conftest `engine`).
pytestmark = pytest.mark.usefixtures("engine")


# ---- helpers ------------------------------------------------------------------------------
def lineitem_count(spark, server) -> int:
    return spark.read.parquet(str(server.warehouse.table_path("demo", "lineitem"))).count()


@pytest.fixture(scope="module")
def slow_tail_sql(spark, server) -> str:
    """A lineitem query whose last Spark partition is slow while the first is fast: only the
    rows of the smallest file (which Spark packs into the last partition, as it orders files
    by size) reach a backtracking regex, seconds of work in all. The first batch comes
    quickly and the last partition's job is still RUNNING when the test stops the scan.
    The regex never matches, so no row of that file passes."""
    snap = server.warehouse.snapshot("demo", "lineitem")
    assert len(snap.tablets) >= 2
    smallest = min(snap.tablets, key=lambda t: t.files[0].size)
    lo, hi = spark.read.parquet(str(Path(snap.location) / smallest.files[0].path)).selectExpr(
        "min(l_orderkey)", "max(l_orderkey)").collect()[0]
    return (f"select * from `demo`.`lineitem` where l_orderkey < {lo} or l_orderkey > {hi} "
            "or l_comment regexp '(([a-z]+)+)+!'")


@pytest.fixture
def stoppable_sql(engine, slow_tail_sql, no_yield):
    """A scan whose Spark work still runs after its first batch, on the module's engine: on
    ``sql`` the slow regex tail; on ``auto`` a plain full scan, which the arrow engine reads,
    its tasks held by the scanner's small queue (backpressure). Its tasks do not give their
    slots back while the reader waits (no_yield): what stops them is the test's close or
    reaper, not their own yield."""
    return slow_tail_sql if engine == "sql" else "select * from `demo`.`lineitem`"


def open_with_running_job(client, be_addr, spark, server, sql):
    """Open, read one batch, and return while a Spark job of the scan is RUNNING."""
    plan, tablets = plan_for(client, "demo", "lineitem", sql)
    conn = Reader(be_addr)
    cid = conn.open_ok("demo", "lineitem", plan, tablets, batch_size=100, mem_limit=SMALL_MEM_LIMIT)
    ctx = server.contexts.get(cid)
    first = conn.next(cid, 0)
    assert first.status.status_code == OK and not first.eos, first.status
    assert one_batch(first.rows).num_rows == 100
    running = [j for j, s in job_states(spark, cid).items() if s == "RUNNING"]
    assert running, f"precondition: a job of the scan should still run, got {job_states(spark, cid)}"
    return conn, cid, ctx, running


def assert_scan_stopped(spark, server, cid, ctx, running):
    """The scan's Spark work stopped: no job of it runs any more, no new one starts, and
    its splits were not read to their end (a task told to stop ends normally, its job
    SUCCEEDED; one that did not notice in time was cancelled, its job FAILED)."""
    wait_until(lambda: not any(s == "RUNNING" for s in job_states(spark, cid).values()),
               what="the scan's Spark jobs to stop")
    wait_until(ctx.scan.done.is_set, what="the producer thread to end")
    states = job_states(spark, cid)
    assert set(running) <= set(states)
    sink = ctx.scan.sink
    assert sink is not None and sink.stopped
    assert sink.yields == 0, "a task gave its slot back by itself: the stop was not tested"
    assert not all(split.ended for split in sink.splits), "the scan was read to its end instead of being stopped"
    assert job_states(spark, cid) == states, "a job of the stopped scan started after the stop"
    assert cid not in {c.context_id for c in server.contexts.snapshot()}
    assert ctx.queue.bytes == 0 and ctx.queue.depth == 0
    with pytest.raises(StarscanError):  # stopped: a take fails at once instead of waiting
        ctx.queue.take(10, timeout=5)
    assert ctx.queue.put(pa.record_batch({"x": [1]}), 1) is False


def assert_context_gone(conn, cid):
    res = conn.next(cid, 0)
    assert res.status.status_code == NOT_FOUND
    assert res.status.error_msgs == [f"context_id: {cid} not found"]
    assert not res.eos and not res.rows


# ---- (a) concurrency ----------------------------------------------------------------------
def test_sixteen_concurrent_scanners_each_get_exactly_their_rows(client, be_addr, spark, server):
    li = server.warehouse.snapshot("demo", "lineitem").tablets
    assert len(li) >= 4
    li_ids = [t.tablet_id for t in li]
    t1_ids = [t.tablet_id for t in server.warehouse.snapshot("db1", "t1").tablets]
    sales_ids = [t.tablet_id for t in server.warehouse.snapshot("db1", "sales").tablets]
    li_key_cols = ["l_orderkey", "l_linenumber", "l_shipdate"]
    specs = []  # (db, table, columns, where, tablets or None for the plan's, batch_size)
    for i, tid in enumerate(li_ids[:4]):
        specs.append(("demo", "lineitem", li_key_cols, None, [tid], 777 + 500 * i))
    specs += [
        ("demo", "lineitem", ["l_orderkey", "l_linenumber", "l_quantity", "l_shipmode"],
         "l_quantity > 25 and l_shipmode in ('AIR', 'RAIL')", li_ids[:2], 1000),
        ("demo", "lineitem", ["l_orderkey", "l_linenumber", "l_quantity", "l_shipmode"],
         "l_quantity > 25 and l_shipmode in ('AIR', 'RAIL')", li_ids[2:], 333),
        ("demo", "lineitem", ["l_returnflag", "l_orderkey", "l_linenumber"], "l_returnflag = 'R'", None, 4096),
        ("demo", "lineitem", ["l_orderkey", "l_linenumber", "l_receiptdate"],
         "l_shipdate between '1995-01-01' and '1995-12-31'", li_ids[1:], 2048),
        ("demo", "all_types", ["id", "c_int", "c_date", "c_datetime", "c_decimal128", "c_string"], None, None, 1),
        ("demo", "all_types", ["id", "c_string", "c_double"], "c_int > 0 or c_int is null", None, 2),
        ("db1", "t1", ["k1", "v1", "d", "dt", "m"], None, t1_ids[:1], 1),
        ("db1", "t1", ["k1", "v1", "d", "dt", "m"], None, t1_ids[1:], 5),
        ("db1", "sales", ["id", "amount", "region", "day"], "region = 'eu'", None, 7),
        ("db1", "sales", ["id", "amount", "region", "day"], "amount > 300", sales_ids[: len(sales_ids) // 2], 50),
        ("db1", "sales", ["id", "day"], "day = '2024-01-03'", None, 64),
        ("db1", "sales", ["region", "id"], "id % 7 = 0", sales_ids[len(sales_ids) // 2:], 3),
    ]
    assert len(specs) == 16

    prepared = []
    for db, table, cols, where, tablets, batch_size in specs:
        sql = f"select {', '.join(cols)} from `{db}`.`{table}`" + (f" where {where}" if where else "")
        plan, planned = plan_for(client, db, table, sql)
        if tablets is None:
            # The plan's tablets (maybe pruned); Spark's side reads the whole table.
            use, oracle = planned, [t.tablet_id for t in server.warehouse.snapshot(db, table).tablets]
        else:
            assert set(tablets) <= set(planned), sql
            use = oracle = tablets
        assert use, sql
        prepared.append((db, table, cols, where, use, oracle, batch_size, plan, sql))

    barrier = threading.Barrier(len(prepared))
    results: list = [None] * len(prepared)
    context_ids: list = [None] * len(prepared)
    errors: list = []

    def run(i):
        db, table, cols, where, use, _, batch_size, plan, sql = prepared[i]
        conn = Reader(be_addr)
        try:
            opened = conn.open(db, table, plan, use, batch_size)
            context_ids[i] = opened.context_id
            barrier.wait(timeout=120)  # every scanner is open before any reads
            assert opened.status.status_code == OK, opened.status
            assert [c.name for c in opened.selected_columns] == cols
            batches, offset = conn.drain_batches(opened.context_id)
            assert all(b.num_rows <= batch_size for b in batches)
            assert all(b.schema.names == cols for b in batches)
            assert offset == sum(b.num_rows for b in batches)
            conn.close_scanner(opened.context_id)
            results[i] = arrow_rows(batches)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append((sql, repr(exc)))
            barrier.abort()
        finally:
            conn.close()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(prepared))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a scanner hung"
    assert not errors, errors

    for i, (db, table, cols, where, use, oracle, _batch_size, _plan, sql) in enumerate(prepared):
        want = spark_rows(spark, server, db, table, oracle, cols, where)
        assert sum(want.values()) > 0, f"test data: {sql} should select rows"
        assert results[i] == want, f"scanner {i} ({sql}, tablets {use}) got other rows than Spark"
    # The single-tablet lineitem scanners saw disjoint keys.
    key_sets = [{(r[0], r[1]) for r in results[i]} for i in range(4)]
    for a in range(4):
        for b in range(a + 1, 4):
            assert not key_sets[a] & key_sets[b]
    # Every scanner was closed.
    assert not set(context_ids) & {c.context_id for c in server.contexts.snapshot()}


TURN_FILES, TURN_ROWS = 12, 4000  # ~0.8 MB each in the wire types; a scan packs them in 3-4 splits


@pytest.fixture
def turns_table(server):
    """db1.turns: TURN_FILES files of TURN_ROWS rows, each its own tablet (1 KiB target, for
    this test only: the module's other tests plan with the server's sizing)."""
    location = server.warehouse.table_path("db1", "turns")
    location.mkdir(parents=True, exist_ok=True)
    for f in range(TURN_FILES):
        path = location / f"part-{f:02d}.parquet"
        if not path.exists():
            ids = range(f * TURN_ROWS, (f + 1) * TURN_ROWS)
            pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                                     "pad": pa.array([f"{i:0>190}" for i in ids])}), path)
    saved = server.settings.tablet_target_bytes
    server.ops.update_config({"tablet_target_bytes": 1 << 10})
    server.warehouse.invalidate("db1", "turns")
    yield "db1", "turns"
    server.ops.update_config({"tablet_target_bytes": saved})


def test_a_scanner_opened_while_another_holds_every_slot_gets_rows_before_that_scan_ends(
        client, be_addr, server, turns_table, no_yield, monkeypatch):
    """Spark here has two task slots. Scan A, read at a steady pace, holds both; scanner C,
    opened then, gets its first rows at one of A's split ends while A still has splits to
    read, not when A's tasks have taken them all (A's task hands its slot over, and A
    queues no job while C's waits)."""
    db, table = turns_table
    plan, tablets = plan_for(client, db, table, f"select * from `{db}`.`{table}`")
    assert len(tablets) == TURN_FILES
    a, c = Reader(be_addr), Reader(be_addr)
    a_cid = a.open_ok(db, table, plan, tablets, batch_size=500, mem_limit=MIB)
    a_ctx = server.contexts.get(a_cid)
    stop_reading = threading.Event()
    a_reads = threading.Event()  # cleared while C's job is being queued: no split of A ends meanwhile
    a_reads.set()

    def read_a() -> None:  # ~100 KB every 30 ms: A's splits end a few times a second
        offset = 0
        while not stop_reading.is_set():
            a_reads.wait()
            res = a.next(a_cid, offset)
            assert res.status.status_code == OK, res.status
            if res.eos:
                return
            offset += one_batch(res.rows).num_rows if res.rows else 0
            time.sleep(0.03)

    reader = threading.Thread(target=read_a, daemon=True)
    reader.start()
    try:
        sink = wait_until(lambda: a_ctx.scan.sink, what="A's scan to start")
        # Whether a split of A was left that no task had taken when C's task got a slot (seen
        # at that moment: once C's job waits no more, A's other task may take the last one).
        left_when_started: dict = {}  # another scan's sink -> whether A had a split left then
        scheduler, task_asked = a_ctx.scan.scheduler, a_ctx.scan.scheduler.task_asked

        def watched_task_asked(scan) -> None:
            if scan is not sink:
                left_when_started.setdefault(scan, sink.unclaimed())
            task_asked(scan)

        monkeypatch.setattr(scheduler, "task_asked", watched_task_asked)
        wait_until(lambda: sink.connections() == 2, what="A's two tasks to hold both slots")
        # A's reader pauses until C's job waits for a slot (C's open and its Spark job take a
        # moment; a split of A ending before then would rightly go to A's next split). The
        # tasks do not yield meanwhile (no_yield): only a split's end can free a slot.
        a_reads.clear()
        c_cid = c.open_ok(db, table, plan, tablets[:1], batch_size=500)
        c_ctx = server.contexts.get(c_cid)
        wait_until(lambda: c_ctx.scan.sink is not None and c_ctx.scan.scheduler.waiting_jobs(c_ctx.scan.sink) > 0,
                   interval_s=0.01,
                   what="C's job to wait for a slot")
        a_reads.set()
        wait_until(lambda: c_ctx.queue.rows_in > 0, timeout_s=120, interval_s=0.01, what="C's first rows")
        assert sink.yields == 0
        # A's task handed its slot over at a split's end: a split of A was left that no
        # task had taken (before, C's task started only when A's had none left to take).
        assert left_when_started[c_ctx.scan.sink], f"C's task started only when every split of A was taken: {sink.splits}"
        batches, _ = c.drain_batches(c_cid)
        assert sum(b.num_rows for b in batches) == TURN_ROWS
    finally:
        stop_reading.set()
        reader.join(30)
        a.close_scanner(a_cid)
        a.close()
        c.close()



# ---- (b) close mid-scan ----------------------------------------------------------------
def test_close_mid_scan_cancels_the_spark_job_and_frees_the_queue(client, be_addr, spark, server, engine,
                                                                  stoppable_sql):
    conn, cid, ctx, running = open_with_running_job(client, be_addr, spark, server, stoppable_sql)
    try:
        scan = ctx.scan
        assert scan.engine == ("sql" if engine == "sql" else "arrow")
        res = conn.close_scanner(cid)
        assert res.status.status_code == OK
        assert_scan_stopped(spark, server, cid, ctx, running)
        assert ctx.scan is scan and scan.done.is_set()
        assert_context_gone(conn, cid)
        # close is idempotent.
        assert conn.close_scanner(cid).status.status_code == OK
    finally:
        conn.close()


# ---- (c) GC ------------------------------------------------------------------------------
def test_reaper_reclaims_an_idle_scanner_and_cancels_its_job(client, be_addr, spark, server, engine, stoppable_sql):
    conn, cid, ctx, running = open_with_running_job(client, be_addr, spark, server, stoppable_sql)
    try:
        assert ctx.scan.engine == ("sql" if engine == "sql" else "arrow")
        reaped_before = server.reaper.reaped_total
        ctx.keep_alive_s = 0.2
        wait_until(lambda: cid not in {c.context_id for c in server.contexts.snapshot()}, timeout_s=30,
                   what="the reaper to reclaim the context")
        # The reaper counts a tick's victims after releasing them all: the context is gone first.
        wait_until(lambda: server.reaper.reaped_total > reaped_before, timeout_s=30, what="the reaper to count it")
        assert_scan_stopped(spark, server, cid, ctx, running)
        assert_context_gone(conn, cid)
    finally:
        conn.close()


@pytest.fixture
def abandoned_after_half_a_second(server):
    saved = server.service.settings.abandoned_scan_keep_alive_s
    server.ops.update_config({"abandoned_scan_keep_alive_s": 0.5})
    yield
    server.ops.update_config({"abandoned_scan_keep_alive_s": saved})


def test_a_scanner_its_reader_left_without_closing_is_reaped_soon(client, be_addr, spark, server, engine,
                                                                 stoppable_sql, abandoned_after_half_a_second):
    """A reader that gives up (a Flink reader's timeout) or crashes closes nothing: when its
    connection ends before eos and close_scanner, the scanner goes after
    abandoned_scan_keep_alive_s, not its keep_alive_min (10 minutes here); one whose reader
    comes back on a new connection is kept."""
    conn, cid, ctx, running = open_with_running_job(client, be_addr, spark, server, stoppable_sql)
    assert ctx.keep_alive_s >= 60
    conn.close()  # no close_scanner
    wait_until(lambda: cid not in {c.context_id for c in server.contexts.snapshot()}, timeout_s=30,
               what="the reaper to reclaim the abandoned scanner")
    assert_scan_stopped(spark, server, cid, ctx, running)

    plan, tablets = plan_for(client, "demo", "lineitem", "select l_orderkey from `demo`.`lineitem`")
    first = Reader(be_addr)
    cid = first.open_ok("demo", "lineitem", plan, tablets, batch_size=100)
    ctx = server.contexts.get(cid)
    first.close()
    wait_until(lambda: ctx.abandoned_keep_alive_s is not None, what="the closed connection to mark the scanner")
    back = Reader(be_addr)
    try:
        assert back.next(cid, 0).status.status_code == OK
        assert ctx.abandoned_keep_alive_s is None, "a scanner its reader came back to is still marked abandoned"
        back.close_scanner(cid)
    finally:
        back.close()


def test_reaper_skips_a_context_inside_get_next(client, be_addr, server, monkeypatch):
    ticks = []
    original_tick = server.reaper.tick

    def counting_tick():
        n = original_tick()
        ticks.append(n)
        return n

    monkeypatch.setattr(server.reaper, "tick", counting_tick)
    plan, tablets = plan_for(client, "db1", "t1", "select k1 from `db1`.`t1`")
    conn = Reader(be_addr)
    try:
        cid = conn.open_ok("db1", "t1", plan, tablets, batch_size=10)
        ctx = server.contexts.get(cid)
        entered, gate = threading.Event(), threading.Event()
        real_take = ctx.queue.take_reply

        def held_take(max_rows, timeout=None, **kwargs):
            entered.set()
            assert gate.wait(120)
            return real_take(max_rows, timeout, **kwargs)

        ctx.queue.take_reply = held_take
        reply = {}

        def call():
            c = Reader(be_addr)
            try:
                reply["res"] = c.next(cid, 0)
            finally:
                c.close()

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        assert entered.wait(60)
        ctx.keep_alive_s = 0.2
        start = len(ticks)
        wait_until(lambda: len(ticks) >= start + 3, timeout_s=30, what="three reaper ticks")
        assert cid in {c.context_id for c in server.contexts.snapshot()}, "reaped while inside get_next"
        gate.set()
        caller.join(60)
        assert not caller.is_alive()
        res = reply["res"]
        assert res.status.status_code == OK and not res.eos
        assert one_batch(res.rows).num_rows > 0
        # Idle again after the call: now it goes.
        wait_until(lambda: cid not in {c.context_id for c in server.contexts.snapshot()}, timeout_s=30,
                   what="the reaper to reclaim the context after the call")
        assert_context_gone(conn, cid)
    finally:
        conn.close()


# ---- (d) replay of the previous offset ------------------------------------------------------
def test_repeated_offset_replays_the_same_batch_then_the_scan_continues(client, be_addr, spark, server):
    plan, tablets = plan_for(client, "demo", "lineitem",
                             "select l_orderkey, l_linenumber, l_comment from `demo`.`lineitem`")
    conn = Reader(be_addr)
    try:
        cid = conn.open_ok("demo", "lineitem", plan, tablets, batch_size=1000)
        first = conn.next(cid, 0)
        again = conn.next(cid, 0)
        assert first.status.status_code == OK and again.status.status_code == OK
        assert not first.eos and not again.eos
        assert again.rows == first.rows
        b0 = one_batch(first.rows)
        assert b0.num_rows == 1000
        offset = b0.num_rows
        second = conn.next(cid, offset)
        assert second.status.status_code == OK and not second.eos
        b1 = one_batch(second.rows)
        assert b1.num_rows >= 1
        # Only the previous batch is kept: offset 0 is now a plain mismatch.
        stale = conn.next(cid, 0)
        assert stale.status.status_code == NOT_FOUND
        assert stale.status.error_msgs == [
            f"context_id={cid}, send_offset=0, context_offset={offset + b1.num_rows}"]
        assert conn.next(cid, offset).rows == second.rows   # the previous offset still replays
        offset += b1.num_rows
        rest, end = conn.drain_batches(cid, offset)
        again_end = conn.next(cid, end)
        assert again_end.status.status_code == OK and again_end.eos   # eos again at the end
        conn.close_scanner(cid)
    finally:
        conn.close()
    keys = [k for b in [b0, b1, *rest]
            for k in zip(b.column("l_orderkey").to_pylist(), b.column("l_linenumber").to_pylist())]
    assert len(keys) == len(set(keys)) == lineitem_count(spark, server) == end


# ---- (e) lost reply --------------------------------------------------------------------------
def raw_get_next_request(cid: str, offset: int, seqid: int = 1) -> bytes:
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)  # strict write: versioned header, as the Java clients send
    proto.write_message_begin("get_next", TMessageType.CALL, seqid)
    wire.TStarrocksExternalService.get_next_args(
        params=wire.TScanNextBatchParams(context_id=cid, offset=offset)).write(proto)
    proto.write_message_end()
    return buf.getvalue()


def test_lost_reply_is_answered_again_on_a_new_connection(client, be_addr, spark, server):
    plan, tablets = plan_for(client, "demo", "lineitem", "select l_orderkey, l_linenumber from `demo`.`lineitem`")
    conn = Reader(be_addr)
    cid = conn.open_ok("demo", "lineitem", plan, tablets, batch_size=2500)
    ctx = server.contexts.get(cid)
    conn.close()  # the opening connection is gone too

    raw = socket.create_connection(be_addr, timeout=60)
    try:
        raw.sendall(raw_get_next_request(cid, 0))
        part = b""
        while len(part) < 4:  # the server answered (and advanced) ...
            chunk = raw.recv(4 - len(part))
            assert chunk, "the server closed the connection"
            part += chunk
        assert part == b"\x80\x01\x00\x02"  # versioned REPLY header
    finally:
        raw.close()  # ... but the client never read the reply
    wait_until(lambda: ctx.replies.offset > 0, what="the server to account the lost batch")
    lost_rows = ctx.replies.prev_rows

    conn = Reader(be_addr)
    try:
        retry = conn.next(cid, 0)
        assert retry.status.status_code == OK and not retry.eos
        assert retry.rows == bytes(lost_rows)  # the same reply again (kept as its parts: wire_arrow.IpcStream)
        first = one_batch(retry.rows)
        assert first.num_rows == ctx.replies.offset == 2500
        rest, end = conn.drain_batches(cid, first.num_rows)
        conn.close_scanner(cid)
    finally:
        conn.close()
    keys = [k for b in [first, *rest] for k in zip(b.column(0).to_pylist(), b.column(1).to_pylist())]
    assert len(keys) == len(set(keys)) == lineitem_count(spark, server) == end


# ---- (f) query_timeout ---------------------------------------------------------------------
def test_query_timeout_fails_the_scan_with_timeout_never_eos(client, be_addr, server):
    plan, tablets = plan_for(client, "demo", "lineitem", "select * from `demo`.`lineitem`")
    conn = Reader(be_addr)
    try:
        cid = conn.open_ok("demo", "lineitem", plan, tablets, batch_size=100, query_timeout=1,
                           mem_limit=SMALL_MEM_LIMIT)
        ctx = server.contexts.get(cid)
        wait_until(lambda: ctx.scan.done.is_set() and ctx.queue.depth == 0, timeout_s=60,
                   what="the scan to be stopped by query_timeout")
        for _ in range(2):
            res = conn.next(cid, 0)
            assert res.status.status_code == TIMEOUT, res.status
            assert len(res.status.error_msgs) == 1 and "query_timeout" in res.status.error_msgs[0]
            assert not res.eos and not res.rows
        assert conn.close_scanner(cid).status.status_code == OK
    finally:
        conn.close()


# ---- (g) the planned snapshot is gone ------------------------------------------------------
def test_open_fails_clearly_when_a_planned_file_was_deleted(client, be_addr, spark, server):
    name = f"gone_{uuid.uuid4().hex[:8]}"
    path = server.warehouse.table_path("scratch", name)
    spark.range(0, 10).selectExpr("cast(id as int) id").coalesce(1).write.parquet(str(path))
    spark.range(10, 25).selectExpr("cast(id as int) id").coalesce(1).write.mode("append").parquet(str(path))
    server.warehouse.invalidate("scratch", name)
    snap = server.warehouse.snapshot("scratch", name)
    assert len(snap.tablets) == 2
    plan, tablets = plan_for(client, "scratch", name, f"select id from `scratch`.`{name}`")
    victim = snap.tablets[0]
    os.remove(Path(snap.location) / victim.files[0].path)
    survivor = [t for t in tablets if t != victim.tablet_id]

    conn = Reader(be_addr)
    try:
        opened = conn.open("scratch", name, plan, tablets, batch_size=100)
        assert opened.status.status_code == NOT_FOUND
        [msg] = opened.status.error_msgs
        assert "is gone" in msg and victim.files[0].path in msg and f"scratch.{name}" in msg, msg
        assert opened.context_id and opened.selected_columns == []
        # A later get_next on the failed context tells the same, never eos.
        res = conn.next(opened.context_id, 0)
        assert res.status.status_code == NOT_FOUND and "is gone" in res.status.error_msgs[0]
        assert not res.eos
        conn.close_scanner(opened.context_id)

        # The untouched tablet of the same plan still reads, and so does a fresh plan.
        cid = conn.open_ok("scratch", name, plan, survivor, batch_size=100)
        batches, _ = conn.drain_batches(cid)
        conn.close_scanner(cid)
        fresh_plan, fresh_tablets = plan_for(client, "scratch", name, f"select id from `scratch`.`{name}`")
        cid = conn.open_ok("scratch", name, fresh_plan, fresh_tablets, batch_size=100)
        fresh, _ = conn.drain_batches(cid)
        conn.close_scanner(cid)
    finally:
        conn.close()
    remaining = sorted(v for b in batches for v in b.column(0).to_pylist())
    assert remaining == sorted(v for b in fresh for v in b.column(0).to_pylist())
    assert remaining in (list(range(10)), list(range(10, 25)))
    # Other tables are served as before.
    assert client.read("db1", "t1", "select k1 from `db1`.`t1`", batch_size=10).num_rows == 3


# ---- (h) the queue's memory bound ----------------------------------------------------------
def test_queue_bytes_stay_within_the_limit_with_a_slow_reader(client, be_addr, spark, server):
    plan, tablets = plan_for(client, "demo", "lineitem", "select * from `demo`.`lineitem`")
    conn = Reader(be_addr)
    try:
        cid = conn.open_ok("demo", "lineitem", plan, tablets, batch_size=4096, mem_limit=SMALL_MEM_LIMIT)
        ctx = server.contexts.get(cid)
        queue = ctx.queue
        assert queue.max_bytes == SMALL_MEM_LIMIT

        def biggest() -> int:
            return queue.largest_batch

        def full_or_done() -> bool:
            # A put waits only while bytes + its size > limit: wait until the producer is
            # (at most one batch away from) blocked, or has finished.
            return ctx.scan.done.is_set() or (queue.depth > 0 and queue.bytes > queue.max_bytes - biggest())

        offset, rows, fills = 0, 0, 0
        while True:
            wait_until(full_or_done, what="the producer to fill the queue")
            if not ctx.scan.done.is_set():
                fills += 1
            res = conn.next(cid, offset)
            assert res.status.status_code == OK, res.status
            if res.eos:
                break
            n = one_batch(res.rows).num_rows
            offset += n
            rows += n
        conn.close_scanner(cid)
    finally:
        conn.close()
    assert rows == lineitem_count(spark, server) == queue.rows_in
    assert fills >= 2, "the reader never found the queue full"
    assert queue.peak_bytes <= SMALL_MEM_LIMIT + queue.largest_batch
    assert queue.peak_bytes > SMALL_MEM_LIMIT - queue.largest_batch  # it did fill up to the limit
