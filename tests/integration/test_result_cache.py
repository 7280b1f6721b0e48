"""The result cache (provider/result_cache.py) on a server of its own: a repeated scan gets the
first scan's bytes without a Spark job, only after every check, and never stale rows."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import httpx
import pyarrow as pa
import pytest
from support.readers import OK, Reader, scrape, status_tracker, value
from support.servers import basic, plan, running_server

from starscan.core.protocol_extensions import EOS_ROWS_PREFIX, EOS_ROWS_PROPERTY
from starscan.core.thrift_defs import wire

MIB = 1 << 20
T1_SQL = "select k1, v1, d, dt, m from db1.t1"
LINEITEM_SQL = "select l_orderkey, l_linenumber, l_shipdate, l_comment from demo.lineitem where l_quantity > 10"


@pytest.fixture(scope="module")
def cached(server, spark, base_settings):
    settings = base_settings.model_copy(update={
        "result_cache_max_bytes": 64 * MIB, "result_cache_max_entry_bytes": 32 * MIB, "result_cache_tables": ["*.*"]})
    with running_server(spark, settings) as srv:
        yield srv


def fe(srv) -> str:
    return f"http://127.0.0.1:{srv.http_port}"


def new_user(srv, grant: str | None) -> tuple[str, str]:
    name = f"rc_{uuid.uuid4().hex[:10]}"
    srv.users.set_password(name, "pw", create=True)
    if grant:
        srv.users.grant(name, grant)
    return name, "pw"


def plan_of(srv, db, table, sql, user=("root", "")) -> tuple[str, list[int]]:
    resp = plan(fe(srv), db, table, sql, basic(*user))
    assert resp.status_code == 200, resp.text
    body = resp.json()
    return body["opaqued_query_plan"], sorted(int(t) for t in body["partitions"])


def read_replies(srv, db, table, sql, batch_size=1000, user=("root", ""), **kw) -> tuple[str, list[bytes]]:
    """Plan afresh, open, read every reply; returns the context id and the reply bytes."""
    opaque, tablets = plan_of(srv, db, table, sql, user)
    reader = Reader(("127.0.0.1", srv.be_port))
    try:
        cid = reader.open_ok(db, table, opaque, tablets, batch_size=batch_size, user=user[0], passwd=user[1], **kw)
        replies, offset = [], 0
        while True:
            res = reader.next(cid, offset)
            assert res.status.status_code == OK, res.status
            if res.eos:
                break
            replies.append(res.rows)
            offset += pa.ipc.open_stream(res.rows).read_all().num_rows
        reader.close_scanner(cid)
        return cid, replies
    finally:
        reader.close()


def rows_of(replies: list[bytes]) -> Counter:
    out: Counter = Counter()
    for data in replies:
        out.update(tuple(r.values()) for r in pa.ipc.open_stream(data).read_all().to_pylist())
    return out


def spark_jobs_of(spark, cid: str) -> list[int]:
    return list(status_tracker(spark).getJobIdsForGroup(cid))


def cache_numbers(srv) -> dict:
    samples = scrape(fe(srv))
    return {name: value(samples, f"starscan_result_cache_{name}_total" if name in ("hits", "misses", "evictions", "inserts")
                        else f"starscan_result_cache_{name}") for name in ("hits", "misses", "evictions", "inserts", "bytes")}


def test_a_repeated_scan_gets_the_same_bytes_without_spark(cached, spark):
    before = cache_numbers(cached)
    first_cid, first = read_replies(cached, "demo", "lineitem", LINEITEM_SQL)
    assert spark_jobs_of(spark, first_cid), "the first scan runs on Spark"
    second_cid, second = read_replies(cached, "demo", "lineitem", LINEITEM_SQL)  # a new plan, same content
    assert second == first and len(first) > 3
    assert spark_jobs_of(spark, second_cid) == []
    after = cache_numbers(cached)
    assert after["hits"] - before["hits"] == 1 and after["misses"] - before["misses"] == 1
    assert after["inserts"] - before["inserts"] == 1 and after["bytes"] >= sum(map(len, first))
    expected = Counter(tuple(r) for r in spark.read.parquet(str(cached.warehouse.table_path("demo", "lineitem")))
                       .where("l_quantity > 10").selectExpr("l_orderkey", "l_linenumber", "cast(l_shipdate as string)",
                                                            "l_comment").collect())
    assert rows_of(second) == expected


def test_another_user_with_the_grant_hits_and_one_without_is_refused_first(cached, spark):
    read_replies(cached, "db1", "t1", T1_SQL)  # fills (or already filled)
    granted = new_user(cached, "db1.*")
    cid, replies = read_replies(cached, "db1", "t1", T1_SQL, user=granted)
    assert spark_jobs_of(spark, cid) == [] and sum(rows_of(replies).values()) == 3
    # A plan made for a user whose grant is then revoked: refused at open, no cached byte served.
    revoked = new_user(cached, "db1.*")
    opaque, tablets = plan_of(cached, "db1", "t1", T1_SQL, revoked)
    cached.users.grant(revoked[0], "db1.*", revoke=True)
    reader = Reader(("127.0.0.1", cached.be_port))
    try:
        res = reader.open("db1", "t1", opaque, tablets, batch_size=1000, user=revoked[0], passwd=revoked[1])
        assert res.status.status_code == wire.TStatusCode.NOT_AUTHORIZED
        nxt = reader.next(res.context_id, 0)
        assert nxt.status.status_code != OK and not nxt.rows
    finally:
        reader.close()


def test_a_new_table_version_misses_and_returns_the_new_rows(cached, spark):
    name = f"t_{uuid.uuid4().hex[:8]}"
    path = str(cached.warehouse.table_path("rc", name))
    spark.range(0, 100).selectExpr("id", "cast(id as string) as s").write.parquet(path)
    sql = f"select id, s from rc.{name}"
    _, old = read_replies(cached, "rc", name, sql)
    _, again = read_replies(cached, "rc", name, sql)
    assert again == old and sum(rows_of(old).values()) == 100
    before = cache_numbers(cached)
    spark.range(100, 150).selectExpr("id", "cast(id as string) as s").write.mode("append").parquet(path)
    cached.warehouse.invalidate("rc", name)
    cid, new = read_replies(cached, "rc", name, sql)
    assert spark_jobs_of(spark, cid), "a new version is a miss"
    assert sorted(r[0] for r in rows_of(new)) == list(range(150))
    after = cache_numbers(cached)
    assert after["evictions"] - before["evictions"] >= 1  # the old version's entry went


def test_closed_early_entries_over_the_cap_and_tables_switched_off_are_not_cached(cached, spark):
    sql = "select l_orderkey, l_comment from demo.lineitem where l_linenumber = 1"
    opaque, tablets = plan_of(cached, "demo", "lineitem", sql)
    reader = Reader(("127.0.0.1", cached.be_port))
    try:  # closed after one batch: nothing inserted
        cid = reader.open_ok("demo", "lineitem", opaque, tablets, batch_size=500)
        assert reader.next(cid, 0).status.status_code == OK
        reader.close_scanner(cid)
    finally:
        reader.close()
    cid, _ = read_replies(cached, "demo", "lineitem", sql, batch_size=500)
    assert spark_jobs_of(spark, cid), "the early close left nothing in the cache"
    try:
        # Over the per-entry cap: scanned on Spark every time.
        assert httpx.post(f"{fe(cached)}/api/update_config", params={"result_cache_max_entry_bytes": "1000"},
                          auth=("root", ""), timeout=30).status_code == 200
        big = "select l_orderkey, l_comment from demo.lineitem where l_linenumber = 2"
        read_replies(cached, "demo", "lineitem", big)
        cid, _ = read_replies(cached, "demo", "lineitem", big)
        assert spark_jobs_of(spark, cid)
        # A table not in result_cache_tables: never cached.
        assert httpx.post(f"{fe(cached)}/api/update_config",
                          params={"result_cache_max_entry_bytes": str(32 * MIB), "result_cache_tables": "db1.*"},
                          auth=("root", ""), timeout=30).status_code == 200
        other = "select l_orderkey from demo.lineitem where l_linenumber = 3"
        read_replies(cached, "demo", "lineitem", other)
        cid, _ = read_replies(cached, "demo", "lineitem", other)
        assert spark_jobs_of(spark, cid)
        bad = httpx.post(f"{fe(cached)}/api/update_config", params={"result_cache_tables": "demo"},
                         auth=("root", ""), timeout=30)
        assert bad.status_code == 400 and "is not db.table" in bad.text
    finally:
        httpx.post(f"{fe(cached)}/api/update_config", params={"result_cache_max_entry_bytes": str(32 * MIB),
                                                              "result_cache_tables": "*.*"}, auth=("root", ""), timeout=30)


def test_the_cache_stays_under_its_size(cached):
    CAP = 256 << 10  # room for one or two of these results, not for all four
    try:
        assert httpx.post(f"{fe(cached)}/api/update_config", params={"result_cache_max_bytes": str(CAP)},
                          auth=("root", ""), timeout=30).status_code == 200
        sizes = []
        for n in (4, 5, 6, 7):
            _, replies = read_replies(cached, "demo", "lineitem",
                                      f"select l_orderkey, l_comment from demo.lineitem where l_linenumber = {n}")
            sizes.append(sum(map(len, replies)))
            assert cache_numbers(cached)["bytes"] <= CAP
        assert max(sizes) < CAP < sum(sizes), sizes  # room for some, not all: eviction happened
        assert cached.service.result_cache.evictions >= 1
    finally:
        httpx.post(f"{fe(cached)}/api/update_config", params={"result_cache_max_bytes": str(64 * MIB)},
                   auth=("root", ""), timeout=30)


def test_offsets_replay_and_eos_row_count_hold_on_a_cached_scan(cached):
    _, first = read_replies(cached, "db1", "t1", T1_SQL, batch_size=2)
    opaque, tablets = plan_of(cached, "db1", "t1", T1_SQL)
    reader = Reader(("127.0.0.1", cached.be_port))
    try:
        cid = reader.open_ok("db1", "t1", opaque, tablets, batch_size=2, properties={EOS_ROWS_PROPERTY: "true"})
        one = reader.next(cid, 0)
        again = reader.next(cid, 0)  # the reply was lost: the same bytes again
        assert one.rows == again.rows == first[0]
        n = pa.ipc.open_stream(one.rows).read_all().num_rows
        wrong = reader.next(cid, n + 7)
        assert wrong.status.status_code == wire.TStatusCode.NOT_FOUND
        offset = n
        while True:
            res = reader.next(cid, offset)
            assert res.status.status_code == OK
            if res.eos:
                break
            offset += pa.ipc.open_stream(res.rows).read_all().num_rows
        assert offset == 3 and res.status.error_msgs == [f"{EOS_ROWS_PREFIX}3"]
    finally:
        reader.close()


def test_concurrent_readers_of_one_entry(cached):
    _, expected = read_replies(cached, "demo", "lineitem", LINEITEM_SQL)
    results, errors = [], []

    def one():
        try:
            results.append(read_replies(cached, "demo", "lineitem", LINEITEM_SQL)[1])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == 4
    assert all(r == expected for r in results)


def test_flight_sql_reads_fill_and_hit_the_cache_with_spark_values(cached, spark):
    """The Flight front takes the queue's batches as they are, except while a scan fills the
    cache (its replies are kept as IPC); the repeated statement is answered from the cache
    (entries apart from the Thrift path's: Arrow's own types), with the same rows."""
    import adbc_driver_flightsql.dbapi as flight_sql

    cached.live_settings.bound(flight_proxy=False)
    before = cache_numbers(cached)
    tables = []
    for _ in range(2):
        with flight_sql.connect(f"grpc://127.0.0.1:{cached.flight_sql_port}",
                                db_kwargs={"username": "root", "password": ""}, autocommit=True) as conn, \
                conn.cursor() as cur:
            cur.execute(LINEITEM_SQL)
            tables.append(cur.fetch_arrow_table())
    after = cache_numbers(cached)
    assert after["misses"] - before["misses"] >= 1 and after["hits"] - before["hits"] >= 1
    assert pa.types.is_date32(tables[0].schema.field("l_shipdate").type)
    want = spark.read.parquet(str(cached.warehouse.snapshot("demo", "lineitem").location)) \
        .where("l_quantity > 10").select("l_orderkey", "l_linenumber", "l_shipdate", "l_comment").collect()
    for table in tables:
        assert Counter(tuple(r.values()) for r in table.to_pylist()) == Counter(tuple(r) for r in want)
