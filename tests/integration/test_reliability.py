"""Reliability under faults and load (issue 5), each fault injected for real: a TCP proxy that
drops connections (tests/support/proxies.py), killed client processes, files deleted under a running
Spark job, tasks that throw, server restarts, slow and concurrent readers, SIGTERM.

Most tests run on ``rel_server``: a second StarscanServer on the session's SparkSession and
warehouse, with a reaper tick of 0.5 s and 4 MiB queues. Keep-alive is set per context to
seconds (the protocol's unit is minutes). Waits are bounded polls; fixed waits only watch
for something that must NOT happen.
"""

from __future__ import annotations

import gc
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import weakref
from collections import Counter
from pathlib import Path

import psutil
import pyarrow as pa
import pytest
from support.holders import holders
from support.proxies import FaultProxy
from support.readers import Reader, arrow_rows, job_states, one_batch, plan_for, runtime_settings, spark_rows
from support.servers import start_serve
from support.waits import wait_until
from thriftpy2.transport import TTransportException

from starscan.client import ScanIntegrityError, ScanStats, ServerError, StarscanClient
from starscan.core.protocol_extensions import EOS_ROWS_PREFIX, EOS_ROWS_PROPERTY
from starscan.core.thrift_defs import wire

OK = wire.TStatusCode.OK
NOT_FOUND = wire.TStatusCode.NOT_FOUND
CANCELLED = wire.TStatusCode.CANCELLED
INTERNAL_ERROR = wire.TStatusCode.INTERNAL_ERROR
MIB = 1 << 20
QUEUE_MAX = 4 * MIB
# Queues of about one Spark batch (4096 rows): the producer blocks after each batch, so Spark
# has computed at most two partitions ahead of the reader (a bigger batch would be refused).
ONE_BATCH_ALL_COLUMNS = MIB           # lineitem, all 16 columns: ~0.8 MB a batch
ONE_BATCH_THREE_COLUMNS = 256 << 10   # lineitem key + comment: ~0.2 MB a batch
REPO = Path(__file__).resolve().parents[2]
TRANSPORT_ERRORS = (TTransportException, OSError, EOFError)


# ---- fixtures and helpers ------------------------------------------------------------------
def _settings_for(base_settings, **update):
    """base_settings with ``update``; limit keys are applied only where this build has them."""
    from starscan.settings.config import Settings

    limits = dict(max_scanners=100_000, max_scanners_per_user=100_000, plan_rate_per_user=0,
                  total_queue_max_bytes=64 << 30, query_port=0)
    update.update({k: v for k, v in limits.items() if k in Settings.model_fields})
    return base_settings.model_copy(update=update)


@pytest.fixture(scope="module")
def rel_server(server, spark, base_settings):
    from starscan.app.server import StarscanServer

    srv = StarscanServer(_settings_for(base_settings, scan_context_gc_interval_s=0.5, queue_max_bytes=QUEUE_MAX),
                         spark).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def rel_client(rel_server):
    return StarscanClient(f"127.0.0.1:{rel_server.http_port}", "root", "")


@pytest.fixture(scope="module")
def rel_be(rel_server):
    return "127.0.0.1", rel_server.be_port


def ids(server) -> set[str]:
    return {c.context_id for c in server.contexts.snapshot()}


def running_jobs(spark, group: str) -> list[int]:
    return [j for j, s in job_states(spark, group).items() if s == "RUNNING"]


def write_scratch(spark, server, name: str, df, files: int) -> None:
    df.repartition(files).write.mode("overwrite").parquet(str(server.warehouse.table_path("rel", name)))
    server.warehouse.invalidate("rel", name)


def lineitem_df(spark, server):
    return spark.read.parquet(str(server.warehouse.table_path("demo", "lineitem")))


def snapshot_rows(spark, server, db, table, columns, where=None) -> Counter:
    tablets = [t.tablet_id for t in server.warehouse.snapshot(db, table).tablets]
    return spark_rows(spark, server, db, table, tablets, columns, where)


def read_rows(client: StarscanClient, db, table, sql, batch_size=4096, stats=None, **kw) -> Counter:
    return arrow_rows(client.batches(db, table, sql, batch_size, stats=stats, **kw))


def assert_no_scan_left(spark, server, cids, what="scanners"):
    """Every one of ``cids`` is gone from the server and none of their Spark jobs runs."""
    wait_until(lambda: not (set(cids) & ids(server)), timeout_s=120, what=f"the {what} to be reclaimed")
    wait_until(lambda: not any(running_jobs(spark, c) for c in cids), timeout_s=120,
               what=f"the Spark jobs of the {what} to stop")


def scan_threads() -> list[threading.Thread]:
    """Live threads of scans: SparkScan names its producer scan-<8 hex digits of the context
    id>, and its BE-side reader and job threads after it (-local, -job_<n>)."""
    return [t for t in threading.enumerate() if re.fullmatch(r"scan-[0-9a-f]{8}(-local|-job_\d+)?", t.name)]


