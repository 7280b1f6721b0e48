"""Application log lines about scans carry context_id, query_id, user and db.table, in the
human format (key=value appended) and in JSON (one object per line). The lines come from
real scans on the shared server; the formatters are the ones `setup_logging` installs."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import py4j
import pytest
from support.readers import Reader, plan_for

from starscan.core.logs import HumanFormatter, JsonFormatter, setup_logging


@pytest.fixture
def captured():
    def attach(formatter):
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(formatter)
        logger = logging.getLogger("starscan")
        logger.addHandler(handler)
        old = logger.level
        logger.setLevel(logging.INFO)
        attached.append((logger, handler, old))
        return stream

    attached = []
    yield attach
    for logger, handler, old in attached:
        logger.removeHandler(handler)
        logger.setLevel(old)


def scan_and_close_early(client, be_addr) -> tuple[str, str]:
    body = client.plan("db1", "t1", "select k1, v1 from db1.t1")
    plan_b64, tablets = body["opaqued_query_plan"], [int(t) for t in body["partitions"]]
    reader = Reader(be_addr)
    try:
        cid = reader.open_ok("db1", "t1", plan_b64, tablets, batch_size=1)
        reader.next_batch(cid, 0)
        reader.close_scanner(cid)
    finally:
        reader.close()
    return cid, plan_b64


def test_json_scan_lines_carry_the_ids(server, client, be_addr, captured):
    stream = captured(JsonFormatter())
    cid, _ = scan_and_close_early(client, be_addr)
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    mine = [r for r in records if r.get("context_id") == cid]
    assert {r["msg"].split(" ")[0] for r in mine} >= {"open", "close"}
    query_ids = {r["query_id"] for r in mine}
    assert len(query_ids) == 1 and None not in query_ids
    for r in mine:
        assert r["user"] == "root" and r["table"] == "db1.t1" and r["level"] == "INFO" and r["ts"].endswith("Z")


def test_human_scan_lines_carry_the_ids(server, client, be_addr, captured):
    stream = captured(HumanFormatter())
    cid, _ = scan_and_close_early(client, be_addr)
    lines = [line for line in stream.getvalue().splitlines() if cid in line]
    close = [line for line in lines if " close context_id=" in line]
    assert len(close) == 1
    # The message names context_id, user and table itself; query_id is appended once.
    assert "query_id=" in close[0] and close[0].count("context_id=") == 1 and close[0].count("user=") == 1
    assert " INFO starscan.provider: " in close[0]


def test_refused_open_line_carries_what_is_known(server, be_addr, captured):
    stream = captured(JsonFormatter())
    reader = Reader(be_addr)
    try:
        refused = reader.open("db1", "t1", "bm90IGEgcGxhbg==", [1])
    finally:
        reader.close()
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    line = next(r for r in records if r.get("context_id") == refused.context_id)
    assert line["msg"].startswith("open_scanner refused")


def test_setup_logging_formats_and_quiets_py4j():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    try:
        setup_logging("json", "INFO", stream=stream)
        logging.getLogger("py4j.clientserver").info("chatter")
        # py4j's own lines on the root logger (its retries, with a traceback each): INFO
        # dropped, ERROR kept.
        for level in (logging.INFO, logging.ERROR):
            root.handle(root.makeRecord("root", level, str(Path(py4j.__file__).parent / "java_gateway.py"), 1056,
                                        "Exception while sending command.", (), None))
        logging.getLogger("starscan.test").info("hello %s", "world", extra={"context_id": "c1"})
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["level"], line["logger"], line["msg"]) for line in lines] == [
        ("ERROR", "root", "Exception while sending command."), ("INFO", "starscan.test", "hello world")]
    assert lines[1] == {**lines[1], "context_id": "c1"}


@pytest.mark.slow
def test_an_early_close_leaves_spark_quiet_and_a_real_failure_does_not(tmp_path, server):
    """`starscan serve` as a user runs it: readers that close before eos (mid-partition, the
    JVM still writing) leave one INFO close line each and nothing from Spark; a task that
    really fails (a planned file corrupted in place) still shows in Spark's log."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq
    from support.servers import start_serve

    from starscan.client import StarscanClient
    from starscan.core.thrift_defs import wire

    # Spark's tasks read (not the BE itself): what Spark logs is what this test checks.
    proc, http_port, be_port, log = start_serve(tmp_path, demo_from=server.warehouse.location, scan_local_reads="false",
                                                scan_local_read_slots="0")
    try:
        client = StarscanClient(f"127.0.0.1:{http_port}", retries=0, timeout_s=120)
        queries = ("select * from demo.lineitem", "select l_orderkey from demo.lineitem where l_quantity > 5")
        closes_per_query = 2
        for sql in queries:
            for _ in range(closes_per_query):
                plan, tablets = plan_for(client, "demo", "lineitem", sql)
                reader = Reader(("127.0.0.1", be_port))
                try:
                    # A small mem_limit keeps the queue full, so the JVM is mid-partition at the close.
                    cid = reader.open_ok("demo", "lineitem", plan, tablets, batch_size=100, mem_limit=1 << 20)
                    reader.next_batch(cid, 0)
                    reader.close_scanner(cid)
                finally:
                    reader.close()
        quiet_end = (tmp_path / "serve.log").read_text()

        # A real failure: a planned file overwritten in place with garbage (same size and mtime).
        location = tmp_path / "wh" / "logs.db" / "broken"
        location.mkdir(parents=True)
        for i in range(2):
            pq.write_table(pa.table({"id": list(range(i * 1000, i * 1000 + 1000))}), location / f"part-{i}.parquet")
        body = client.plan("logs", "broken", "select id from logs.broken")
        victim = location / "part-1.parquet"
        st = victim.stat()
        victim.write_bytes(b"\x00" * st.st_size)
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
        reader = Reader(("127.0.0.1", be_port))
        try:
            cid = reader.open_ok("logs", "broken", body["opaqued_query_plan"], [int(t) for t in body["partitions"]])
            offset, status = 0, None
            for _ in range(100):
                res = reader.next(cid, offset)
                if res.status.status_code != wire.TStatusCode.OK or res.eos:
                    status = res.status
                    break
                offset += pa.ipc.open_stream(res.rows).read_all().num_rows
            assert status is not None and status.status_code == wire.TStatusCode.INTERNAL_ERROR, status
        finally:
            reader.close()
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
    text = (tmp_path / "serve.log").read_text()
    # After the node listens, and after Spark's own start lines (a node listens first).
    early = quiet_end[max(quiet_end.index(" ready: "), quiet_end.find("SparkSession up")):]
    assert early.count(" before eos") == len(queries) * closes_per_query
    for noise in ("ERROR", "Exception", "Broken pipe", "WARN"):
        assert noise not in early, early
    failure = text[len(quiet_end):]
    assert "ERROR" in failure and "part-1.parquet" in failure  # Spark's own report of the task
