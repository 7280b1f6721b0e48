"""The start-up warm-up scan (provider/warmup.py) runs on the real session and leaves nothing behind."""

from __future__ import annotations


def test_warm_up_scans_and_cleans_up(spark, warehouse_dir, server):
    from starscan.provider.warmup import warm_up

    before = set(p.name for p in warehouse_dir.iterdir())
    tracker = spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup("starscan-warmup"))
    seconds = warm_up(spark, warehouse_dir, 5000, server.service.push_listener())
    assert seconds > 0
    # It ran Spark jobs (a write and two scans, a job per split) under its own job group ...
    assert len(set(tracker.getJobIdsForGroup("starscan-warmup")) - jobs_before) >= 3
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
    before it ends, a scan opened meanwhile reads every row, and that scan stops the
    warm-up (it warms the JVM itself rather than wait for Spark's slots behind it)."""
    from support.servers import own_warehouse, running_server

    from starscan.client import StarscanClient

    warehouse = own_warehouse(spark, tmp_path / "warehouse")
    settings = base_settings.model_copy(update={"warehouse": warehouse, "warmup_rows": 1_000_000, "http_port": 0,
                                                "be_port": 0, "query_port": 0})
    with caplog.at_level("INFO", logger="starscan"), running_server(spark, settings) as srv:
        assert not srv.warmed.is_set(), "start() waited for the warm-up"
        got = StarscanClient(f"http://127.0.0.1:{srv.http_port}", "root", "").read(
            "db1", "t1", "select k1, v1 from db1.t1")
        assert sorted(got.column("k1").to_pylist()) == sorted(r[0] for r in spark.read.parquet(
            str(warehouse / "db1.db" / "t1")).select("k1").collect())
        assert srv.warmed.wait(120)
        assert srv.workers is not None  # the Python workers are kept warm all the same
    assert any("a reader's scan came first" in r.getMessage() for r in caplog.records)