# ---- 1. lost reply ------------------------------------------------------------------------
def test_1_lost_replies_are_answered_again_and_every_row_arrives_once(rel_server, rel_client, rel_be, spark):
    cols = ["l_orderkey", "l_linenumber", "l_partkey", "l_shipdate"]
    sql = f"select {', '.join(cols)} from `demo`.`lineitem`"
    plan, tablets = plan_for(rel_client, "demo", "lineitem", sql)
    proxy = FaultProxy(rel_be)
    conn = Reader(("127.0.0.1", proxy.port))
    try:
        cid = conn.open_ok("demo", "lineitem", plan, tablets, batch_size=1000,
                           properties={EOS_ROWS_PROPERTY: "true"})
        ctx = rel_server.contexts.get(cid)
        batches, offset, n, drops = [], 0, 0, 0
        while True:
            n += 1
            if n in (1, 3, 17):  # the first reply, one in the middle, one near the end (30 batches)
                proxy.cut_next_reply()
                with pytest.raises(TRANSPORT_ERRORS):
                    conn.next(cid, offset)
                conn.close()
                drops += 1
                # The server sent its reply and moved on; the reader got nothing.
                wait_until(lambda sent_to=offset: ctx.replies.offset > sent_to, what="the server to account the lost batch")
                sent = ctx.replies.prev_rows
                conn = Reader(("127.0.0.1", proxy.port))
                res = conn.next(cid, offset)  # the reader reconnects and repeats its offset
                assert res.status.status_code == OK and not res.eos
                assert res.rows == bytes(sent), "the repeated offset must get the identical batch"
            else:
                res = conn.next(cid, offset)
                assert res.status.status_code == OK, res.status
            if res.eos:
                break
            batch = one_batch(res.rows)
            batches.append(batch)
            offset += batch.num_rows
        assert n > 17, "test data: the scan should have more than 17 batches"
        # The eos reply itself lost: asked again, eos again, with the same row count.
        proxy.cut_next_reply()
        with pytest.raises(TRANSPORT_ERRORS):
            conn.next(cid, offset)
        conn.close()
        conn = Reader(("127.0.0.1", proxy.port))
        end = conn.next(cid, offset)
        assert end.status.status_code == OK and end.eos and not end.rows
        assert end.status.error_msgs == [f"{EOS_ROWS_PREFIX}{offset}"]
        conn.close_scanner(cid)
    finally:
        conn.close()
        proxy.close()
    assert drops == 3 and proxy.cuts == 4
    assert arrow_rows(batches) == snapshot_rows(spark, rel_server, "demo", "lineitem", cols)


def test_1_the_client_library_reconnects_through_random_drops(rel_server, rel_be, spark):
    """StarscanClient through a proxy that cuts 15 % of the BE's writes, anywhere in a reply."""
    proxy = FaultProxy(rel_be, cut_probability=0.15, seed=7)
    client = StarscanClient(f"127.0.0.1:{rel_server.http_port}", "root", "", retries=50,
                            be_host_mapping={f"127.0.0.1:{rel_server.be_port}": proxy.address})
    before = ids(rel_server)
    try:
        cols = ["l_orderkey", "l_linenumber", "l_comment"]
        stats = ScanStats()
        got = read_rows(client, "demo", "lineitem", f"select {', '.join(cols)} from `demo`.`lineitem`",
                        batch_size=1000, stats=stats)
    finally:
        proxy.close()
    assert proxy.cuts > 0 and stats.retries > 0
    assert got == snapshot_rows(spark, rel_server, "demo", "lineitem", cols)
    assert stats.verified == stats.scanners >= 1
    # A cut open_scanner reply leaves a context the client never saw: the reaper takes it.
    orphans = ids(rel_server) - before
    for ctx in rel_server.contexts.snapshot():
        if ctx.context_id in orphans:
            ctx.keep_alive_s = 0.5
    assert_no_scan_left(spark, rel_server, orphans, "orphaned contexts")


