"""A node whose Spark JVM dies starts a new SparkSession by itself (starscan.spark.handle):
`starscan serve` as a user runs it, its JVM killed with SIGKILL (as the kernel's OOM killer
or a crash would end it). Meanwhile health says RECOVERING (200: an orchestrator must not
restart the node), plans and arrow-engine scans are served by the node itself, a sql-engine
scan in flight fails over with a retryable error and the bundled client reads it on, exact,
once the new session is up."""

from __future__ import annotations

from collections import Counter

import httpx
import psutil
import pyarrow as pa
import pytest
from support.nodes import write_id_table
from support.readers import arrow_rows, spark_rows
from support.servers import start_serve
from support.waits import wait_until

from starscan.client import ScanStats, StarscanClient

pytestmark = pytest.mark.slow  # a `starscan serve` process of its own, whose JVM is killed

LINEITEM = "select * from demo.lineitem"
FILTERED = "select l_orderkey, l_linenumber, l_quantity from demo.lineitem where l_quantity > 30"


def _rows(table: pa.Table) -> Counter:
    return arrow_rows(table.to_batches())


def _metric(base: str, name: str) -> float:
    for line in httpx.get(f"{base}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {name}")


def _kill_jvm(proc) -> None:
    java = [p for p in psutil.Process(proc.pid).children(recursive=True) if "java" in p.name()]
    assert java, "precondition: Spark's JVM is a child of serve"
    for p in java:
        p.kill()
    wait_until(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in java),
               timeout_s=30, what="Spark's JVM to die")


def _stop(proc, log) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except Exception:  # noqa: BLE001
            proc.kill()
    log.close()


def test_a_killed_jvm_is_replaced_while_the_node_serves(tmp_path, server, spark):
    # A small result queue: the sql engine's task is still pushing rows when the JVM dies.
    proc, http_port, _be_port, log = start_serve(tmp_path, demo_from=server.warehouse.location, spark_master="local[2]",
                                                 queue_max_bytes=str(1 << 20))
    base = f"http://127.0.0.1:{http_port}"
    admin = ("root", "")

    def health() -> dict:
        return httpx.get(f"{base}/api/health", timeout=10).json()

    def engine(name: str) -> None:
        r = httpx.post(f"{base}/api/update_config?scan_engine={name}", auth=admin, timeout=10)
        assert r.status_code == 200, r.text

    try:
        client = StarscanClient(f"127.0.0.1:{http_port}", timeout_s=120)
        tablets = list(server.warehouse.snapshot("demo", "lineitem").by_id)
        columns = [f.name for f in spark.read.parquet(str(server.warehouse.snapshot("demo", "lineitem").location)).schema]
        expected = spark_rows(spark, server, "demo", "lineitem", tablets, columns)
        expected_filtered = spark_rows(spark, server, "demo", "lineitem", tablets, ["l_orderkey", "l_linenumber", "l_quantity"],
                                       "l_quantity > 30")
        assert _rows(client.read("demo", "lineitem", LINEITEM)) == expected
        assert health()["status"] == "OK"

        # A sql-engine scan in flight ...
        engine("sql")
        stats = ScanStats()
        batches = client.batches("demo", "lineitem", LINEITEM, batch_size=512, stats=stats)
        received = [next(batches)]
        # ... when Spark's JVM is killed.
        _kill_jvm(proc)
        state = health()
        assert state["status"] == "RECOVERING", state
        r = httpx.get(f"{base}/api/health", timeout=10)
        assert r.status_code == 200  # not a reason to restart the node

        # Meanwhile the node plans (the table's schema is known) and reads arrow-engine scans itself.
        engine("arrow")
        during = client.read("demo", "lineitem", FILTERED)
        still = health()["status"]
        assert _rows(during) == expected_filtered
        admin_state = httpx.get(f"{base}/api/admin/state", auth=admin, timeout=10).json()["spark"]
        assert admin_state["state"] in ("RECOVERING", "UP"), admin_state
        engine("sql")

        # The scan in flight fails over (a retryable SERVICE_UNAVAILABLE) and is read on, exact,
        # once the new session is up.
        received.extend(batches)
        assert arrow_rows(received) == expected
        assert stats.failovers >= 1, stats  # it was in flight: the JVM's death reached the reader
        wait_until(lambda: health()["status"] == "OK", timeout_s=180, interval_s=0.2, what="the new SparkSession")
        assert still in ("RECOVERING", "OK")

        # The new session scans on both engines, and the metrics tell what happened.
        assert _rows(client.read("demo", "lineitem", LINEITEM)) == expected
        engine("auto")
        assert _rows(client.read("demo", "lineitem", FILTERED)) == expected_filtered
        assert _metric(base, "starscan_spark_restarts_total") == 1
        assert _metric(base, 'starscan_spark_state{state="UP"}') == 1
        assert _metric(base, "starscan_spark_last_recovery_seconds") > 0
        print(f"recovered {_metric(base, 'starscan_spark_last_recovery_seconds'):.1f} s after the JVM was seen dead")
        assert "Spark's JVM is gone" in (tmp_path / "serve.log").read_text()
    finally:
        _stop(proc, log)


def test_an_arrow_scan_whose_spark_tasks_die_with_the_jvm_reads_on(tmp_path, server, spark):
    """An arrow-engine scan read by Spark's tasks (the BE's own reads off): the JVM's death
    loses its readers, not the scan; the next readers read on from where the rows stopped,
    as Spark jobs of the new session, on the same scanner. The table (~30 MB of Arrow) is far
    larger than what the scan's queue and the tasks' push sockets hold, so the tasks are still
    reading when the JVM dies after the client's first batch (demo.lineitem here is small
    enough for them to have pushed every row by then, on a busy machine)."""
    files, rows = 16, 100_000
    write_id_table(tmp_path / "wh" / "big.db" / "events", files, rows)
    proc, http_port, _be_port, log = start_serve(tmp_path, demo_from=server.warehouse.location, spark_master="local[2]",
                                                 queue_max_bytes=str(1 << 20), scan_engine="arrow",
                                                 scan_local_reads="false", scan_local_read_slots="0")
    try:
        client = StarscanClient(f"127.0.0.1:{http_port}", timeout_s=120)
        stats = ScanStats()
        batches = client.batches("big", "events", "select id, v from big.events", batch_size=4096, stats=stats)
        received = [next(batches)]
        _kill_jvm(proc)
        received.extend(batches)
        got = Counter(pair for batch in received
                      for pair in zip(batch.column("id").to_pylist(), batch.column("v").to_pylist()))
        assert got == Counter((i, str(i)) for i in range(files * rows))
        assert (stats.scanners, stats.failovers) == (1, 0), stats  # the same scanner, read on
        text = (tmp_path / "serve.log").read_text()
        assert "a reader's Spark task was lost (Spark's JVM died under the scan" in text
        assert _metric(f"http://127.0.0.1:{http_port}", "starscan_scan_readers_lost_total") >= 1
    finally:
        _stop(proc, log)
