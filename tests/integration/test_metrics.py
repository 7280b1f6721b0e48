"""Prometheus /metrics on the shared server: StarRocks' active-context gauge and the
Prometheus-style counters and histograms move with real plans and scans over real sockets."""

from __future__ import annotations

import re
import time

import httpx
from support.readers import NOT_FOUND, Reader, plan_for, scrape, value
from support.servers import basic, plan
from support.waits import wait_until

SQL_T1 = "select k1, v1 from db1.t1"


def test_metrics_follow_a_scan(server, fe_url, be_addr, client):
    before = scrape(fe_url)
    table = client.read("db1", "t1", SQL_T1)
    assert table.num_rows == 3
    after = wait_until(lambda: (s := scrape(fe_url)) and value(s, "starscan_scanners_closed_total")
                       > value(before, "starscan_scanners_closed_total") and s, what="the close to be counted")

    assert value(after, "starscan_rows_sent_total") - value(before, "starscan_rows_sent_total") == 3
    assert value(after, "starscan_bytes_sent_total") > value(before, "starscan_bytes_sent_total")
    assert value(after, "starscan_scanners_opened_total") - value(before, "starscan_scanners_opened_total") == 1
    assert value(after, "starscan_plan_requests_total", status=200) - value(before, "starscan_plan_requests_total", status=200) == 1
    for method in ("open_scanner", "get_next", "close_scanner", "query_plan"):
        grew = value(after, "starscan_rpc_duration_seconds_count", method=method) - \
            value(before, "starscan_rpc_duration_seconds_count", method=method)
        assert grew >= 1, method
    # two batches' worth of get_next at least: one with rows, one with eos
    assert value(after, "starscan_be_rpc_replies_total", method="get_next", status_code="OK") - \
        value(before, "starscan_be_rpc_replies_total", method="get_next", status_code="OK") >= 2
    # Spark job durations are read from Spark's status store after the scan ends.
    wait_until(lambda: value(scrape(fe_url), "starscan_spark_job_duration_seconds_count")
               > value(before, "starscan_spark_job_duration_seconds_count"), what="a Spark job duration")


def test_active_scan_context_count_and_queue_gauges(server, fe_url, be_addr, client):
    def gauge_counts_the_contexts(with_ours: bool) -> bool:
        """The gauge equals the contexts the server holds (other tests' contexts come and go,
        the reaper's too: compared while the held set stays the same)."""
        held = {c.context_id for c in server.contexts.snapshot()}
        gauge = value(scrape(fe_url), "starrocks_be_active_scan_context_count")
        return (cid in held) == with_ours and gauge == len(held) \
            and held == {c.context_id for c in server.contexts.snapshot()}

    plan_b64, tablets = plan_for(client, "demo", "lineitem", "select * from demo.lineitem")
    reader = Reader(be_addr)
    cid = reader.open_ok("demo", "lineitem", plan_b64, tablets, batch_size=100)
    try:
        wait_until(lambda: gauge_counts_the_contexts(with_ours=True), what="the gauge to count the open context")
        # Nobody reads: Spark fills the queue.
        wait_until(lambda: value(scrape(fe_url), "starscan_result_queue_bytes") > 0, what="queued bytes")
        assert value(scrape(fe_url), "starscan_result_queue_depth") >= 1
    finally:
        reader.close_scanner(cid)
        reader.close()
    wait_until(lambda: gauge_counts_the_contexts(with_ours=False), what="the gauge to drop the closed context")


def test_failures_are_counted_by_status(server, fe_url, be_addr, client):
    before = scrape(fe_url)
    assert plan(fe_url, "db1", "no_such_table", "select * from db1.no_such_table", basic("root", "")).status_code == 404
    secret = "not-the-password-xyz"
    assert plan(fe_url, "db1", "t1", SQL_T1, basic("root", secret)).status_code == 401
    reader = Reader(be_addr)
    try:
        bad = reader.open("db1", "t1", "bm90IGEgcGxhbg==", [1])
        assert bad.status.status_code != 0
    finally:
        reader.close()
    after = scrape(fe_url)
    assert value(after, "starscan_plan_requests_total", status=404) - value(before, "starscan_plan_requests_total", status=404) == 1
    assert value(after, "starscan_plan_requests_total", status=401) - value(before, "starscan_plan_requests_total", status=401) == 1
    assert value(after, "starscan_auth_failures_total", port="http") > value(before, "starscan_auth_failures_total", port="http")
    assert value(after, "starscan_scanners_failed_total", status_code="INVALID_ARGUMENT") - \
        value(before, "starscan_scanners_failed_total", status_code="INVALID_ARGUMENT") == 1
    text = httpx.get(f"{fe_url}/metrics").text
    assert secret not in text and "root" not in text  # no users or passwords in labels


def test_reaped_scanners_are_counted(server, fe_url, be_addr, client):
    plan_b64, tablets = plan_for(client, "db1", "t1", SQL_T1)
    reader = Reader(be_addr)
    before = scrape(fe_url)
    try:
        cid = reader.open_ok("db1", "t1", plan_b64, tablets, keep_alive_min=1)
        # The reaper's own pass, run with a clock two minutes ahead (keep_alive_min is at least 1).
        reaped = server.contexts.reap_idle(now=time.monotonic() + 120)
        assert cid in [ctx.context_id for ctx, _ in reaped]
        assert reader.next(cid, 0).status.status_code == NOT_FOUND
    finally:
        reader.close()
    after = scrape(fe_url)
    assert value(after, "starscan_scanners_reaped_total") - value(before, "starscan_scanners_reaped_total") >= 1


def test_an_unexpected_planning_failure_is_a_500_and_counted(server, fe_url, monkeypatch):
    """`_query_plan` skips FastAPI's routing (planner/app._PlanRoute): a failure no error kind
    models is still rendered by the app's handler, counted, and the FE serves on."""

    def broken(*args, **kwargs):
        raise RuntimeError("/some/internal/path exploded")

    before = scrape(fe_url)
    monkeypatch.setattr(server.planner, "query_plan_json", broken)
    resp = plan(fe_url, "db1", "t1", SQL_T1, basic("root", ""))
    assert resp.status_code == 500
    assert re.fullmatch(r"internal error \(id [0-9a-f]{12}\); the server log has the details", resp.json()["exception"])
    assert "/some/internal/path" not in resp.text
    monkeypatch.undo()
    assert plan(fe_url, "db1", "t1", SQL_T1, basic("root", "")).status_code == 200
    after = scrape(fe_url)
    assert value(after, "starscan_plan_requests_total", status=500) - value(before, "starscan_plan_requests_total", status=500) == 1
    assert httpx.put(f"{fe_url}/api/db1/t1/_query_plan", auth=("root", "")).status_code == 405  # only GET and POST