# ---- 2. abandoned scanners -----------------------------------------------------------------
def test_2_two_hundred_abandoned_scanners_are_all_reclaimed(rel_server, rel_client, rel_be, spark):
    li = [t.tablet_id for t in rel_server.warehouse.snapshot("demo", "lineitem").tablets]
    small = [plan_for(rel_client, "db1", "t1", "select k1, v1 from `db1`.`t1`"),
             plan_for(rel_client, "db1", "sales", "select id, amount from `db1`.`sales` where region = 'eu'")]
    big_plan, _ = plan_for(rel_client, "demo", "lineitem", "select * from `demo`.`lineitem`")
    gc.collect()
    arrow_before = pa.total_allocated_bytes()
    threads_before = len(scan_threads())
    refs: list[weakref.ref] = []
    cids: list[str] = []
    errors: list = []
    lock = threading.Lock()

    def opener(worker: int):
        conn = Reader(rel_be)
        try:
            for i in range(25):
                k = worker * 25 + i
                if k % 8 == 0:  # a big scan that fills its queue, one batch read: production paused
                    cid = conn.open_ok("demo", "lineitem", big_plan, [li[k % len(li)]], batch_size=100,
                                       mem_limit=MIB)
                    res = conn.next(cid, 0)
                    assert res.status.status_code == OK and not res.eos, res.status
                else:
                    plan, tablets = small[k % 2]
                    cid = conn.open_ok("db1", "t1" if k % 2 == 0 else "sales", plan, tablets, batch_size=2)
                ctx = rel_server.contexts.get(cid)
                ctx.keep_alive_s = 1.0
                with lock:
                    cids.append(cid)
                    refs.extend(weakref.ref(o) for o in (ctx, ctx.queue, ctx.scan))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))
        finally:
            conn.close()  # left without close_scanner

    # The big scans' first batches wait for Spark slots, which paused scans give back after
    # scan_yield_after_s (2 s by default: 19 s of opening here, 8 s at 0.5 s).
    with runtime_settings(rel_server, scan_yield_after_s=0.5):
        workers = [threading.Thread(target=opener, args=(w,), daemon=True) for w in range(8)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(300)
    assert not errors, errors
    assert len(cids) == 200 and len(set(cids)) == 200

    assert_no_scan_left(spark, rel_server, cids, "200 abandoned scanners")
    wait_until(lambda: len(scan_threads()) <= threads_before, timeout_s=120, what="the producer threads to end")
    conn = Reader(rel_be)
    try:
        for cid in cids[::20]:
            res = conn.next(cid, 0)
            assert res.status.status_code == NOT_FOUND and res.status.error_msgs == [f"context_id: {cid} not found"]
    finally:
        conn.close()

    def freed():
        gc.collect()
        return not any(r() is not None for r in refs)

    try:
        wait_until(freed, timeout_s=60, interval_s=0.5, what="contexts, queues and scans to be garbage")
    except AssertionError as exc:
        alive = [o for r in refs if (o := r()) is not None]
        held = "\n".join(f"{holders(o, depth=6)}" for o in alive[:3])
        threads = ", ".join(sorted(t.name for t in threading.enumerate()))
        raise AssertionError(f"{exc}: {len(alive)} left; what holds them:\n{held}\nthreads: {threads}") from None
    gc.collect()
    assert pa.total_allocated_bytes() <= arrow_before + MIB, "Arrow memory did not return to its baseline"


# ---- 3. client killed mid-scan -------------------------------------------------------------
KILLED_CLIENT = r"""
import sys
from starscan.client import thrift_client
from starscan.core.thrift_defs import wire
host, port, plan, tablets = sys.argv[1], int(sys.argv[2]), sys.argv[3], [int(t) for t in sys.argv[4].split(",")]
c = thrift_client(host, port)
o = c.open_scanner(wire.TScanOpenParams(cluster="default_cluster", database="demo", table="lineitem",
    tablet_ids=tablets, opaqued_query_plan=plan, batch_size=100, user="root", passwd="", mem_limit=1 << 20))
assert o.status.status_code == 0, o.status
r = c.get_next(wire.TScanNextBatchParams(context_id=o.context_id, offset=0))
assert r.status.status_code == 0 and not r.eos
print(o.context_id, flush=True)
sys.stdin.read()  # wait to be killed
"""


def test_3_a_killed_client_is_reclaimed_and_other_scanners_are_unaffected(rel_server, rel_client, rel_be, spark):
    sql = "select * from `demo`.`lineitem`"
    plan, tablets = plan_for(rel_client, "demo", "lineitem", sql)
    # A reader whose connection ends before eos and close is kept this long from its last
    # call, not its keep-alive (60 s by default; seconds here).
    with runtime_settings(rel_server, abandoned_scan_keep_alive_s=1.0):
        env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
        proc = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, *map(str, rel_be), plan,
                                 ",".join(map(str, tablets))],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            line = proc.stdout.readline().strip()
            assert line, proc.stderr.read()
            cid = line
            ctx = rel_server.contexts.get(cid)
            assert ctx.replies.offset == 100 and not ctx.scan.done.is_set()
            # Another reader is mid-scan when the client dies.
            other_cols = ["l_orderkey", "l_linenumber", "l_quantity"]
            other = rel_client.batches("demo", "lineitem", f"select {', '.join(other_cols)} from `demo`.`lineitem`",
                                       batch_size=500)
            got = [next(other)]
            proc.kill()  # SIGKILL: the kernel resets its socket
            assert proc.wait(30) == -signal.SIGKILL
            got.extend(other)
            # Its keep-alive (minutes) is not what reclaims it: its connection's end is.
            assert ctx.keep_alive_s >= 60
            assert_no_scan_left(spark, rel_server, [cid], "killed client's scanner")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    assert arrow_rows(got) == snapshot_rows(spark, rel_server, "demo", "lineitem", other_cols)
    wait_until(ctx.scan.done.is_set, what="the killed client's producer to end")
    assert ctx.queue.bytes == 0 and ctx.queue.depth == 0


# ---- 4. Spark fails mid-scan ---------------------------------------------------------------
def drain_until_error(conn, cid, offset=0):
    """get_next until a non-OK status; eos is a test failure. Returns (rows, status)."""
    rows = 0
    while True:
        res = conn.next(cid, offset)
        if res.status.status_code != OK:
            assert not res.eos and not res.rows
            return rows, res.status
        assert not res.eos, f"eos after {rows} rows of a scan whose Spark job failed"
        n = one_batch(res.rows).num_rows
        rows += n
        offset += n


