"""A listing's columns (starscan.tables.file_columns) against the file-at-a-time rules they
replace: the same files in the same order, the same identity bytes for the folder digest,
and the same tablets with the same ids."""

from __future__ import annotations

import hashlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from starscan.storage.files import is_hidden
from starscan.tables.catalog import DataFile
from starscan.tables.file_columns import WalkedFolder
from starscan.tables.folder_files import _digest
from starscan.tables.tablets import Sizing, pack, pack_places, split_partitions, tablet_id

# Names as a file system gives them: any text without '/' or NUL, hidden ones among them.
_names = st.one_of(
    st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=12),
    st.sampled_from(["_SUCCESS", ".part-0.crc", "_x=1.parquet", "part-0.parquet._COPYING_", "é.parquet", "Z", "a"]),
)
_rows = st.lists(st.tuples(_names, st.integers(0, 1 << 40), st.integers(-(1 << 62), 1 << 62)),
                 unique_by=lambda r: r[0], max_size=40)


def _walked(folder: str, rows: list[tuple[str, int, int]], chunk: int) -> WalkedFolder:
    walked = WalkedFolder(folder)
    for start in range(0, len(rows), chunk):
        walked.add(rows[start:start + chunk])
    return walked


@settings(max_examples=200, deadline=None)
@given(rows=_rows, folder=st.sampled_from(["", "day=1/", "p=é %41/q=x/"]), chunk=st.integers(1, 7))
def test_a_folders_columns_are_its_python_listing(rows, folder, chunk):
    paths, sizes, mtimes, columns = _walked(folder, rows, chunk).files()
    expected = sorted((folder + name, size, mtime) for name, size, mtime in rows if not is_hidden(name))
    assert list(zip(paths, sizes, mtimes)) == expected
    if not expected:
        return
    assert columns is not None and list(columns.sizes) == sizes
    files = [DataFile(p, s, m) for p, s, m in expected]
    assert hashlib.blake2b(columns.identities(), digest_size=16).digest() == _digest(files)
    places = np.array(sorted({0, len(files) - 1, len(files) // 2}))
    assert bytes(columns.identities(places)) == "\n".join(
        f"{files[i].path}|{files[i].size}|{files[i].mtime_ns}" for i in places).encode()


def test_a_name_arrow_cannot_hold_keeps_the_folder_in_python():
    """An undecodable name (a surrogate, as os.scandir gives it) after names that converted."""
    walked = WalkedFolder("d=1/")
    walked.add([("b.parquet", 2, 20), ("_SUCCESS", 0, 0)])
    walked.add([("a\udcff.parquet", 1, 10)])
    paths, sizes, mtimes, columns = walked.files()
    assert (paths, sizes, mtimes, columns) == (["d=1/a\udcff.parquet", "d=1/b.parquet"], [1, 2], [10, 20], None)


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), max_size=60), target=st.integers(1, 400), open_cost=st.integers(0, 50))
def test_packing_by_numpy_is_sparks_packing(sizes, target, open_cost):
    by_python = pack(range(len(sizes)), sizes.__getitem__, target, open_cost)
    by_numpy = pack_places(np.array(sizes, dtype=np.int64), target, open_cost)
    assert [list(group) for group in by_numpy] == by_python


@settings(max_examples=200, deadline=None)
@given(rows=_rows, target=st.integers(1, 1 << 41), open_cost=st.integers(0, 1 << 30), chunk=st.integers(1, 9))
def test_tablets_cut_from_columns_are_the_tablets_cut_file_by_file(rows, target, open_cost, chunk):
    partition = (("day", "1"),)
    paths, sizes, mtimes, columns = _walked("day=1/", rows, chunk).files()
    files = [DataFile(p, s, m, partition) for p, s, m in zip(paths, sizes, mtimes)]
    sizing = Sizing(target_bytes=target, open_cost_bytes=open_cost)
    assert columns is not None or not files
    by_columns = split_partitions("d.t", {partition: files}, sizing, lambda f: None,
                                  columns={partition: columns} if columns is not None else None)
    by_files = split_partitions("d.t", {partition: files}, sizing, lambda f: None)
    assert [(t.tablet_id, t.files) for t in by_columns] == [(t.tablet_id, t.files) for t in by_files]
    assert all(t.tablet_id == tablet_id("d.t", t.files) for t in by_columns)
