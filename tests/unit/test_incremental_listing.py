"""A folder table listed again reads only the folders that changed (issue 39): the answer is
always the one a listing from scratch gives."""

from __future__ import annotations

import os
import shutil
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from starscan.storage import folder_entries, stores
from starscan.tables.catalog import Warehouse
from starscan.tables.tablets import Sizing

LONG_AGO = time.time_ns() - 3600 * 10**9
SIZING = Sizing(target_bytes=4 << 10, open_cost_bytes=512)  # a few tablets per partition


def _write(path, rows=3, start=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"a": list(range(start, start + rows))}), path)


def _settle(folder):
    """Every folder and file below (and at) ``folder`` modified long ago: none is racily
    clean, none may still be written."""
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, ns=(LONG_AGO, LONG_AGO), follow_symlinks=False)


@pytest.fixture()
def table(tmp_path):
    root = tmp_path / "wh"
    t = root / "d.db" / "t"
    for day in range(1, 5):
        for i in range(6):
            _write(t / f"day=2024-01-0{day}" / f"part-{i}.parquet", rows=3 + i, start=day * 100)
    _write(t / "day=2024-01-01" / "hour=7" / "part-0.parquet")
    _write(t / "notes" / "skipped.parquet")  # not a partition folder: Spark skips it
    _settle(t)
    return root, t


@pytest.fixture(autouse=True, params=["small folders", "folders remembered"])
def entries_min(request, monkeypatch):
    """Every test twice: with this table's folders too small to be remembered (each one read
    again is stat-ed whole), and with every folder remembered (a folder read again stats
    only the files it did not hold: starscan.storage.folder_entries)."""
    if request.param == "folders remembered":
        monkeypatch.setattr(folder_entries, "ENTRIES_MIN", 1)
    return request.param


@pytest.fixture(autouse=True)
def files_not_due(monkeypatch):
    """Every file is stat-ed again only once per FILES_CHECK_SPACING times its last pass took
    (a small table's files are due at every listing, which then walks it whole): here not
    before the test says."""
    from starscan.tables import listing_cache

    monkeypatch.setattr(listing_cache, "FILES_CHECK_SPACING", 10**9)


@pytest.fixture()
def reads(monkeypatch):
    """The folders whose entries a walk reads (os.scandir), in order."""
    seen: list[str] = []
    real = os.scandir

    def scandir(path):
        # The walk reads a folder through its descriptor: named by what it points at.
        seen.append(os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else str(path))
        return real(path)

    monkeypatch.setattr(stores.os, "scandir", scandir)
    return seen


def _same_as_from_scratch(root, snap):
    fresh = Warehouse(root, listing_ttl_s=0, sizing=SIZING).snapshot("d", "t")
    assert snap.version == fresh.version
    assert [(t.tablet_id, [f.path for f in t.files]) for t in snap.tablets] == \
        [(t.tablet_id, [f.path for f in t.files]) for t in fresh.tablets]
    assert [(f.path, f.size, f.mtime_ns, f.partition) for f in snap.files] == \
        [(f.path, f.size, f.mtime_ns, f.partition) for f in fresh.files]
    assert snap.partition_columns == fresh.partition_columns


def test_an_append_reads_only_its_folder_and_cuts_only_its_partition(table, reads):
    root, t = table
    now = [0.0]
    wh = Warehouse(root, listing_ttl_s=5, sizing=SIZING, clock=lambda: now[0])
    first = wh.snapshot("d", "t")
    assert len(reads) == 7  # the table, four days, one hour, the skipped folder: every folder once
    _write(t / "day=2024-01-03" / "part-9.parquet", rows=50, start=900)  # a streaming job's new file
    reads.clear()
    now[0] += 20  # long after the TTL: listed again before the answer
    second = wh.snapshot("d", "t")
    assert reads == [str(t / "day=2024-01-03")]
    assert "day=2024-01-03/part-9.parquet" in {f.path for f in second.files}
    assert second.version != first.version
    _same_as_from_scratch(root, second)
    new = next(f for f in second.files if f.path == "day=2024-01-03/part-9.parquet")
    assert wh.history.added_since(second.location, first.version, second.version) == [(new.path, new.size, new.mtime_ns)]
    # The other partitions' tablets are the ones cut before, not cut again.
    before = {t.tablet_id: t for t in first.tablets}
    for tablet in second.tablets:
        day = dict(tablet.files[0].partition)["day"]
        assert (tablet.tablet_id in before and before[tablet.tablet_id] is tablet) == (day != "2024-01-03")