def test_4_files_deleted_under_a_running_scan_give_an_error_never_eos(rel_server, rel_client, rel_be, spark):
    name = f"del_{uuid.uuid4().hex[:8]}"
    write_scratch(spark, rel_server, name, lineitem_df(spark, rel_server), files=16)
    total = spark.read.parquet(str(rel_server.warehouse.table_path("rel", name))).count()
    plan, tablets = plan_for(rel_client, "rel", name, f"select * from `rel`.`{name}`")
    conn = Reader(rel_be)
    try:
        # A queue of one Spark batch: Spark has computed at most two of its partitions.
        cid = conn.open_ok("rel", name, plan, tablets, batch_size=100, mem_limit=ONE_BATCH_ALL_COLUMNS)
        ctx = rel_server.contexts.get(cid)
        first = conn.next(cid, 0)
        assert first.status.status_code == OK and not first.eos
        wait_until(lambda: ctx.queue.depth > 0, what="the producer to be blocked on the queue")
        shutil.rmtree(rel_server.warehouse.table_path("rel", name))
        rows, st = drain_until_error(conn, cid, 100)
        assert 100 + rows < total
        assert st.status_code == NOT_FOUND, st
        [msg] = st.error_msgs
        assert f"rel.{name}" in msg and "is gone" in msg and "during the scan" in msg, msg
        again = conn.next(cid, 100 + rows)  # asked again: the same failure, still no eos
        assert again.status.status_code == NOT_FOUND and again.status.error_msgs == [msg] and not again.eos
        conn.close_scanner(cid)
    finally:
        conn.close()
    assert_no_scan_left(spark, rel_server, [cid])


def test_4_a_task_that_throws_gives_an_error_never_eos(rel_server, rel_client, rel_be, spark):
    """Division by zero (ANSI) at one row of the smallest file, which Spark reads last."""
    name = f"throw_{uuid.uuid4().hex[:8]}"
    write_scratch(spark, rel_server, name, lineitem_df(spark, rel_server), files=16)
    snap = rel_server.warehouse.snapshot("rel", name)
    smallest = min(snap.tablets, key=lambda t: t.files[0].size)
    # (l_orderkey, l_linenumber) is unique: exactly one row divides by zero.
    key = spark.read.parquet(str(Path(snap.location) / smallest.files[0].path)).selectExpr(
        "max(l_orderkey * 8 + l_linenumber)").first()[0]
    row_key = "(l_orderkey * 8 + l_linenumber)"
    sql = f"select l_orderkey, l_comment from `rel`.`{name}` where ({row_key} div ({row_key} - {key})) >= 0"
    plan, tablets = plan_for(rel_client, "rel", name, sql)
    conn = Reader(rel_be)
    try:
        cid = conn.open_ok("rel", name, plan, tablets, batch_size=1000)
        rows, st = drain_until_error(conn, cid)
        assert rows > 0, "precondition: batches before the failing partition"
        assert st.status_code == INTERNAL_ERROR, st
        [msg] = st.error_msgs
        assert msg.startswith(f"Spark scan of table rel.{name} failed: ") and "DIVIDE_BY_ZERO" in msg, msg
        assert "An error occurred while calling" not in msg  # Spark's reason, not Py4J's wrapper
        conn.close_scanner(cid)
    finally:
        conn.close()
    # The client library raises instead of returning a partial table.
    with pytest.raises(ServerError, match="DIVIDE_BY_ZERO"):
        rel_client.read("rel", name, sql, batch_size=1000)


# ---- 5. server restart ---------------------------------------------------------------------
def test_5_plans_survive_a_restart_and_old_contexts_say_reopen(server, spark, base_settings):
    from starscan.app.server import StarscanServer

    settings = _settings_for(base_settings, scan_context_gc_interval_s=0.5)
    wh = Path(settings.warehouse)

    def files():  # what a restart could leave behind; the audit log may grow, that is fine
        return {p for p in wh.rglob("*") if "audit" not in p.name}

    files_before = files()
    cols = ["l_orderkey", "l_linenumber", "l_shipmode"]
    sql = f"select {', '.join(cols)} from `demo`.`lineitem` where l_shipmode = 'AIR'"
    first = StarscanServer(settings, spark).start()
    try:
        c1 = StarscanClient(f"127.0.0.1:{first.http_port}")
        plan, tablets = plan_for(c1, "demo", "lineitem", sql)
        conn = Reader(("127.0.0.1", first.be_port))
        cid = conn.open_ok("demo", "lineitem", plan, tablets, batch_size=100, mem_limit=MIB)
        assert conn.next(cid, 0).status.status_code == OK
        ctx = first.contexts.get(cid)
    finally:
        first.stop()
    # Stopping cancelled the scan; the connection's thread still answers, and says so.
    res = conn.next(cid, 100)
    assert res.status.status_code == NOT_FOUND and not res.eos
    conn.close()
    wait_until(ctx.scan.done.is_set, what="the scan to stop with the server")
    assert not running_jobs(spark, cid)
    assert ctx.queue.bytes == 0

    second = StarscanServer(settings, spark).start()
    try:
        conn = Reader(("127.0.0.1", second.be_port))
        try:
            res = conn.next(cid, 100)
            assert res.status.status_code == NOT_FOUND and not res.eos
            [msg] = res.status.error_msgs
            assert msg.startswith(f"context_id: {cid} not found") and "restarted" in msg and "open a new scanner" in msg
            # An id this server never issued still gets StarRocks' own message.
            stranger = "0badc0de-0000-4000-8000-00000000feed"
            assert conn.next(stranger, 0).status.error_msgs == [f"context_id: {stranger} not found"]
            new_cid = conn.open_ok("demo", "lineitem", plan, tablets, batch_size=100)  # the old plan
            batches, _ = conn.drain_batches(new_cid)
            conn.close_scanner(new_cid)
        finally:
            conn.close()
    finally:
        second.stop()
    assert arrow_rows(batches) == spark_rows(spark, server, "demo", "lineitem", tablets, cols, "l_shipmode = 'AIR'")
    assert not running_jobs(spark, new_cid)
    assert files() == files_before, "the restart left files in the warehouse"


