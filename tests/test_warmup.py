"""The start-up warm-up scan (starscan/warmup.py) runs on the real session and leaves nothing behind."""

from __future__ import annotations


def test_warm_up_scans_and_cleans_up(spark, warehouse_dir, server):
    from starscan.warmup import warm_up

    before = set(p.name for p in warehouse_dir.iterdir())
    tracker = spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup("starscan-warmup"))
    seconds = warm_up(spark, warehouse_dir, 5000)
    assert seconds > 0
    # It ran Spark jobs (a write and two scans) under its own job group ...
    assert len(set(tracker.getJobIdsForGroup("starscan-warmup")) - jobs_before) >= 3
    # ... removed its table, and no catalog listing ever shows it.
    assert set(p.name for p in warehouse_dir.iterdir()) == before
    assert not any(name.startswith(".starscan-warmup") for name in server.warehouse.databases())


def test_warm_up_is_on_by_default_and_can_be_turned_off():
    from starscan.config import Settings

    assert Settings.model_fields["warmup_rows"].default > 0
    assert Settings(warmup_rows=0).warmup_rows == 0