def test_new_removed_and_renamed_folders_and_files_are_seen(table, reads):
    root, t = table
    now = [0.0]
    wh = Warehouse(root, listing_ttl_s=5, sizing=SIZING, clock=lambda: now[0])
    wh.snapshot("d", "t")
    shutil.rmtree(t / "day=2024-01-02")                       # a partition dropped
    _write(t / "day=2024-01-05" / "hour=1" / "part-0.parquet", rows=4)  # a new one, two levels deep
    (t / "day=2024-01-04" / "part-0.parquet").rename(t / "day=2024-01-04" / "part-00.parquet")
    (t / "day=2024-01-01" / "part-1.parquet").unlink()
    _write(t / "day=2024-01-01" / "hour=7" / "part-1.parquet._COPYING_")  # an upload under way: hidden
    reads.clear()
    now[0] += 20
    snap = wh.snapshot("d", "t")
    assert set(reads) == {str(t), str(t / "day=2024-01-05"), str(t / "day=2024-01-05" / "hour=1"),
                          str(t / "day=2024-01-04"), str(t / "day=2024-01-01"), str(t / "day=2024-01-01" / "hour=7")}
    paths = {f.path for f in snap.files}
    assert not any(p.startswith("day=2024-01-02/") for p in paths)
    assert {"day=2024-01-05/hour=1/part-0.parquet", "day=2024-01-04/part-00.parquet"} <= paths
    assert not {"day=2024-01-04/part-0.parquet", "day=2024-01-01/part-1.parquet"} & paths
    assert not any(p.endswith("._COPYING_") or p.startswith("notes/") for p in paths)
    _same_as_from_scratch(root, snap)
    wh.history.settled(snap.location)
    [entry] = wh.history._log(snap.location)[1:]  # recorded from the listing's change
    assert {p for p, _, _ in entry["added"]} == {"day=2024-01-05/hour=1/part-0.parquet", "day=2024-01-04/part-00.parquet"}
    assert {p for p, _, _ in entry["removed"]} == {f"day=2024-01-02/part-{i}.parquet" for i in range(6)} | \
        {"day=2024-01-04/part-0.parquet", "day=2024-01-01/part-1.parquet"}


def test_a_file_replaced_under_its_name_in_a_changed_folder_is_seen_at_once(table):
    """A file renamed over another (a writer's atomic replace) shows with its new size at
    the next listing: the name has another inode now."""
    root, t = table
    now = [0.0]
    wh = Warehouse(root, listing_ttl_s=5, sizing=SIZING, clock=lambda: now[0])
    first = wh.snapshot("d", "t")
    _write(t / "day=2024-01-02" / "tmp-new.parquet", rows=40)
    os.replace(t / "day=2024-01-02" / "tmp-new.parquet", t / "day=2024-01-02" / "part-3.parquet")
    now[0] += 20
    snap = wh.snapshot("d", "t")
    size = {f.path: f.size for f in snap.files}["day=2024-01-02/part-3.parquet"]
    assert size == os.stat(t / "day=2024-01-02" / "part-3.parquet").st_size
    assert size != {f.path: f.size for f in first.files}["day=2024-01-02/part-3.parquet"]
    _same_as_from_scratch(root, snap)


def test_a_racily_clean_folder_is_read_again(table, reads):
    """A folder modified within the last moments may change again within one tick of its
    clock: the next listing reads it even when its time is the same; the others are not."""
    root, t = table
    now = [0.0]
    wh = Warehouse(root, listing_ttl_s=5, sizing=SIZING, clock=lambda: now[0])
    _write(t / "day=2024-01-04" / "part-7.parquet")  # just now
    wh.snapshot("d", "t")
    reads.clear()
    now[0] += 20
    snap = wh.snapshot("d", "t")
    assert reads == [str(t / "day=2024-01-04")]
    _same_as_from_scratch(root, snap)


def test_every_file_is_stat_ed_again_when_due(table, reads, monkeypatch):
    """A file rewritten in place changes no folder: the listing is kept until the files are
    due to be stat-ed again (listing_cache.FILES_CHECK_SPACING), and then the rewrite shows."""
    from starscan.tables import listing_cache

    root, t = table
    now = [0.0]
    wh = Warehouse(root, listing_ttl_s=5, sizing=SIZING, clock=lambda: now[0])
    first = wh.snapshot("d", "t")
    path = t / "day=2024-01-03" / "part-2.parquet"
    _write(path, rows=30)
    os.utime(path.parent, ns=(LONG_AGO, LONG_AGO))
    now[0] += 20
    assert wh.snapshot("d", "t") is first
    monkeypatch.setattr(listing_cache, "FILES_CHECK_SPACING", 0)  # always due
    now[0] += 20
    snap = wh.snapshot("d", "t")
    assert snap.version != first.version
    _same_as_from_scratch(root, snap)


def test_folders_without_data_files_leave_the_version_as_it_is(table):
    """The version is a function of the file set: a new empty partition folder, or one that
    holds only hidden files, changes nothing, on a listing from scratch or from the one before."""
    root, t = table
    now = [0.0]
    wh = Warehouse(root, listing_ttl_s=5, sizing=SIZING, clock=lambda: now[0])
    first = wh.snapshot("d", "t")
    (t / "day=2024-01-09").mkdir()
    (t / "day=2024-01-08").mkdir()
    (t / "day=2024-01-08" / "_SUCCESS").write_text("")
    now[0] += 20
    again = wh.snapshot("d", "t")
    assert again.version == first.version
    _same_as_from_scratch(root, again)