# ---- 6. slow reader ------------------------------------------------------------------------
def test_6_a_slow_reader_pauses_production_within_the_queue_bound(rel_server, rel_client, rel_be, spark):
    cols = ["l_orderkey", "l_linenumber", "l_comment", "l_shipinstruct"]
    plan, tablets = plan_for(rel_client, "demo", "lineitem", f"select {', '.join(cols)} from `demo`.`lineitem`")
    conn = Reader(rel_be)
    batches, offset, paused, cid = [], 0, 0, None
    try:
        cid = conn.open_ok("demo", "lineitem", plan, tablets, batch_size=1000, mem_limit=MIB)
        ctx = rel_server.contexts.get(cid)
        queue = ctx.queue

        def blocked() -> bool:
            """Every task pushing now waits for room in a queue over half full (a task may
            start after the first rows and fill the rest of the bound first)."""
            if ctx.scan.done.is_set():
                return True
            pushing = ctx.scan.sink.connections() if ctx.scan.sink is not None else 0
            return queue.bytes > MIB // 2 and 0 < pushing <= queue.producers_waiting

        while True:
            if len(batches) < 3:
                # Wait for the producers to block at the bound (a bound that does not hold
                # lets them run to the end of the scan: then nothing pauses) ...
                wait_until(blocked, what="the producers to block at the queue bound")
                if not ctx.scan.done.is_set():
                    # ... so nothing more is produced while the reader waits.
                    assert queue.bytes <= max(queue.max_bytes, queue.largest_batch), "production went on past the queue bound"
                    paused += 1
            res = conn.next(cid, offset)
            assert res.status.status_code == OK, res.status
            if res.eos:
                break
            batch = one_batch(res.rows)
            batches.append(batch)
            offset += batch.num_rows
        conn.close_scanner(cid)
        cid = None
    finally:
        if cid is not None:  # a failed check must not leave a scan running for the next tests
            try:
                conn.close_scanner(cid)
            except Exception:  # noqa: BLE001 - closing is best effort here
                pass
        conn.close()
    assert paused >= 2
    # One batch may always be admitted: the bound is the limit plus one Spark batch (4096 rows).
    assert queue.peak_bytes <= MIB + 2 * MIB
    assert arrow_rows(batches) == snapshot_rows(spark, rel_server, "demo", "lineitem", cols)


