"""The warehouse catalog: names, tablets, versions and the listing cache (no Spark needed)."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.mtimes import later
from support.waits import wait_until

from starscan.core.errors import DatabaseNotFound, TableNotFound
from starscan.tables.catalog import Warehouse
from starscan.tables.tablets import Sizing


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
    for bad in ("..", "../d1", "_starscan", ".hidden", "a/b", "d1\x00"):
        with pytest.raises((DatabaseNotFound, TableNotFound)):
            wh.snapshot(bad, "t")
        with pytest.raises(TableNotFound):
            wh.snapshot("d1", bad)


ONE_FILE_EACH = Sizing(target_bytes=1024, open_cost_bytes=1 << 20)  # every file is a tablet of its own


def test_small_files_are_packed_into_one_tablet_with_a_stable_id(wh):
    snap = wh.snapshot("d1", "t")
    assert [[f.path for f in t.files] for t in snap.tablets] == [["part-0.parquet", "part-1.parquet"]]  # hidden skipped
    assert [f.path for f in snap.files] == ["part-0.parquet", "part-1.parquet"]
    ids = [t.tablet_id for t in snap.tablets]
    assert all(0 < i < 2**63 for i in ids)
    assert 0 < snap.version <= 2**31 - 1
    again = Warehouse(wh.root, listing_ttl_s=0).snapshot("d1", "t")  # another process, same data
    assert [t.tablet_id for t in again.tablets] == ids and again.version == snap.version


def test_files_become_tablets_of_their_own_when_they_do_not_fit_together(wh):
    snap = Warehouse(wh.root, listing_ttl_s=0, sizing=ONE_FILE_EACH).snapshot("d1", "t")
    assert [[f.path for f in t.files] for t in snap.tablets] == [["part-0.parquet"], ["part-1.parquet"]]
    assert len({t.tablet_id for t in snap.tablets}) == 2 and not any(t.is_cut for t in snap.tablets)
    # Packing does not change what the table is: the same version either way.
    assert snap.version == wh.snapshot("d1", "t").version


def test_a_tablet_never_mixes_partitions(wh):
    snap = wh.snapshot("d1", "p")
    assert len(snap.tablets) == 3
    for t in snap.tablets:
        assert len({f.partition for f in t.files}) == 1


def test_many_tiny_files_plan_as_a_handful_of_tablets(tmp_path):
    table = tmp_path / "wh" / "d.db" / "tiny"
    for i in range(2000):
        _write(table / f"part-{i:05d}.parquet", rows=2)
    snap = Warehouse(tmp_path / "wh", 0, Sizing(target_bytes=64 << 20, open_cost_bytes=128 << 10)).snapshot("d", "tiny")
    assert len(snap.files) == 2000
    assert 2 <= len(snap.tablets) <= 6
    assert sorted(f.path for t in snap.tablets for f in t.files) == [f.path for f in snap.files]  # each file once


def test_a_large_file_is_cut_into_runs_of_whole_row_groups(tmp_path):
    table = tmp_path / "wh" / "d.db" / "big"
    table.mkdir(parents=True)
    pq.write_table(pa.table({"a": list(range(100_000)), "b": [str(i) for i in range(100_000)]}),
                   table / "big.parquet", row_group_size=10_000)
    _write(table / "small.parquet")
    meta = pq.read_metadata(table / "big.parquet")
    group_bytes = [sum(meta.row_group(i).column(j).total_compressed_size for j in range(meta.num_columns))
                   for i in range(meta.num_row_groups)]
    sizing = Sizing(target_bytes=3 * max(group_bytes) + 1, open_cost_bytes=0)
    snap = Warehouse(tmp_path / "wh", 0, sizing).snapshot("d", "big")
    cuts = [t for t in snap.tablets if t.is_cut]
    assert [(t.first_row_group, t.row_groups, t.first_row, t.rows) for t in cuts] == [
        (0, 3, 0, 30_000), (3, 3, 30_000, 30_000), (6, 3, 60_000, 30_000), (9, 1, 90_000, 10_000)]
    assert all([f.path for f in t.files] == ["big.parquet"] for t in cuts)
    assert [[f.path for f in t.files] for t in snap.tablets if not t.is_cut] == [["small.parquet"]]
    assert len({t.tablet_id for t in snap.tablets}) == 5
    # The same file gives the same cuts and ids; a rewritten one gives new ids.
    again = Warehouse(tmp_path / "wh", 0, sizing).snapshot("d", "big")
    assert [t.tablet_id for t in again.tablets] == [t.tablet_id for t in snap.tablets]
    pq.write_table(pa.table({"a": list(range(100_000)), "b": [str(i) for i in range(100_000)]}),
                   table / "big.parquet", row_group_size=10_000)
    later(table / "big.parquet", table)
    rewritten = Warehouse(tmp_path / "wh", 0, sizing).snapshot("d", "big")
    assert not {t.tablet_id for t in rewritten.tablets if t.is_cut} & {t.tablet_id for t in cuts}


def test_a_file_whose_footer_cannot_be_read_stays_whole(tmp_path):
    table = tmp_path / "wh" / "d.db" / "bad"
    table.mkdir(parents=True)
    (table / "broken.parquet").write_bytes(b"x" * 5000)
    snap = Warehouse(tmp_path / "wh", 0, Sizing(target_bytes=1024, open_cost_bytes=0)).snapshot("d", "bad")
    assert [(t.is_cut, [f.path for f in t.files]) for t in snap.tablets] == [(False, ["broken.parquet"])]


def test_partition_values_are_decoded(wh):
    snap = wh.snapshot("d1", "p")
    assert snap.partition_columns == ("region", "day")
    parts = sorted((t.partition["region"] or "", t.partition["day"]) for t in snap.tablets)
    assert parts == [("", "2024-01-02"), ("eu", "2024-01-01"), ("us/west", "2024-01-02")]
    assert any(t.partition["region"] is None for t in snap.tablets)


def test_version_changes_with_the_file_set_and_the_cache_sees_it(wh):
    before = wh.snapshot("d1", "t")
    _write(wh.root / "d1.db" / "t" / "part-2.parquet")
    later(wh.root / "d1.db" / "t")
    after = wh.snapshot("d1", "t")  # cached for 60 s, but the directory changed
    assert after.version != before.version and len(after.files) == 3
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


def _wait_for_listings(wh):
    wait_until(lambda: not wh.listings.refreshing, 30, 0.005, what="the background listings to end")


def test_a_file_rewritten_in_place_shows_after_the_ttl(wh):
    """Same names, new contents: the directory's stamp does not change, the listing after the
    TTL does. Just after the TTL the answer is the listing before, once."""
    now = [0.0]
    wh = Warehouse(wh.root, listing_ttl_s=5, clock=lambda: now[0])
    first = wh.snapshot("d1", "t")
    part = wh.root / "d1.db" / "t" / "part-0.parquet"
    stamp = os.stat(part.parent).st_mtime_ns
    _write(part, rows=7)
    os.utime(part.parent, ns=(stamp, stamp))  # as when a file is rewritten in place
    assert wh.snapshot("d1", "t") is first  # within the TTL
    now[0] += 6
    assert wh.snapshot("d1", "t") is first  # the TTL ran out a moment ago: listed again behind it
    _wait_for_listings(wh)
    second = wh.snapshot("d1", "t")
    assert second.version != first.version
    _write(part, rows=9)
    os.utime(part.parent, ns=(stamp, stamp))
    now[0] += 60  # long after the TTL: listed before the answer
    third = wh.snapshot("d1", "t")
    assert third.version not in (first.version, second.version)


def _rewrite_in_place(path, rows):
    """New contents under the same name; the folder keeps its modification time."""
    stamp = os.stat(path.parent).st_mtime_ns
    _write(path, rows=rows)
    os.utime(path.parent, ns=(stamp, stamp))


def test_a_large_tables_files_are_stated_again_only_as_often_as_a_tenth_of_the_time(wh, monkeypatch):
    """Every listing checks a table's folders; its files (rewrites in place) only once per
    FILES_CHECK_SPACING times the last such check took, so a table whose check outlasts the
    TTL is not stat'ed file by file at every TTL. Here the check is made to take 100 s."""
    from starscan.tables import listing_cache

    now = [0.0]
    wh = Warehouse(wh.root, listing_ttl_s=5, clock=lambda: now[0])
    table = wh.root / "d1.db" / "t"
    long_ago = time.time_ns() - 60 * 10**9
    os.utime(table, ns=(long_ago, long_ago))  # not a racily clean folder: its listing is trusted
    first = wh.snapshot("d1", "t")
    ticks = iter([1.0, 101.0])  # the check of every file: started, ended
    monkeypatch.setattr(listing_cache, "_stopwatch", lambda: next(ticks))
    now[0] += 60
    assert wh.snapshot("d1", "t") is first  # files checked (100 s), none changed
    monkeypatch.setattr(listing_cache, "_stopwatch", time.monotonic)
    _rewrite_in_place(table / "part-0.parquet", rows=7)
    os.utime(table, ns=(long_ago, long_ago))
    now[0] += 60
    assert wh.snapshot("d1", "t") is first  # folders unchanged; files not due before 1,000 s
    now[0] += 1000
    second = wh.snapshot("d1", "t")
    assert second.version != first.version  # due: the rewrite shows


