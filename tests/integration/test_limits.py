"""Limits on a server of their own (the session's warehouse, small caps): each is hit and
answered with a clear status, never a hang, and the server keeps serving."""

from __future__ import annotations

import json
import os
import socket
import struct
import time
import uuid

import httpx
import psutil
import pytest
from support.servers import basic, plan, running_server
from support.waits import wait_until

from starscan.client import thrift_client
from starscan.core.thrift_defs import wire

OK = wire.TStatusCode.OK
TOO_MANY_TASKS = wire.TStatusCode.TOO_MANY_TASKS
INVALID_ARGUMENT = wire.TStatusCode.INVALID_ARGUMENT
TIMEOUT = wire.TStatusCode.TIMEOUT
MIB = 1 << 20
LINEITEM_SQL = "select l_orderkey, l_comment from demo.lineitem"


@pytest.fixture(scope="module")
def limited(server, spark, base_settings):
    settings = base_settings.model_copy(update={
        "plan_rate_per_user": 0.25, "plan_rate_burst": 3, "plan_concurrency": 1,
        "max_scanners": 4, "max_scanners_per_user": 2,
        "max_tablets_per_scanner": 2, "max_tablets_per_plan": 10,
        "max_sql_length": 2000, "max_request_body_bytes": 8192,
        # Scanners opened and not read hold their tasks' slots (local[2]) until they yield: a
        # scanner opened after them gets a slot soon. (The query timeout's cap is lowered by
        # its own test only: a 2 s cap on every scan here failed them on a loaded machine.)
        "scan_yield_after_s": 0.2,
        "queue_max_bytes": 2 * MIB, "total_queue_max_bytes": 3 * MIB,
        "max_thrift_message_bytes": 1 << 16,
        "audit_log": base_settings.warehouse_path / "_starscan" / f"audit-limits-{uuid.uuid4().hex[:6]}.log",
    })
    with running_server(spark, settings) as srv:
        yield srv


def fe(srv) -> str:
    return f"http://127.0.0.1:{srv.http_port}"


def new_user(srv) -> tuple[str, str]:
    """A fresh user per test: the plan rate is per user."""
    name = f"lim_{uuid.uuid4().hex[:10]}"
    srv.users.set_password(name, "pw", create=True)
    srv.users.grant(name, "*.*")
    return name, basic(name, "pw")


def lineitem_plan(srv, auth) -> dict:
    resp = plan(fe(srv), "demo", "lineitem", LINEITEM_SQL, auth)
    assert resp.status_code == 200, resp.text
    return resp.json()


def open_params(body, **kwargs):
    args = dict(cluster="default_cluster", database="demo", table="lineitem",
                tablet_ids=[int(t) for t in body["partitions"]][:2],
                opaqued_query_plan=body["opaqued_query_plan"], batch_size=4096)
    args.update(kwargs)
    return wire.TScanOpenParams(**args)


def read_all(conn, context_id) -> int:
    offset = 0
    while True:
        res = conn.get_next(wire.TScanNextBatchParams(context_id=context_id, offset=offset))
        assert res.status.status_code == OK, res.status
        if res.eos:
            return offset
        import pyarrow as pa

        offset += pa.ipc.open_stream(res.rows).read_all().num_rows


def test_plan_rate_is_capped_per_user(limited):
    name, auth = new_user(limited)
    _, other = new_user(limited)
    codes = [plan(fe(limited), "db1", "t1", "select k1 from db1.t1", auth).status_code for _ in range(3)]
    assert codes == [200, 200, 200]  # the burst
    refused = plan(fe(limited), "db1", "t1", "select k1 from db1.t1", auth)
    assert refused.status_code == 429
    body = refused.json()
    assert body["status"] == 429 and f"user {name} is over plan_rate_per_user=0.25/s" in body["exception"]
    assert int(refused.headers["retry-after"]) >= 1
    assert plan(fe(limited), "db1", "t1", "select k1 from db1.t1", other).status_code == 200
    time.sleep(float(refused.headers["retry-after"]))
    assert plan(fe(limited), "db1", "t1", "select k1 from db1.t1", auth).status_code == 200


