"""Scan profiles (enable_profile_for_external_plan): a real scan over real sockets, then
GET /api/scans/{context_id}/profile and the profile summary in the scan's audit line."""

from __future__ import annotations

import json

import httpx
import pytest
from support.readers import Reader, plan_for
from support.servers import add_users, own_warehouse, running_server
from support.waits import wait_until

from starscan.client import StarscanClient

SQL = "select k1, v1, m from db1.t1"


@pytest.fixture(scope="module")
def profiled(spark, base_settings, tmp_path_factory):
    warehouse = own_warehouse(spark, tmp_path_factory.mktemp("profiles") / "warehouse")
    write_ids(warehouse / "db1.db" / "ids")
    add_users(warehouse, {"alice": ("alice-pw", ("db1.*",))})
    settings = base_settings.model_copy(update={"warehouse": warehouse, "enable_profile_for_external_plan": True,
                                                "http_port": 0, "be_port": 0, "query_port": 0})
    with running_server(spark, settings) as srv:
        yield srv


IDS_FILES, IDS_PER_FILE, IDS_GROUP = 4, 10_000, 1_000


def write_ids(folder) -> None:
    """db1.ids: ids 0..39,999 in 4 files of 10 row groups each, written by pyarrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    for n in range(IDS_FILES):
        ids = pa.array(range(n * IDS_PER_FILE, (n + 1) * IDS_PER_FILE), pa.int64())
        pq.write_table(pa.table({"id": ids, "v": ids.cast(pa.string())}), folder / f"part-{n}.parquet",
                       row_group_size=IDS_GROUP)


def urls(srv):
    return f"http://127.0.0.1:{srv.http_port}", ("127.0.0.1", srv.be_port)


def get_profile(fe_url, cid, auth=("root", "")):
    return httpx.get(f"{fe_url}/api/scans/{cid}/profile", auth=auth, timeout=30)


def test_profile_of_a_complete_scan(profiled):
    fe_url, be_addr = urls(profiled)
    plan_b64, tablets = plan_for(StarscanClient(fe_url, "root", ""), "db1", "t1", SQL)
    reader = Reader(be_addr)
    try:
        cid = reader.open_ok("db1", "t1", plan_b64, tablets, batch_size=2)
        assert reader.drain(cid) == 3
        reader.close_scanner(cid)
    finally:
        reader.close()
    resp = get_profile(fe_url, cid)
    assert resp.status_code == 200, resp.text
    p = resp.json()
    assert p["context_id"] == cid and p["user"] == "root" and p["table"] == "db1.t1"
    assert p["columns"] == ["k1", "v1", "m"] and p["tablets"] == 2
    assert p["outcome"] == "complete" and p["error"] is None
    assert p["rows"] == 3 and p["bytes"] > 0 and p["batches"] >= 2  # batch_size 2: at least two batches
    assert p["open_ms"] > 0 and p["first_batch_ms"] is not None and p["first_batch_ms"] >= p["open_ms"]
    assert p["rpc"]["open_scanner"]["calls"] == 1 and p["rpc"]["close_scanner"]["calls"] == 1
    assert p["rpc"]["get_next"]["calls"] == p["batches"] + 1  # the last call says eos
    assert p["duration_ms"] >= p["open_ms"]
    # Parts of the scan's time: the one reader's waits, and its producers' (one per tablet here) summed.
    assert isinstance(p["reader_waited_on_spark_ms"], (int, float)) and 0 <= p["reader_waited_on_spark_ms"] <= p["duration_ms"]
    assert isinstance(p["spark_waited_on_reader_ms"], (int, float))
    assert 0 <= p["spark_waited_on_reader_ms"] <= p["duration_ms"] * p["tablets"]
    # Job and stage ids come from Spark's status store once the scan has ended.
    done = wait_until(lambda: (q := get_profile(fe_url, cid).json())["spark_job_ids"] and q, what="Spark job ids")
    assert done["spark_stage_ids"] and done["spark_job_ms"] is not None

    audit = profiled.settings.effective_audit_log

    def audit_line():
        for line in audit.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if entry.get("event") == "scan" and entry.get("context_id") == cid:
                return entry
        return None

    line = wait_until(audit_line, what="the scan's audit line")
    assert line["profile"]["batches"] == p["batches"]
    assert p["engine"] in ("arrow", "sql") and line["engine"] == p["engine"]
    assert set(line["profile"]) >= {"open_ms", "first_batch_ms", "reader_waited_on_spark_ms", "spark_waited_on_reader_ms"}


@pytest.mark.parametrize(("sql", "engine"), [("select k1, v1 from db1.t1 where k1 > 0", "arrow"),
                                             ("select k1, v1 from db1.t1 where upper(v1) <> 'X'", "sql")])
def test_the_profile_and_the_log_say_which_engine_ran_and_why_not_arrow(profiled, caplog, sql, engine):
    fe_url, be_addr = urls(profiled)
    plan_b64, tablets = plan_for(StarscanClient(fe_url, "root", ""), "db1", "t1", sql)
    reader = Reader(be_addr)
    with caplog.at_level("INFO", logger="starscan.provider.scan"):
        try:
            cid = reader.open_ok("db1", "t1", plan_b64, tablets)
            reader.drain(cid)
            reader.close_scanner(cid)
        finally:
            reader.close()
    assert get_profile(fe_url, cid).json()["engine"] == engine
    [logged] = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"scan {cid} engine=")]
    if engine == "arrow":
        assert logged == f"scan {cid} engine=arrow"
    else:
        assert logged.startswith(f"scan {cid} engine=sql (") and "upper" in logged, logged


def test_live_profile_and_a_slow_reader(profiled):
    """A reader that does not read: Spark fills the queue and waits on it, which the profile shows."""
    fe_url, be_addr = urls(profiled)
    wh = profiled.warehouse
    # A table of its own big enough to fill a small queue.
    spark = profiled.spark
    path = wh.table_path("db1", "wide")
    spark.range(0, 200_000, numPartitions=1).selectExpr("id", "repeat('x', 40) as pad").write.mode("overwrite").parquet(str(path))
    wh.invalidate("db1", "wide")
    plan_b64, tablets = plan_for(StarscanClient(fe_url, "root", ""), "db1", "wide", "select id, pad from db1.wide")
    reader = Reader(be_addr)
    try:
        cid = reader.open_ok("db1", "wide", plan_b64, tablets, batch_size=1000, mem_limit=256 << 10)
        first = reader.next_batch(cid, 0)
        live = get_profile(fe_url, cid).json()
        assert live["outcome"] == "running" and live["rows"] == first.num_rows and live["batches"] == 1
        wait_until(lambda: get_profile(fe_url, cid).json()["spark_waited_on_reader_ms"] > 0,
                   what="Spark to wait on the full queue")
        assert reader.drain(cid, first.num_rows) == 200_000
        reader.close_scanner(cid)
    finally:
        reader.close()
    p = get_profile(fe_url, cid).json()
    assert p["outcome"] == "complete" and p["rows"] == 200_000 and p["spark_waited_on_reader_ms"] > 0


def test_profile_access(profiled, fe_url):
    fe, be_addr = urls(profiled)
    plan_b64, tablets = plan_for(StarscanClient(fe, "root", ""), "db1", "t1", SQL)
    reader = Reader(be_addr)
    try:
        cid = reader.open_ok("db1", "t1", plan_b64, tablets)
        reader.close_scanner(cid)
    finally:
        reader.close()
    assert get_profile(fe, cid).json()["outcome"] == "closed_before_eos"
    other = get_profile(fe, cid, auth=("alice", "alice-pw"))
    assert other.status_code == 403 and "another user" in other.text
    assert get_profile(fe, cid, auth=("alice", "wrong")).status_code == 401
    assert get_profile(fe, "00000000-0000-4000-8000-000000000000").status_code == 404
    # The shared server runs with profiles off (the default): the answer says how to turn them on.
    off = httpx.get(f"{fe_url}/api/scans/{cid}/profile", auth=("root", ""), timeout=30)
    assert off.status_code == 404 and "enable_profile_for_external_plan" in off.text


def _metric(fe_url: str, name: str) -> float:
    for line in httpx.get(f"{fe_url}/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.parametrize(("where", "engine", "sent", "read"), [
    ("id >= 39000", "arrow", 1_000, 1_000),      # statistics skip every row group but the last
    ("v <> '5'", "arrow", 39_999, 40_000),       # nothing to skip: every row read
    ("upper(v) = '5'", "sql", 1, 40_000),        # Spark SQL's scan: Spark's own count
])
def test_rows_read_from_files_beside_rows_sent(profiled, where, engine, sent, read):
    """A filter's pruning shows: the profile, the audit line and starscan_rows_read count the
    rows the scan read from its files (after row-group statistics, before the predicate)
    beside the rows it sent. The arrow engine's readers count them as they read (in Spark's
    tasks here); a sql-engine scan's count is Spark's, from its status store after the scan."""
    fe_url, be_addr = urls(profiled)
    before = _metric(fe_url, "starscan_rows_read_total")
    plan_b64, tablets = plan_for(StarscanClient(fe_url, "root", ""), "db1", "ids", f"select id from db1.ids where {where}")
    reader = Reader(be_addr)
    try:
        cid = reader.open_ok("db1", "ids", plan_b64, tablets)
        assert reader.drain(cid) == sent
        reader.close_scanner(cid)
    finally:
        reader.close()
    profile = wait_until(lambda: (p := get_profile(fe_url, cid).json())["rows_read"] is not None and p,
                         what="the scan's rows read")
    assert profile["engine"] == engine
    assert (profile["rows"], profile["rows_read"]) == (sent, read)
    assert wait_until(lambda: _metric(fe_url, "starscan_rows_read_total") - before == read or None,
                      what="the metric to count the rows read")
    line = wait_until(lambda: next((e for e in map(json.loads, profiled.settings.effective_audit_log.read_text(
        encoding="utf-8").splitlines()) if e.get("event") == "scan" and e.get("context_id") == cid), None),
        what="the scan's audit line")
    assert line["rows"] == sent
    assert line["rows_read"] == (read if engine == "arrow" else None)  # the sql engine's count comes after the line