@pytest.fixture()
def stats(monkeypatch):
    """The files a walk stat-s by name after reading a folder remembered before (a stat
    through the folder's descriptor)."""
    seen: list[str] = []
    real = folder_entries.os.stat

    def stat(path, *args, **kwargs):
        if kwargs.get("dir_fd") is not None:
            seen.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(folder_entries.os, "stat", stat)
    return seen


def test_a_remembered_folder_stats_only_its_new_files(table, stats, entries_min):
    """A folder read again after an append takes the others' sizes and times from the walk
    before: one stat, the new file's (a small folder's are stat-ed as it is read)."""
    root, t = table
    now = [0.0]
    wh = Warehouse(root, listing_ttl_s=5, sizing=SIZING, clock=lambda: now[0])
    first = wh.snapshot("d", "t")
    _write(t / "day=2024-01-03" / "part-9.parquet", rows=50, start=900)
    stats.clear()
    now[0] += 20
    second = wh.snapshot("d", "t")
    assert stats == (["part-9.parquet"] if entries_min == "folders remembered" else [])
    _same_as_from_scratch(root, second)
    new = next(f for f in second.files if f.path == "day=2024-01-03/part-9.parquet")
    assert wh.history.added_since(second.location, first.version, second.version) == [(new.path, new.size, new.mtime_ns)]
    # The files the folder held before are the listing's own objects again.
    old = {f.path: f for f in first.files}
    assert all(f is old[f.path] for f in second.files if f.path in old)


def test_a_file_just_written_is_stat_ed_again(table, stats, entries_min):
    """A file modified moments before the walk that stat-ed it may still be written: the next
    walk of its folder stats it again, and sees it grown."""
    root, t = table
    now = [0.0]
    wh = Warehouse(root, listing_ttl_s=5, sizing=SIZING, clock=lambda: now[0])
    growing = t / "day=2024-01-02" / "part-8.parquet"
    growing.write_bytes(b"PAR1")  # a writer's first bytes, written in place
    wh.snapshot("d", "t")
    _write(growing, rows=40)  # the rest of it: same name, same inode
    _write(t / "day=2024-01-02" / "part-9.parquet")
    stats.clear()
    now[0] += 20
    snap = wh.snapshot("d", "t")
    assert set(stats) == ({"part-8.parquet", "part-9.parquet"} if entries_min == "folders remembered" else set())
    assert {f.path: f.size for f in snap.files}["day=2024-01-02/part-8.parquet"] == growing.stat().st_size
    _same_as_from_scratch(root, snap)


def test_a_settled_file_rewritten_in_place_shows_when_the_files_are_due(table, monkeypatch, entries_min):
    """A file rewritten in place (same name, same inode) in a folder that also changed
    otherwise: in a remembered folder it shows, as a rewrite in a folder that did not
    change does, once every file is due to be stat-ed again; the answer is then the one a
    listing from scratch gives."""
    from starscan.tables import listing_cache

    root, t = table
    now = [0.0]
    wh = Warehouse(root, listing_ttl_s=5, sizing=SIZING, clock=lambda: now[0])
    wh.snapshot("d", "t")
    path = t / "day=2024-01-03" / "part-2.parquet"
    inode = path.stat().st_ino
    with open(path, "r+b") as fh:  # in place: the inode stays
        fh.seek(0, os.SEEK_END)
        fh.write(b"\0" * 100)
    assert path.stat().st_ino == inode
    _write(t / "day=2024-01-03" / "part-9.parquet")
    now[0] += 20
    sizes = {f.path: f.size for f in wh.snapshot("d", "t").files}
    assert (sizes["day=2024-01-03/part-2.parquet"] == path.stat().st_size) == (entries_min == "small folders")
    monkeypatch.setattr(listing_cache, "FILES_CHECK_SPACING", 0)  # always due
    now[0] += 20
    snap = wh.snapshot("d", "t")
    assert {f.path: f.size for f in snap.files}["day=2024-01-03/part-2.parquet"] == path.stat().st_size
    _same_as_from_scratch(root, snap)


def test_links_to_files_are_stat_ed_every_time(table, entries_min):
    """A link's own inode says nothing of the file it points at: a link pointed elsewhere
    shows the new file's size at once."""
    root, t = table
    now = [0.0]
    wh = Warehouse(root, listing_ttl_s=5, sizing=SIZING, clock=lambda: now[0])
    _write(t.parent / "small.parquet", rows=2)
    _write(t.parent / "large.parquet", rows=400)
    link = t / "day=2024-01-01" / "part-link.parquet"
    link.symlink_to(t.parent / "small.parquet")
    _settle(t)
    for target in ("small.parquet", "large.parquet"):  # settled too: trusted, were a link taken for its file
        os.utime(t.parent / target, ns=(LONG_AGO, LONG_AGO))
    wh.snapshot("d", "t")
    (t.parent / "large.parquet").replace(t.parent / "small.parquet")
    _write(t / "day=2024-01-01" / "part-9.parquet")
    now[0] += 20
    snap = wh.snapshot("d", "t")
    assert {f.path: f.size for f in snap.files}["day=2024-01-01/part-link.parquet"] == link.stat().st_size
    _same_as_from_scratch(root, snap)