def test_plans_are_made_one_at_a_time_with_plan_concurrency_1(limited, monkeypatch):
    """Concurrent _query_plan calls all get their plan, but no more than plan_concurrency are
    planned at once (the rest wait). The spy holds each planning 0.2 s so that without the
    bound the calls would overlap."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    planner = limited.planner
    real = planner.query_plan_json
    lock = threading.Lock()
    state = {"now": 0, "most": 0}

    def spy(*args, **kwargs):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            time.sleep(0.2)
            return real(*args, **kwargs)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(planner, "query_plan_json", spy)
    users = [new_user(limited)[1] for _ in range(5)]
    with ThreadPoolExecutor(5) as pool:
        codes = list(pool.map(lambda auth: plan(fe(limited), "db1", "t1", "select k1 from db1.t1", auth).status_code,
                              users))
    assert codes == [200] * 5
    assert state["most"] == 1


def test_scanner_caps_per_user_and_in_total(limited):
    users = [new_user(limited) for _ in range(3)]
    plans = [lineitem_plan(limited, auth) for _, auth in users]
    conn = thrift_client("127.0.0.1", limited.be_port)
    opened = []
    try:
        for body in plans[:2]:
            for _ in range(2):
                res = conn.open_scanner(open_params(body, batch_size=1))
                assert res.status.status_code == OK, res.status
                opened.append(res.context_id)
        # user 0 holds 2 = max_scanners_per_user
        res = conn.open_scanner(open_params(plans[0], batch_size=1))
        assert res.status.status_code == TOO_MANY_TASKS
        assert f"too many scanners for user '{users[0][0]}': 2 open, max_scanners_per_user=2" in res.status.error_msgs[0]
        # 4 open = max_scanners: a third user is refused too
        res = conn.open_scanner(open_params(plans[2], batch_size=1))
        assert res.status.status_code == TOO_MANY_TASKS
        assert "too many scanners: 4 open, max_scanners=4" in res.status.error_msgs[0]
        # closing one makes room
        conn.close_scanner(wire.TScanCloseParams(context_id=opened.pop()))
        res = conn.open_scanner(open_params(plans[2], batch_size=4096))
        assert res.status.status_code == OK, res.status
        # It reads once the held scanners are gone (they would share local[2]'s two slots).
        for cid in opened:
            conn.close_scanner(wire.TScanCloseParams(context_id=cid))
        opened = [res.context_id]
        assert read_all(conn, res.context_id) > 0
    finally:
        for cid in opened:
            conn.close_scanner(wire.TScanCloseParams(context_id=cid))
        conn.close()


def test_tablets_per_scanner_and_per_plan(limited):
    _, auth = new_user(limited)
    body = lineitem_plan(limited, auth)
    tablets = [int(t) for t in body["partitions"]]
    assert len(tablets) > 2
    conn = thrift_client("127.0.0.1", limited.be_port)
    try:
        res = conn.open_scanner(open_params(body, tablet_ids=tablets))
        assert res.status.status_code == INVALID_ARGUMENT
        assert f"{len(tablets)} tablet_ids in one open_scanner, more than max_tablets_per_scanner=2" in res.status.error_msgs[0]
    finally:
        conn.close()
    resp = plan(fe(limited), "db1", "sales", "select id from db1.sales", auth)
    assert resp.status_code == 400
    assert "more than max_tablets_per_plan=10" in resp.json()["exception"]
    # A WHERE on the partition columns brings it under the cap.
    resp = plan(fe(limited), "db1", "sales", "select id from db1.sales where region = 'eu'", auth)
    assert resp.status_code == 200, resp.text


def test_sql_length_and_body_size(limited):
    _, auth = new_user(limited)
    long_sql = "select k1 from db1.t1 where " + " or ".join(["k1 = 1"] * 300)
    resp = plan(fe(limited), "db1", "t1", long_sql, auth)
    assert resp.status_code == 413
    assert f"sql is {len(long_sql)} characters, more than max_sql_length=2000" in resp.json()["exception"]
    big = json.dumps({"sql": "select k1 from db1.t1", "pad": "x" * (10 * MIB)})
    resp = httpx.post(f"{fe(limited)}/api/db1/t1/_query_plan", content=big, headers={"Authorization": auth}, timeout=60)
    assert resp.status_code == 413 and "max_request_body_bytes=8192" in resp.json()["exception"]

    def chunks():  # no Content-Length: the limit holds while streaming
        for _ in range(64):
            yield b" " * 1024

    _, auth2 = new_user(limited)  # every request counts against the plan rate
    resp = httpx.post(f"{fe(limited)}/api/db1/t1/_query_plan", content=chunks(), headers={"Authorization": auth2}, timeout=60)
    assert resp.status_code == 413
    assert plan(fe(limited), "db1", "t1", "select k1 from db1.t1", auth2).status_code == 200


@pytest.fixture
def two_second_timeout_cap(limited):
    saved = limited.service.settings.query_timeout_max_s
    limited.ops.update_config({"query_timeout_max_s": 2})  # the run-time config path
    yield
    limited.ops.update_config({"query_timeout_max_s": saved})


def test_query_timeout_is_capped_by_the_server_maximum(limited, two_second_timeout_cap):
    _, auth = new_user(limited)
    resp = plan(fe(limited), "demo", "lineitem", "select * from demo.lineitem", auth)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    conn = thrift_client("127.0.0.1", limited.be_port)
    try:
        # A queue smaller than the scan: production cannot finish before the timeout.
        res = conn.open_scanner(open_params(body, batch_size=1, query_timeout=3600, mem_limit=MIB))
        assert res.status.status_code == OK
        first = conn.get_next(wire.TScanNextBatchParams(context_id=res.context_id, offset=0))
        assert first.status.status_code == OK and not first.eos
        ctx = limited.contexts.get(res.context_id)
        # The client asked for an hour; query_timeout_max_s=2 wins.
        wait_until(lambda: ctx.queue.error is not None, 60, interval_s=0.2, what="the capped query_timeout")
        got = conn.get_next(wire.TScanNextBatchParams(context_id=res.context_id, offset=1))
        assert got.status.status_code == TIMEOUT, got.status
        conn.close_scanner(wire.TScanCloseParams(context_id=res.context_id))
    finally:
        conn.close()


def test_all_queues_together_stay_within_the_server_budget(limited):
    budget = limited.service.budget
    users = [new_user(limited) for _ in range(2)]
    conns, scanners = [], []
    try:
        for _, auth in users:
            body = lineitem_plan(limited, auth)
            for _ in range(2):
                conn = thrift_client("127.0.0.1", limited.be_port, timeout_s=120)
                res = conn.open_scanner(open_params(body, query_timeout=600))
                assert res.status.status_code == OK, res.status
                conns.append(conn)
                scanners.append(res.context_id)
        # Nobody reads: production fills the queues and pauses at the shared budget.
        wait_until(lambda: budget.used >= 3 * MIB - MIB, 60, what="the queues to fill")
        samples = []
        for _ in range(20):
            samples.append(budget.used)
            for ctx in limited.contexts.snapshot():
                if ctx.queue is not None:
                    assert ctx.queue.bytes <= max(2 * MIB, ctx.queue.peak_bytes)
            time.sleep(0.1)
        largest_batch = max(ctx.queue.largest_batch for ctx in limited.contexts.snapshot() if ctx.queue is not None)
        assert 0 < largest_batch < MIB
        # The bound: the budget, plus at most one batch per scanner admitted past it.
        assert max(samples) <= 3 * MIB + len(scanners) * largest_batch
        # ... and every scanner still completes, with all its rows.
        rows = [read_all(conn, cid) for conn, cid in zip(conns, scanners)]
        assert len(set(rows)) == 1 and rows[0] > 0
    finally:
        for conn, cid in zip(conns, scanners):
            conn.close_scanner(wire.TScanCloseParams(context_id=cid))
            conn.close()
    wait_until(lambda: budget.used == 0, 30, what="closed scanners to return their bytes")


def _huge_string_request(declared: int) -> bytes:
    """open_scanner whose first string field declares ``declared`` bytes and sends 10."""
    name = b"open_scanner"
    out = struct.pack("!iI", -2147418111, len(name)) + name + struct.pack("!i", 1)  # version|CALL, name, seqid
    out += struct.pack("!bh", 12, 1)            # field 1: struct (TScanOpenParams)
    out += struct.pack("!bhi", 11, 1, declared) + b"x" * 10  # its field 1 (cluster): string of `declared` bytes
    return out


@pytest.mark.parametrize("declared", [(1 << 16) + 1, 1 << 30, 2**31 - 1])
def test_a_huge_declared_length_allocates_nothing_and_drops_only_that_connection(limited, declared):
    proc = psutil.Process(os.getpid())
    before = proc.memory_info().rss
    with socket.create_connection(("127.0.0.1", limited.be_port), timeout=30) as sock:
        sock.sendall(_huge_string_request(declared))
        sock.settimeout(30)
        assert sock.recv(1024) == b""  # the server hung up at once instead of waiting for 2 GB
    assert proc.memory_info().rss - before < 256 * MIB
    # Everyone else is served.
    _, auth = new_user(limited)
    body = lineitem_plan(limited, auth)
    conn = thrift_client("127.0.0.1", limited.be_port)
    try:
        res = conn.open_scanner(open_params(body))
        assert res.status.status_code == OK
        assert read_all(conn, res.context_id) > 0
        conn.close_scanner(wire.TScanCloseParams(context_id=res.context_id))
    finally:
        conn.close()


def test_limits_are_listed_in_the_security_doc():
    from pathlib import Path

    from starscan.settings.config import Settings

    readme = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text(encoding="utf-8")
    for key in ("plan_rate_per_user", "plan_rate_burst", "max_scanners", "max_scanners_per_user",
                "total_queue_max_bytes", "query_timeout_max_s", "max_tablets_per_scanner", "max_tablets_per_plan",
                "max_sql_length", "max_request_body_bytes", "max_thrift_message_bytes", "login_max_failures",
                "login_lockout_s", "plan_concurrency"):
        assert key in Settings.model_fields
        assert f"`{key}`" in readme, f"{key} is not documented in docs/security.md"
