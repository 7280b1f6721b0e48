"""A BE on a real Spark standalone cluster: a master and a worker started from pyspark's own
jars (`spark-class ...deploy.master.Master` / `...deploy.worker.Worker`, 127.0.0.1, small
memory), `starscan serve --spark-master spark://...` on them. Its scans run on the
cluster's executor; every value equals what the same scans give on local Spark (the shared
test server, whose values tests/integration/test_scan_values.py checks against Spark SQL)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from support.nodes import spark_daemon, write_id_table
from support.servers import basic, running_server
from support.waits import free_port, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark_line]  # starts a Spark master, a worker and `starscan serve`

IDS_FILES, IDS_PER_FILE = 4, 200_000


@pytest.fixture(scope="module")
def cluster_node(tmp_path_factory, spark, base_settings):
    from starscan.app.demo import create_demo
    from starscan.tables.catalog import Warehouse

    root = tmp_path_factory.mktemp("cluster")
    warehouse = root / "wh"
    create_demo(spark, Warehouse(warehouse, 0), 0.002, 256 << 10)  # written by local Spark
    write_id_table(warehouse / "demo.db" / "ids", IDS_FILES, IDS_PER_FILE)  # splits far larger than socket buffers
    master_port, master_ui, worker_ui = free_port(), free_port(), free_port()
    http_port, be_port, query_port = free_port(), free_port(), free_port()
    master = spark_daemon(root, "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                          "--port", str(master_port), "--webui-port", str(master_ui))
    worker = spark_daemon(root, "worker", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                          "--cores", "2", "--memory", "2g", "--webui-port", str(worker_ui),
                          f"spark://127.0.0.1:{master_port}")
    procs = [master, worker]
    try:
        wait_until(lambda: "Successfully registered with master" in (root / "worker.log").read_text(),
                   timeout_s=180, interval_s=0.5, what="the Spark worker to register")
        env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
        # scan_yield_after_s long: a blocked scan's tasks keep their executor cores until the
        # scan is stopped (test_closing_a_scanner_frees_the_clusters_executor). No reads in the
        # BE's own process: every scan's rows come from the cluster's executor.
        env.update(SPARK_LOCAL_IP="127.0.0.1", STARSCAN_FLIGHT_SQL_PORT="0", STARSCAN_BE_FLIGHT_PORT="0", STARSCAN_WARMUP_ROWS="0", STARSCAN_SCAN_YIELD_AFTER_S="600",
                   STARSCAN_SCAN_LOCAL_READS="false", STARSCAN_SCAN_LOCAL_READ_SLOTS="0",
                   STARSCAN_SPARK_CONF="spark.executor.memory=1g; spark.executor.cores=2; spark.cores.max=2")
        log = (root / "serve.log").open("w")
        node = subprocess.Popen([sys.executable, "-m", "starscan", "serve", "--warehouse", str(warehouse),
                                 "--spark-master", f"spark://127.0.0.1:{master_port}", "--http-port", str(http_port),
                                 "--be-port", str(be_port), "--query-port", str(query_port), "--bind-host", "127.0.0.1",
                                 "--demo-scale", "0"], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        procs.append(node)

        def ready() -> bool:
            assert node.poll() is None, (root / "serve.log").read_text()[-3000:]
            try:
                return httpx.get(f"http://127.0.0.1:{http_port}/api/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout_s=300, interval_s=0.5, what="starscan serve on the cluster")
        settings = base_settings.model_copy(update={"warehouse": warehouse, "state_dir": root / "local-state"})
        with running_server(spark, settings) as local:
            yield {"fe": f"127.0.0.1:{http_port}", "root": root, "local": f"127.0.0.1:{local.http_port}",
                   "master_ui": master_ui, "be": ("127.0.0.1", be_port)}
    finally:
        for proc in reversed(procs):
            proc.kill()
            proc.wait(60)


@pytest.mark.parametrize("engine", ["auto", "sql"])
@pytest.mark.parametrize("table, sql", [
    ("all_types", "select * from demo.all_types"),
    ("lineitem", "select * from demo.lineitem where l_quantity > 10 and l_shipmode <> 'MAIL'"),
])
def test_scans_on_the_cluster_equal_local_spark(cluster_node, engine, table, sql):
    from starscan.client import StarscanClient

    for fe in (cluster_node["fe"], cluster_node["local"]):
        r = httpx.post(f"http://{fe}/api/update_config", params={"scan_engine": engine},
                       headers={"Authorization": basic("root", "")}, timeout=30)
        assert r.status_code == 200, r.text
    before = _executor_tasks(cluster_node["root"])
    on_cluster = StarscanClient(cluster_node["fe"], timeout_s=120).read("demo", table, sql)
    # The scan's tasks ran on the cluster's executor (the worker copies its log a moment later).
    wait_until(lambda: _executor_tasks(cluster_node["root"]) > before, 60, what="the executor's log of the scan's tasks")
    on_local = StarscanClient(cluster_node["local"], timeout_s=120).read("demo", table, sql)
    assert on_cluster.num_rows == on_local.num_rows > 0
    assert on_cluster.schema == on_local.schema
    key = on_local.column_names[0]
    assert on_cluster.sort_by(key).equals(on_local.sort_by(key)) if table == "lineitem" else \
        sorted(map(repr, on_cluster.to_pylist())) == sorted(map(repr, on_local.to_pylist()))
    apps = httpx.get(f"http://127.0.0.1:{cluster_node['master_ui']}/json/", timeout=30).json()
    assert [app["name"] for app in apps["activeapps"]] == ["starscan"], apps


def _executor_tasks(root: Path) -> int:
    """Tasks the worker's executors have started (their logs say "Running task" for each)."""
    return sum(p.read_text(errors="replace").count("Executor: Running task") for p in (root / "work").glob("app-*/*/stderr"))