def test_an_unchanged_table_is_checked_without_listing_it(wh):
    """After the TTL, a folder table whose folders and files are all unchanged keeps its
    snapshot after a stat of each (no walk, no footers); a file added in a partition folder
    (the table folder's own time stays) is seen."""
    now = [0.0]
    wh = Warehouse(wh.root, listing_ttl_s=5, clock=lambda: now[0])
    table = wh.root / "d1.db" / "p"
    long_ago = time.time_ns() - 60 * 10**9
    for folder in [table, *(p for p in table.rglob("*") if p.is_dir())]:
        os.utime(folder, ns=(long_ago, long_ago))
    first, fresh = wh.snapshot("d1", "p"), wh.snapshot("d1", "t")
    builds = []
    real_build = wh._build_snapshot
    wh._build_snapshot = lambda *args: builds.append(1) or real_build(*args)
    now[0] += 60
    assert wh.snapshot("d1", "p") is first and not builds
    # Folders written a moment before their listing may change again within one tick of
    # their clock: such a table is walked again, even when nothing changed.
    assert wh.snapshot("d1", "t") is fresh and builds == [1]
    builds.clear()
    stamp = os.stat(table).st_mtime_ns
    _write(table / "region=eu" / "day=2024-01-01" / "g.parquet")
    os.utime(table, ns=(stamp, stamp))
    now[0] += 60
    second = wh.snapshot("d1", "p")
    assert builds == [1] and second.version != first.version and len(second.files) == len(first.files) + 1


