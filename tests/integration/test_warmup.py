"""The start-up warm-up scan (provider/warmup.py) runs on the real session and leaves nothing behind."""

from __future__ import annotations


def test_warm_up_scans_and_cleans_up(spark, warehouse_dir, server):
    from support.readers import status_tracker

    from starscan.provider.warmup import warm_up

    before = set(p.name for p in warehouse_dir.iterdir())
    jobs_before = set(status_tracker(spark).getJobIdsForGroup("starscan-warmup"))
    seconds = warm_up(spark, warehouse_dir, 5000, server.service.push_listener())
    assert seconds > 0
    # It ran Spark jobs (two scans, a job per split) under its own job group ...
    assert len(set(status_tracker(spark).getJobIdsForGroup("starscan-warmup")) - jobs_before) >= 2
    # ... removed its table, and no catalog listing ever shows it.
    assert set(p.name for p in warehouse_dir.iterdir()) == before
    assert not any(name.startswith(".starscan-warmup") for name in server.warehouse.databases())


def test_a_failed_warm_up_does_not_stop_the_start(spark, base_settings, tmp_path, caplog):
    """Here a file stands where the warm-up table would go; the BE logs it and serves."""
    from starscan.app.server import StarscanServer
    from starscan.provider.warmup import WARMUP_DIR

    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    (warehouse / WARMUP_DIR).write_text("in the way")
    settings = base_settings.model_copy(update={"warehouse": warehouse, "warmup_rows": 1000})
    srv = StarscanServer(settings, spark, fe=False, be=True)
    with caplog.at_level("WARNING", logger="starscan"):
        srv.start()
        assert srv.warmed.wait(120), "the background warm-up did not end"
    try:
        assert srv.be_port and srv.thrift is not None
        assert any("JVM warm-up skipped" in r.getMessage() for r in caplog.records)
    finally:
        srv.stop()


def test_warm_up_is_on_by_default_and_can_be_turned_off():
    from starscan.settings.config import Settings

    assert Settings.model_fields["warmup_rows"].default > 0
    assert Settings(warmup_rows=0).warmup_rows == 0


def test_the_worker_keeper_starts_a_python_worker_per_slot(spark):
    import psutil

    from starscan.provider.worker_keeper import PythonWorkerKeeper

    keeper = PythonWorkerKeeper(spark)
    assert keeper.fill() > 0
    workers = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "worker_daemon" in " ".join(p.cmdline()):
                workers.append(p)
        except psutil.Error:
            pass
    # The daemon plus at least one forked worker per slot.
    assert len(workers) >= keeper.slots() + 1, [p.cmdline() for p in workers]


def test_a_be_serves_scans_while_it_warms_up(spark, base_settings, tmp_path, caplog):
    """The warm-up runs after the BE listens, on a thread of its own: start() returns
    before it ends, a read begun meanwhile gets every row, and its plan stops the warm-up
    (the plan needs the cores, and its scan warms the JVM itself rather than wait for
    Spark's slots behind the warm-up)."""
    from support.servers import own_warehouse, running_server

    from starscan.client import StarscanClient

    warehouse = own_warehouse(spark, tmp_path / "warehouse")
    settings = base_settings.model_copy(update={"warehouse": warehouse, "warmup_rows": 1_000_000, "http_port": 0,
                                                "be_port": 0, "query_port": 0})
    with caplog.at_level("INFO", logger="starscan"), running_server(spark, settings) as srv:
        assert not srv.warmed.is_set(), "start() waited for the warm-up"
        client = StarscanClient(f"http://127.0.0.1:{srv.http_port}", "root", "")
        client.plan("db1", "t1", "select k1 from db1.t1")
        assert srv.warmed.wait(120)
        got = client.read("db1", "t1", "select k1, v1 from db1.t1")
        assert sorted(got.column("k1").to_pylist()) == sorted(r[0] for r in spark.read.parquet(
            str(warehouse / "db1.db" / "t1")).select("k1").collect())
        assert srv.workers is not None  # the Python workers are kept warm all the same
    assert any("a reader's plan or scan came first" in r.getMessage() for r in caplog.records)


def test_a_scan_stops_the_warm_up_of_a_be_without_an_fe(spark, base_settings, server, client, caplog):
    """A BE on its own hears of a read at its first open_scanner (the plan came from
    another FE): the warm-up stops then, and the scan reads every row."""
    from support.readers import Reader, plan_for

    from starscan.app.server import StarscanServer

    settings = base_settings.model_copy(update={"warmup_rows": 1_000_000, "be_port": 0, "be_http_port": 0})
    srv = StarscanServer(settings, spark, fe=False, be=True)
    with caplog.at_level("INFO", logger="starscan"):
        srv.start()
        try:
            assert not srv.warmed.is_set(), "start() waited for the warm-up"
            plan, tablets = plan_for(client, "db1", "t1", "select k1 from db1.t1")
            reader = Reader(("127.0.0.1", srv.be_port))
            try:
                rows = reader.drain(reader.open_ok("db1", "t1", plan, tablets))
            finally:
                reader.client.close()
            assert rows == spark.read.parquet(str(server.warehouse.table_path("db1", "t1"))).count()
            assert srv.warmed.wait(120)
        finally:
            srv.stop()
    assert any("a reader's plan or scan came first" in r.getMessage() for r in caplog.records)


def test_a_stop_ends_the_warm_up_during_its_scan(spark, warehouse_dir, server):
    """A stop while the warm-up scans its table cancels that scan: the warm-up ends with
    WarmUpStopped, runs no second scan, leaves no file and no Spark job running."""
    import threading

    import pytest
    from support.waits import wait_until

    from starscan.provider.warmup import WARMUP_DIR, WarmUpStopped, warm_up

    tracker = spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup("starscan-warmup"))
    stop = threading.Event()

    def stop_once_scanning():
        try:
            wait_until(lambda: set(tracker.getJobIdsForGroup("starscan-warmup")) - jobs_before, 120, 0.02,
                       what="the warm-up's first Spark job")
        finally:
            stop.set()

    threading.Thread(target=stop_once_scanning, daemon=True).start()
    with pytest.raises(WarmUpStopped):
        warm_up(spark, warehouse_dir, 2_000_000, server.service.push_listener(), stop)
    assert stop.is_set()
    assert not (warehouse_dir / WARMUP_DIR).exists()
    wait_until(lambda: not any(tracker.getJobInfo(j).status == "RUNNING"
                               for j in set(tracker.getJobIdsForGroup("starscan-warmup")) - jobs_before),
               timeout_s=60, what="the warm-up's Spark jobs to end")