def test_closing_a_scanner_frees_the_clusters_executor(cluster_node):
    """A scanner whose tasks on the executor are blocked (its reader reads one batch, its
    queue is full) is closed: its Spark jobs end on the cluster (the scanner's job group),
    so the executor's two cores serve the next scans, which read every row."""
    from support.readers import Reader, plan_for

    from starscan.client import StarscanClient

    client = StarscanClient(cluster_node["fe"], timeout_s=120)
    sql = "select * from demo.lineitem"
    for _ in range(2):  # twice: a leftover task from the first would hold a core in the second
        opaque, tablets = plan_for(client, "demo", "lineitem", sql)
        reader = Reader(cluster_node["be"])
        try:
            cid = reader.open_ok("demo", "lineitem", opaque, tablets, batch_size=64, mem_limit=64 << 10)
            assert reader.next_batch(cid, 0).num_rows > 0  # the tasks run, and block on the full queue
            before = _executor_tasks(cluster_node["root"])
            reader.close_scanner(cid)
        finally:
            reader.close()
        full = client.read("demo", "lineitem", sql)  # the executor's cores are free again
        assert full.num_rows == StarscanClient(cluster_node["local"], timeout_s=120).read("demo", "lineitem", sql).num_rows
        assert _executor_tasks(cluster_node["root"]) > before


def _executors(root: Path) -> list:
    """The cluster's executor JVMs (the worker starts them with their folder under ``root/work``)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if "CoarseGrainedExecutorBackend" in cmdline:
            try:
                if Path(proc.cwd()).is_relative_to(root / "work"):
                    found.append(proc)
            except (psutil.Error, ValueError):
                continue
    return found


@pytest.mark.parametrize("engine", ["auto", "sql"])
def test_an_executor_lost_mid_scan_is_retried_and_the_reader_gets_every_row(cluster_node, engine):
    """The executor running a scan's tasks is killed (SIGKILL: a lost machine) while its reader
    is half-way: the worker starts a new executor, Spark runs the lost tasks again on it, and
    they read their splits on past the rows that arrived. The reader, which did nothing but
    read on, gets every row exactly once; the longest wait for a reply is printed (what a
    reader sees meanwhile; replies begun early keep a Flink reader's timeout from firing)."""
    from support.readers import Reader, plan_for, scrape, value

    from starscan.client import StarscanClient

    r = httpx.post(f"http://{cluster_node['fe']}/api/update_config", params={"scan_engine": engine},
                   headers={"Authorization": basic("root", "")}, timeout=30)
    assert r.status_code == 200, r.text
    sql = "select id, v from demo.ids"
    lost_before = value(scrape(f"http://{cluster_node['fe']}"), "starscan_scan_readers_lost_total")
    opaque, tablets = plan_for(StarscanClient(cluster_node["fe"], timeout_s=120), "demo", "ids", sql)
    reader = Reader(cluster_node["be"], timeout_s=300)
    try:
        cid = reader.open_ok("demo", "ids", opaque, tablets, batch_size=4096, mem_limit=256 << 10)
        first = reader.next_batch(cid, 0)  # the tasks run on the executor, held mid-split by the full queue
        [executor] = wait_until(lambda: _executors(cluster_node["root"]) or None, 60, what="the executor")
        executor.kill()
        executor.wait(60)
        waits: list[float] = []
        rest, _ = reader.drain_batches(cid, first.num_rows, seconds=waits)
        batches, longest = [first, *rest], max(waits)
        reader.close_scanner(cid)
    finally:
        reader.close()
    print(f"\n{engine}: executor killed after the first reply; longest get_next after it {longest:.1f} s")
    got = [k for b in batches for k in zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True)]
    assert len(got) == len(set(got)) == IDS_FILES * IDS_PER_FILE
    assert set(got) == {(i, str(i)) for i in range(IDS_FILES * IDS_PER_FILE)}
    assert _executors(cluster_node["root"]), "no new executor"
    lost = wait_until(lambda: value(scrape(f"http://{cluster_node['fe']}"), "starscan_scan_readers_lost_total")
                      - lost_before or None, 60, what="the scan's lost readers to be counted")
    assert lost >= 1  # the kill hit the scan's tasks: what the reader read on is their retry

