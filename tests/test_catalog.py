"""The warehouse catalog: names, tablets, versions and the listing cache (no Spark needed)."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from starscan.catalog import Warehouse
from starscan.errors import DatabaseNotFound, TableNotFound


def _write(path, rows=3):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"a": list(range(rows))}), path)


@pytest.fixture()
def wh(tmp_path):
    root = tmp_path / "wh"
    _write(root / "d1.db" / "t" / "part-0.parquet")
    _write(root / "d1.db" / "t" / "part-1.parquet")
    (root / "d1.db" / "t" / "_SUCCESS").write_text("")
    (root / "d1.db" / "t" / ".part-0.parquet.crc").write_text("x")
    _write(root / "d1.db" / "p" / "region=eu" / "day=2024-01-01" / "f.parquet")
    _write(root / "d1.db" / "p" / "region=us%2Fwest" / "day=2024-01-02" / "f.parquet")
    _write(root / "d1.db" / "p" / "region=__HIVE_DEFAULT_PARTITION__" / "day=2024-01-02" / "f.parquet")
    _write(root / "plain" / "f.parquet")  # a table of the `default` database
    (root / "_starscan").mkdir()
    return Warehouse(root, listing_ttl_s=60)


def test_names(wh):
    assert wh.databases() == ["default", "d1"]
    assert wh.tables("d1") == ["p", "t"]
    assert wh.tables("default") == ["plain"]
    assert wh.has_table("d1", "t") and not wh.has_table("d1", "nope")
    with pytest.raises(DatabaseNotFound, match=r"Database \[nodb\] does not exists"):
        wh.snapshot("nodb", "t")
    with pytest.raises(TableNotFound, match=r"Table \[nope\] does not exists"):
        wh.snapshot("d1", "nope")
    for bad in ("..", "../d1", "_starscan", ".hidden", "a/b"):
        with pytest.raises((DatabaseNotFound, TableNotFound)):
            wh.snapshot(bad, "t")
        with pytest.raises(TableNotFound):
            wh.snapshot("d1", bad)


def test_tablets_are_files_with_stable_ids(wh, tmp_path):
    snap = wh.snapshot("d1", "t")
    assert [t.files[0].path for t in snap.tablets] == ["part-0.parquet", "part-1.parquet"]  # hidden files skipped
    ids = [t.tablet_id for t in snap.tablets]
    assert all(0 < i < 2**63 for i in ids) and len(set(ids)) == 2
    assert 0 < snap.version <= 2**31 - 1
    again = Warehouse(wh.root, listing_ttl_s=0).snapshot("d1", "t")  # another process, same data
    assert [t.tablet_id for t in again.tablets] == ids and again.version == snap.version


def test_partition_values_are_decoded(wh):
    snap = wh.snapshot("d1", "p")
    assert snap.partition_columns == ("region", "day")
    parts = sorted((t.partition["region"] or "", t.partition["day"]) for t in snap.tablets)
    assert parts == [("", "2024-01-02"), ("eu", "2024-01-01"), ("us/west", "2024-01-02")]
    assert any(t.partition["region"] is None for t in snap.tablets)


def test_version_changes_with_the_file_set_and_the_cache_sees_it(wh):
    before = wh.snapshot("d1", "t")
    time.sleep(0.01)
    _write(wh.root / "d1.db" / "t" / "part-2.parquet")
    after = wh.snapshot("d1", "t")  # cached for 60 s, but the directory changed
    assert after.version != before.version and len(after.tablets) == 3
    # A rewritten file (same name, new content) is a new tablet and a new version.
    path = wh.root / "d1.db" / "t" / "part-0.parquet"
    _write(path, rows=50)
    os.utime(wh.root / "d1.db" / "t")  # rewrite in place does not touch the directory
    rewritten = wh.snapshot("d1", "t")
    assert rewritten.version != after.version
    assert {t.tablet_id for t in rewritten.tablets} != {t.tablet_id for t in after.tablets}


def test_cache_serves_unchanged_tables(wh):
    first = wh.snapshot("d1", "t")
    assert wh.snapshot("d1", "t") is first
    wh.invalidate("d1", "t")
    assert wh.snapshot("d1", "t") is not first