# ---- 7. concurrent writers -----------------------------------------------------------------
def test_7_append_and_overwrite_under_a_running_scan(rel_server, rel_client, rel_be, spark):
    from pyspark.sql import functions as F

    name = f"w_{uuid.uuid4().hex[:8]}"
    base = lineitem_df(spark, rel_server).select("l_orderkey", "l_linenumber", "l_comment")
    write_scratch(spark, rel_server, name, base, files=16)
    path = str(rel_server.warehouse.table_path("rel", name))
    sql = f"select l_orderkey, l_linenumber, l_comment from `rel`.`{name}`"
    cols = ["l_orderkey", "l_linenumber", "l_comment"]

    def scan_under(write) -> tuple[Counter | None, str | None, Counter]:
        """Plan, open, read one batch, ``write``, read on. (rows or None, error or None, planned rows)."""
        plan, tablets = plan_for(rel_client, "rel", name, sql)
        planned = snapshot_rows(spark, rel_server, "rel", name, cols)
        conn = Reader(rel_be)
        try:
            cid = conn.open_ok("rel", name, plan, tablets, batch_size=500, mem_limit=ONE_BATCH_THREE_COLUMNS)
            res = conn.next(cid, 0)
            assert res.status.status_code == OK and not res.eos
            got, offset = [one_batch(res.rows)], 500
            write()
            while True:
                res = conn.next(cid, offset)
                if res.status.status_code != OK:
                    assert not res.eos
                    conn.close_scanner(cid)
                    return None, res.status.error_msgs[0], planned
                if res.eos:
                    conn.close_scanner(cid)
                    return arrow_rows(got), None, planned
                got.append(one_batch(res.rows))
                offset += got[-1].num_rows
        finally:
            conn.close()

    extra = spark.range(10**7, 10**7 + 500).select(F.col("id").alias("l_orderkey"), F.lit(1).alias("l_linenumber"),
                                                   F.lit("appended").alias("l_comment"))
    # Append: the running scan returns exactly its planned snapshot; a new plan sees the new rows.
    rows, error, planned = scan_under(lambda: extra.coalesce(2).write.mode("append").parquet(path))
    assert error is None and rows == planned
    rel_server.warehouse.invalidate("rel", name)
    after_append = read_rows(rel_client, "rel", name, sql)
    assert after_append == snapshot_rows(spark, rel_server, "rel", name, cols)
    assert sum(after_append.values()) == sum(planned.values()) + 500

    # Overwrite: the planned files are removed; the scan gives exactly its snapshot or says it is gone.
    replacement = base.limit(1000).withColumn("l_comment", F.lit("rewritten"))
    rows, error, planned = scan_under(lambda: replacement.coalesce(1).write.mode("overwrite").parquet(path))
    if error is None:
        assert rows == planned
    else:
        assert f"rel.{name}" in error and "is gone" in error and "ask the FE for a new plan" in error, error
    rel_server.warehouse.invalidate("rel", name)
    fresh = read_rows(rel_client, "rel", name, sql)
    assert sum(fresh.values()) == 1000 and all(k[2] == "rewritten" for k in fresh)
    assert error is not None, "with 16 files and a one-batch queue the overwrite should hit files not yet read"


# ---- 8. concurrent close and get_next ------------------------------------------------------
@pytest.mark.parametrize("close_after", [0, 1, 4, "blocked", "eos"])
def test_8_close_races_get_next_from_another_connection(rel_server, rel_client, rel_be, spark, close_after):
    if close_after == "blocked":  # every row goes through a backtracking regex: get_next waits in the queue
        sql = "select l_orderkey from `demo`.`lineitem` where l_comment regexp '(([a-z]+)+)+!'"
    else:
        sql = "select l_orderkey, l_linenumber from `demo`.`lineitem`"
    plan, tablets = plan_for(rel_client, "demo", "lineitem", sql)
    reader, closer = Reader(rel_be, timeout_s=120), Reader(rel_be, timeout_s=120)
    cid = reader.open_ok("demo", "lineitem", plan, tablets, batch_size=300, mem_limit=MIB)
    ctx = rel_server.contexts.get(cid)
    replies: list = []
    keys: list = []
    got_some = threading.Event()
    done = threading.Event()

    def read():
        offset, batches = 0, 0
        try:
            for _ in range(100_000):
                res = reader.next(cid, offset)
                replies.append((res.status.status_code, bool(res.eos), list(res.status.error_msgs or [])))
                if res.status.status_code == OK and not res.eos:
                    b = one_batch(res.rows)
                    keys.extend(zip(*(c.to_pylist() for c in b.columns)))
                    offset += b.num_rows
                    batches += 1
                    if isinstance(close_after, int) and batches >= close_after:
                        got_some.set()
                    continue
                if res.status.status_code == NOT_FOUND:
                    return  # the context is gone: final
                time.sleep(0.01)  # eos or CANCELLED: ask again, the answer must stay consistent
        finally:
            done.set()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    try:
        if close_after == "blocked":
            wait_until(lambda: ctx.in_use > 0 and ctx.queue.depth == 0 and not ctx.scan.done.is_set(),
                       what="get_next to wait for data")
        elif close_after == "eos":
            wait_until(lambda: ctx.eos, what="the reader to reach eos")
        elif close_after:
            assert got_some.wait(60)
        assert closer.close_scanner(cid).status.status_code == OK
        assert closer.close_scanner(cid).status.status_code == OK  # idempotent
        assert done.wait(120), "get_next hung after close"
        t.join(10)
    finally:
        reader.close()
        closer.close()
    # Consistent: data (or eos), then failures only; a failure is CANCELLED (closed under a
    # waiting get_next) or NOT_FOUND (context gone), never data or eos afterwards.
    codes = [c for c, _, _ in replies]
    first_bad = next((i for i, c in enumerate(codes) if c != OK), len(codes))
    assert all(c in (CANCELLED, NOT_FOUND) for c in codes[first_bad:]), replies
    assert codes[first_bad:], "the reader never saw the close"
    assert replies[-1][0] == NOT_FOUND and replies[-1][2] == [f"context_id: {cid} not found"]
    if close_after == "blocked":
        assert replies[0][0] == CANCELLED and "cancel" in replies[0][2][0], replies[0]
    if close_after == "eos":
        assert any(e for _, e, _ in replies)
    assert len(keys) == len(set(keys))  # nothing doubled
    assert_no_scan_left(spark, rel_server, [cid])
    # The server is fine afterwards.
    assert rel_client.read("db1", "t1", "select k1 from `db1`.`t1`", batch_size=10).num_rows == 3


