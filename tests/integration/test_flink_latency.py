"""Readers configured as the StarRocks Flink connector is by default: its Thrift client's
socket timeout is `scan.connect.timeout-ms` (1000), it never retries a call, and it reads
with batch_size 1000, keep_alive_min 10, query_timeout 600 and mem_limit 1 GiB. Any
open_scanner or get_next slower than a second fails such a reader.

`starscan serve` as a user starts it (its defaults: task slots, warm-up, Python workers
started ahead), on demo.lineitem at scale 0.1 (600k rows); one reader, then four at once,
each reads the whole table through a client with a real 1 s socket timeout."""

from __future__ import annotations

import glob
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.servers import start_serve
from support.waits import wait_until

from starscan.client import StarscanClient, thrift_client
from starscan.core.thrift_defs import wire

pytestmark = pytest.mark.slow  # starts its own `starscan serve` (not the quick tier)

FLINK = {"batch_size": 1000, "keep_alive_min": 10, "query_timeout": 600, "mem_limit": 1 << 30}
SQL = "select * from `demo`.`lineitem`"


@pytest.fixture(scope="module")
def flink_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flink")
    proc, http_port, _, log = start_serve(tmp, demo_scale="0.1", spark_master=None, warmup_rows="300000",
                                          user_jvm=True)
    try:
        # The BE listens before its warm-up ends; these readers are timed against a warm one.
        wait_until(lambda: "BE warm-up done" in (tmp / "serve.log").read_text(errors="replace"), timeout_s=300,
                   interval_s=0.5, what="the BE's warm-up")
        files = glob.glob(str(tmp / "wh" / "demo.db" / "lineitem" / "*.parquet"))
        yield http_port, sum(pq.read_metadata(f).num_rows for f in files)
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()


def flink_like_read(http_port: int) -> int:
    """Plan, then open_scanner / get_next... / close on one connection with a 1 s timeout
    and no retry; returns the rows read."""
    body = StarscanClient(f"127.0.0.1:{http_port}", retries=0).plan("demo", "lineitem", SQL)
    host, port = next(iter(body["partitions"].values()))["routings"][0].split(":")
    conn = thrift_client(host, int(port), timeout_s=1.0)
    try:
        opened = conn.open_scanner(wire.TScanOpenParams(
            cluster="default_cluster", database="demo", table="lineitem",
            tablet_ids=[int(t) for t in body["partitions"]], opaqued_query_plan=body["opaqued_query_plan"],
            user="root", passwd="", **FLINK))
        assert opened.status.status_code == wire.TStatusCode.OK, opened.status
        offset = 0
        while True:
            res = conn.get_next(wire.TScanNextBatchParams(context_id=opened.context_id, offset=offset))
            assert res.status.status_code == wire.TStatusCode.OK, res.status
            if res.eos:
                break
            offset += pa.ipc.open_stream(res.rows).read_all().num_rows
        conn.close_scanner(wire.TScanCloseParams(context_id=opened.context_id))
        return offset
    finally:
        conn.close()


@pytest.mark.parametrize("readers", [1, 4, 8])
def test_flink_defaults_read_the_whole_table_within_the_timeout(flink_server, readers):
    http_port, rows = flink_server
    results: list = [None] * readers

    def read(i: int) -> None:
        try:
            results[i] = flink_like_read(http_port)
        except Exception as exc:  # noqa: BLE001 - a timeout is what this test looks for
            results[i] = exc

    threads = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    failures = [r for r in results if not isinstance(r, int)]
    assert not failures, f"{len(failures)} of {readers} readers failed: {failures[0]!r}"
    assert results == [rows] * readers