def test_a_fresh_snapshot_never_lists_in_the_callers_thread(wh):
    """What the FE's event loop asks (Warehouse.fresh_snapshot): the listing at hand or None,
    and a listing that ran out a moment ago is listed again behind the answer."""
    now = [0.0]
    wh = Warehouse(wh.root, listing_ttl_s=5, clock=lambda: now[0])
    assert wh.fresh_snapshot("d1", "t") is None  # never listed
    first = wh.snapshot("d1", "t")
    assert wh.fresh_snapshot("d1", "t") is first
    _rewrite_in_place(wh.root / "d1.db" / "t" / "part-0.parquet", rows=7)
    now[0] += 6
    assert wh.fresh_snapshot("d1", "t") is first  # and the table is listed again behind it
    _wait_for_listings(wh)
    second = wh.fresh_snapshot("d1", "t")
    assert second is not None and second.version != first.version
    now[0] += 20
    assert wh.fresh_snapshot("d1", "t") is None  # too old: snapshot lists it, and the caller waits
    assert wh.snapshot("d1", "t") is second
    _write(wh.root / "d1.db" / "t" / "part-9.parquet")
    later(wh.root / "d1.db" / "t")
    assert wh.fresh_snapshot("d1", "t") is None  # the folder changed
    assert wh.fresh_snapshot("d1", "no_such_table") is None and wh.fresh_snapshot("no_db", "t") is None


def test_callers_of_an_expired_listing_share_one_listing(wh):
    """When the TTL runs out under load, one caller lists the table again and the others keep
    the listing they had meanwhile (50 callers listing a 10,000-file table at once each waited
    over a second); a changed directory makes them wait for that one listing. A listing that
    ran out less than a TTL ago is listed again in the background: nobody waits for it."""
    import threading

    now = [0.0]
    wh = Warehouse(wh.root, listing_ttl_s=5, clock=lambda: now[0])
    first = wh.snapshot("d1", "t")
    builds = []
    listing = threading.Event()  # held until the other callers have their answers
    started = threading.Event()  # the background listing began
    real_build = wh._build_snapshot

    def slow_build(*args):
        builds.append(1)
        started.set()
        listing.wait(30)
        return real_build(*args)

    wh._build_snapshot = slow_build
    part = wh.root / "d1.db" / "t" / "part-0.parquet"
    _rewrite_in_place(part, rows=5)  # a change only a listing finds
    now[0] += 6  # the TTL ran out a moment ago: every caller is answered, one listing runs behind them
    got = [wh.snapshot("d1", "t") for _ in range(20)]
    assert all(s is first for s in got)
    assert started.wait(30)  # on a thread of its own, which may start after the callers' answers
    assert len(builds) == 1
    listing.set()
    _wait_for_listings(wh)
    second = wh.snapshot("d1", "t")
    assert second.version != first.version
    assert len(builds) == 1

    listing.clear()
    builds.clear()
    _rewrite_in_place(part, rows=6)
    now[0] += 20  # long ago: one caller lists it and waits; the others keep the listing they had
    got = []
    threads = [threading.Thread(target=lambda: got.append(wh.snapshot("d1", "t"))) for _ in range(20)]
    for t in threads:
        t.start()
    wait_until(lambda: len(got) >= 19, 30, 0.005, what="all readers but the one listing the table")
    assert len(builds) == 1 and len(got) == 19
    assert all(s is second for s in got)
    listing.set()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len(got) == 20
    assert len({s.version for s in got}) == 2  # the lister's new version, the others' previous one

    _write(wh.root / "d1.db" / "t" / "part-9.parquet")  # the directory changes: nobody gets the old listing
    later(wh.root / "d1.db" / "t")
    builds.clear()
    got.clear()
    threads = [threading.Thread(target=lambda: got.append(wh.snapshot("d1", "t"))) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and {len(s.files) for s in got} == {3}