# ---- 9. load -------------------------------------------------------------------------------
LOAD_QUERIES = [
    ("demo", "lineitem", ["l_orderkey", "l_linenumber", "l_quantity"], "l_quantity > 45"),
    ("demo", "lineitem", ["l_orderkey", "l_linenumber", "l_shipdate", "l_shipmode"], "l_shipmode = 'MAIL'"),
    ("demo", "lineitem", ["l_orderkey", "l_linenumber", "l_comment"], "l_orderkey < 3000"),
    ("demo", "all_types", ["id", "c_int", "c_date", "c_datetime", "c_decimal128", "c_string"], None),
    ("db1", "t1", ["k1", "v1", "d", "dt", "m"], None),
    ("db1", "sales", ["id", "amount", "region", "day"], None),
    ("db1", "sales", ["id", "region"], "region = 'us'"),
]
BATCH_SIZES = [1000, 4096, 16384, 65536]


def test_9_fifty_concurrent_readers(rel_server, rel_client, spark):
    earlier = set(scan_threads())  # of other servers in this process: they end in their own time
    queries = []
    for db, table, cols, where in LOAD_QUERIES:
        sql = f"select {', '.join(cols)} from `{db}`.`{table}`" + (f" where {where}" if where else "")
        want = snapshot_rows(spark, rel_server, db, table, cols, where)
        assert sum(want.values()) > 0, sql
        queries.append((db, table, sql, want))
    readers, seconds = 50, 6.0
    counts = Counter()
    count_lock = threading.Lock()
    errors: list = []
    peaks: list = []
    stop_sampling = threading.Event()
    start = threading.Barrier(readers + 1)

    def sampler():
        while not stop_sampling.wait(0.05):
            for ctx in rel_server.contexts.snapshot():
                if ctx.queue is not None:
                    peaks.append((ctx.queue.peak_bytes, ctx.queue.bytes, ctx.queue.max_bytes))

    def reader(i: int):
        rng = random.Random(i)
        client = StarscanClient(f"127.0.0.1:{rel_server.http_port}", "root", "", timeout_s=300, retries=0)
        try:
            start.wait(120)
        except threading.BrokenBarrierError:
            return
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            db, table, sql, want = rng.choice(queries)
            stats = ScanStats()
            try:
                got = read_rows(client, db, table, sql, batch_size=rng.choice(BATCH_SIZES), stats=stats)
            except Exception as exc:  # noqa: BLE001 - counted below
                errors.append((sql, repr(exc)))
                return
            if got != want:
                errors.append((sql, f"wrong rows: {sum(got.values())} vs {sum(want.values())}"))
                return
            if stats.verified != stats.scanners:
                errors.append((sql, "end-of-scan row count not reported"))
            with count_lock:
                counts["scans"] += 1
                counts["rows"] += stats.rows

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(readers)]
    sampling = threading.Thread(target=sampler, daemon=True)
    for t in threads:
        t.start()
    sampling.start()
    start.wait(120)
    for t in threads:
        t.join(600)
    stop_sampling.set()
    sampling.join(10)
    assert not any(t.is_alive() for t in threads), "a reader hung"
    assert not errors, errors[:5]
    assert counts["scans"] >= readers, counts
    # Memory bounded by the caps: a queue holds at most its limit plus one Spark batch.
    assert peaks and all(peak <= limit + 2 * MIB and now <= limit + 2 * MIB for peak, now, limit in peaks)
    # Every context reclaimed (the client closes each), no producer or Spark job left.
    wait_until(lambda: len(rel_server.contexts) == 0, timeout_s=60, what="every context to be closed")
    wait_until(lambda: not set(scan_threads()) - earlier, timeout_s=120, what="the producer threads to end")
    wait_until(lambda: not spark.sparkContext.statusTracker().getActiveStageIds(), timeout_s=120,
               what="no Spark stage to run")


# ---- end-of-scan integrity -----------------------------------------------------------------
def test_eos_row_count_is_opt_in_and_verified_by_the_client(rel_server, rel_client, rel_be, monkeypatch):
    plan, tablets = plan_for(rel_client, "db1", "sales", "select id from `db1`.`sales`")
    conn = Reader(rel_be)
    try:
        for props, expected in [(None, None), ({EOS_ROWS_PROPERTY: "true"}, [f"{EOS_ROWS_PREFIX}400"])]:
            cid = conn.open_ok("db1", "sales", plan, tablets, batch_size=1000, properties=props)
            _, end = conn.drain_batches(cid)
            res = conn.next(cid, end)
            assert end == 400 and res.status.status_code == OK and res.eos
            assert res.status.error_msgs == expected  # StarRocks' own eos reply unless asked
            conn.close_scanner(cid)
    finally:
        conn.close()
    stats = ScanStats()
    assert rel_client.read("db1", "sales", "select id from `db1`.`sales`", stats=stats).num_rows == 400
    assert stats.verified == stats.scanners == 1

    # A server whose count disagrees with what arrived: the client raises instead of returning.
    from starscan.provider import replies

    monkeypatch.setattr(replies, "rows_scanned", lambda ctx: ctx.queue.rows_in + 5)
    with pytest.raises(ScanIntegrityError, match="405 .*5 rows missing|received but the server produced 405"):
        rel_client.read("db1", "sales", "select id from `db1`.`sales`")


def test_the_server_never_answers_eos_when_rows_went_missing(rel_server, rel_client, rel_be):
    """If the queue accounted rows it never handed out, the end is an error, not eos."""
    plan, tablets = plan_for(rel_client, "db1", "t1", "select k1 from `db1`.`t1`")
    conn = Reader(rel_be)
    try:
        cid = conn.open_ok("db1", "t1", plan, tablets, batch_size=10)
        ctx = rel_server.contexts.get(cid)
        wait_until(ctx.scan.done.is_set, what="the scan to finish")
        ctx.queue.rows_in += 2  # rows that "vanished" between the producer and the reader
        n, st = drain_until_error(conn, cid)
        assert n == 3 and st.status_code == INTERNAL_ERROR, st
        assert "integrity" in st.error_msgs[0] and "produced 5 rows but 3 were handed out" in st.error_msgs[0]
        conn.close_scanner(cid)
    finally:
        conn.close()


# ---- 10. SIGTERM ---------------------------------------------------------------------------
def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.mark.slow
def test_10_sigterm_stops_serve_cleanly(tmp_path, server):
    proc, http_port, be_port, log = start_serve(tmp_path, demo_from=server.warehouse.location)
    try:
        java = [p for p in psutil.Process(proc.pid).children(recursive=True) if "java" in p.name()]
        assert java, "precondition: Spark's JVM is a child of serve"
        client = StarscanClient(f"127.0.0.1:{http_port}", retries=0, timeout_s=120)
        sql = "select * from `demo`.`lineitem`"
        # In flight: a scanner opened and left mid-scan, and a reader reading slowly.
        plan, tablets = plan_for(client, "demo", "lineitem", sql)
        held = Reader(("127.0.0.1", be_port))
        cid = held.open_ok("demo", "lineitem", plan, tablets, batch_size=100, mem_limit=MIB)
        assert held.next(cid, 0).status.status_code == OK
        outcome: dict = {}
        reading = threading.Event()

        def slow_reader():
            stats = ScanStats()
            try:
                for _ in client.batches("demo", "lineitem", sql, batch_size=100, stats=stats, mem_limit=MIB):
                    reading.set()
                    time.sleep(0.02)
                outcome["complete"] = stats.rows
            except Exception as exc:  # noqa: BLE001 - any error is fine, a silent partial result is not
                outcome["error"] = exc
                outcome["rows"] = stats.rows

        t = threading.Thread(target=slow_reader, daemon=True)
        t.start()
        assert reading.wait(120)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(90)  # the grace period is bounded (serve: shutdown_grace_s, 30 s, then it forces the exit)
        t.join(120)
        assert not t.is_alive()
        assert code == 0, (tmp_path / "serve.log").read_text()[-3000:]
        assert "error" in outcome or outcome.get("complete"), outcome
        if "complete" in outcome:  # finished before the stop: then it is whole (verified at eos)
            assert outcome["complete"] > 0
        res = None
        try:
            res = held.next(cid, 100)
        except TRANSPORT_ERRORS:
            pass
        assert res is None or (res.status.status_code != OK and not res.eos)
        held.close()
        wait_until(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in java),
                   timeout_s=60, what="Spark's JVM to exit")
        assert port_free(http_port) and port_free(be_port)
        text = (tmp_path / "serve.log").read_text()
        assert "stopping" in text and "Traceback" not in text, text[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for p in psutil.Process().children(recursive=True):
            if "java" in p.name() and str(tmp_path) in " ".join(p.cmdline()):
                p.kill()
        log.close()


# ---- the soak, briefly ---------------------------------------------------------------------
def test_soak_smoke(server, spark, base_settings):
    """The soak's workload (tests/support/soak.py, which bench/soak.py runs for minutes) for a
    few seconds on its own server (keep-alive 3 s): every read checked against Spark, faults
    injected, nothing left behind."""
    import argparse

    from support.soak import Soak

    from starscan.app.server import StarscanServer

    srv = StarscanServer(_settings_for(base_settings, scan_context_gc_interval_s=0.5, keep_alive_s=3.0,
                                       queue_max_bytes=8 * MIB), spark).start()
    try:
        args = argparse.Namespace(minutes=0.1, readers=6, drop_probability=0.05, kill_every=2.0, slow_pause_s=0.02,
                                  keep_alive_s=3.0, seed=5)
        run = Soak(args, srv, spark)
        run.oracle()
        result = run.run()
    finally:
        srv.stop()
    assert not run.errors, run.errors[:5]
    assert result["ok"] and result["hung"] == 0 and not any(result["left"].values()), result
    c = run.c
    assert c["wrong_rows"] == 0 and c["reads_checked"] > 0 and c["rows_checked"] > 0
    assert c["killed_clients"] >= 1 and run.proxy.cuts + c["abandoned"] + c["reads_slow"] > 0
