"""The BE's page cache (starscan.arrow.chunk_cache): a read served from decoded column chunks
gives exactly the batches' rows, types and order the read from the file gives, on every path
of the kernel's reader (one thread, runs, a predicate, threads side by side, text read as
dictionary codes, row groups only partly held); what is kept and for how long (the file's
identity, settled files only, the bound in bytes, a read stopped half way)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.splits import split_of

from starscan.arrow import chunk_cache as chunk_cache_module
from starscan.arrow.chunk_cache import ColumnChunkCache
from starscan.arrow.read import FILTER_RUN_ROWS, read_split
from starscan.arrow.scan import Fields, plan_read
from starscan.arrow.split_plan import ArrowSplit, FilePart
from starscan.core.sql_types import parse_schema
from starscan.expr import column, literal, op

NAMES = ["id", "flag", "note", "price"]
SCHEMA = parse_schema({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": False, "metadata": {}},
    {"name": "flag", "type": "string", "nullable": True, "metadata": {}},
    {"name": "note", "type": "string", "nullable": True, "metadata": {}},
    {"name": "price", "type": "double", "nullable": True, "metadata": {}},
]})
SETTLED = 60 * 10**9  # files are dated a minute back: settled, so kept


def _table(first: int, rows: int) -> pa.Table:
    ids = range(first, first + rows)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "flag": pa.array([("A", "B", "N", None)[i % 4] for i in ids], pa.string()),
        "note": pa.array([None if i % 7 == 0 else f"note {i} " + "x" * (i % 13) for i in ids], pa.string()),
        "price": pa.array([i / 4 if i % 5 else None for i in ids], pa.float64()),
    })


def _write(path: Path, groups: list[int], first: int = 0, age_ns: int = SETTLED) -> Path:
    """A file of row groups of ``groups`` rows each (Parquet 1.0: text as dictionary codes,
    parquet-mr's list of encodings, so the reader reads it as codes where it can)."""
    with pq.ParquetWriter(path, _table(0, 1).schema, version="1.0") as writer:
        for rows in groups:
            writer.write_table(_table(first, rows), row_group_size=max(rows, 1))
            first += rows
    stamp = time.time_ns() - age_ns
    os.utime(path, ns=(stamp, stamp))
    return path


def _read(columns=NAMES, predicate=None):
    return plan_read("t.t", 1, Fields(SCHEMA), [(n, n) for n in columns], predicate, "UTC", "parquet", set())


def _batches(read, paths, cache, **kwargs) -> list[pa.RecordBatch]:
    return list(read_split(read, split_of(paths), chunks=cache, **kwargs))


def _same(got: list[pa.RecordBatch], want: list[pa.RecordBatch], ordered: bool = True) -> None:
    assert [b.schema for b in got[:1]] == [b.schema for b in want[:1]]
    got_table, want_table = pa.Table.from_batches(got, want[0].schema), pa.Table.from_batches(want, want[0].schema)
    if not ordered:
        got_table, want_table = got_table.sort_by("id"), want_table.sort_by("id")
    assert got_table.equals(want_table)


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    return [_write(tmp_path / "a.parquet", [30_000, 30_000, 7_000]),
            _write(tmp_path / "b.parquet", [500] * 9 + [20_000], first=67_000)]


@pytest.mark.parametrize("kwargs", [dict(batch_rows=4096), dict(batch_rows=4096, cut=False), dict(batch_rows=1000),
                                    dict(batch_rows=4096, threads=3)], ids=["one", "runs", "small", "threads"])
def test_a_read_from_memory_gives_the_files_batches(files, kwargs):
    read = _read()
    want = _batches(read, files, None, **kwargs)
    cache = ColumnChunkCache(256 << 20)
    filled = _batches(read, files, cache, **kwargs)
    assert cache.misses == 13 and cache.hits == 0 and len(cache) == 13 * len(NAMES)
    served = _batches(read, files, cache, **kwargs)
    assert cache.hits == 13 and cache.misses == 13
    ordered = kwargs.get("threads", 1) == 1
    _same(filled, want, ordered)
    _same(served, want, ordered)
    # No more batches than the file's read, none larger than asked for: pyarrow ends a batch
    # where a row group of text read as codes ends (a new dictionary); from memory the rows run on.
    largest = kwargs["batch_rows"] if kwargs.get("cut", True) else FILTER_RUN_ROWS
    assert len(served) <= len(want) and max(b.num_rows for b in served) <= largest
    assert all(pa.types.is_string(f.type) for f in served[0].schema if f.name in ("flag", "note"))


def test_a_predicate_and_another_projection_read_the_chunks_kept(files):
    cache = ColumnChunkCache(256 << 20)
    _batches(_read(), files, cache)  # every column kept
    pred = op("and", op("=", column("flag"), literal("string", "B")), op(">", column("price"), literal("double", 100.0)))
    read = _read(["price", "id"], pred)
    hits = cache.hits
    _same(_batches(read, files, cache, batch_rows=512), _batches(read, files, None, batch_rows=512))
    assert cache.hits == hits + 13


def test_row_groups_partly_held_are_read_from_both(files):
    read = _read()
    cache = ColumnChunkCache(256 << 20)
    _batches(read, files, cache)
    for key in [k for k in list(cache._entries) if k[3] in (1, 4, 5) and k[4] == "note"]:
        del cache._entries[key]
    misses = cache.misses
    _same(_batches(read, files, cache), _batches(read, files, None))
    assert cache.misses == misses + 4  # a.parquet's row group 1, b.parquet's 1, 4 and 5: decoded and kept again
    assert len(cache) == 13 * len(NAMES)


def test_only_settled_files_are_kept(tmp_path):
    fresh = _write(tmp_path / "fresh.parquet", [1000], age_ns=0)
    cache = ColumnChunkCache(64 << 20)
    _batches(_read(), [fresh], cache)
    assert len(cache) == 0  # its time could still be that of a rewrite of the same size
    stamp = time.time_ns() - chunk_cache_module.SETTLED_NS - 10**6
    os.utime(fresh, ns=(stamp, stamp))
    _batches(_read(), [fresh], cache)
    assert len(cache) == len(NAMES)


def test_a_rewritten_file_is_read_again(tmp_path):
    path = _write(tmp_path / "t.parquet", [5000])
    cache = ColumnChunkCache(64 << 20)
    _batches(_read(), [path], cache)
    _write(path, [5000], first=1_000_000, age_ns=SETTLED // 2)  # a new time: a new key
    got = _batches(_read(), [path], cache)
    assert got[0].column(0)[0].as_py() == 1_000_000 and cache.misses == 2


def test_the_bound_in_bytes(files):
    read = _read()
    want = _batches(read, files, None)
    cache = ColumnChunkCache(1 << 20)  # an eighth of it per entry: a 30,000-row text column is not kept
    _same(_batches(read, files, cache), want)
    assert cache.nbytes <= 1 << 20 and all(chunk.nbytes <= (1 << 20) // 8 for chunk in cache._entries.values())
    assert ("note" not in {k[4] for k in cache._entries if k[3] == 0 and k[0].endswith("a.parquet")})
    _same(_batches(read, files, cache), want)
    cache.configure(200_000)
    assert 0 < cache.nbytes <= 200_000 and cache.evictions > 0  # the reads above already evicted to stay under 1 MiB
    cache.configure(0)
    assert len(cache) == 0 and not cache.enabled
    _same(_batches(read, files, cache), want)
    assert len(cache) == 0


def test_a_read_stopped_half_way_keeps_only_the_row_groups_it_finished(files):
    cache = ColumnChunkCache(256 << 20)
    batches = read_split(_read(), split_of(files[:1]), batch_rows=4096, chunks=cache)
    for _ in range(11):  # row group 0 (30,000 rows: 8 batches, the last one short) whole, then 3 of row group 1
        next(batches)
    batches.close()
    assert {k[3] for k in cache._entries} == {0}


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(groups=st.lists(st.integers(0, 3000), min_size=1, max_size=6), batch_rows=st.integers(1, 5000),
       columns=st.permutations(NAMES).flatmap(lambda p: st.integers(1, 4).map(lambda k: p[:k])),
       evict=st.sets(st.integers(0, 5)), cut=st.booleans())
def test_reads_from_memory_property(tmp_path_factory, groups, batch_rows, columns, evict, cut):
    path = _write(tmp_path_factory.mktemp("prop") / "p.parquet", groups)
    read = _read(list(columns))
    want = _batches(read, [path], None, batch_rows=batch_rows, cut=cut)
    cache = ColumnChunkCache(64 << 20)
    _batches(read, [path], cache, batch_rows=batch_rows, cut=cut)
    for key in [k for k in list(cache._entries) if k[3] in evict]:
        del cache._entries[key]
    got = _batches(read, [path], cache, batch_rows=batch_rows, cut=cut)
    if not want:
        assert not got
        return
    _same(got, want)
    # Where row groups read from memory and from the file alternate, a batch ends at each switch.
    assert len(got) <= len(want) + (len(groups) if evict else 0)
    assert max(b.num_rows for b in got) <= (batch_rows if cut else FILTER_RUN_ROWS)


@pytest.mark.parametrize("deleted", [range(0, 4500), range(0, 12_000, 7)], ids=["bunched", "spread"])
def test_a_file_with_deleted_rows_reads_its_chunks_and_still_leaves_the_rows_out(tmp_path, deleted):
    """The chunks are the file's rows before its deletes: the deleted positions are left out
    of a read from memory as of a read from the file."""
    import struct

    from pyroaring import BitMap64

    from starscan.arrow.deletes import PORTABLE_MAGIC, DeletionVector, z85_encode

    path = _write(tmp_path / "d.parquet", [5000, 5000, 2000])
    data = struct.pack("<I", PORTABLE_MAGIC) + BitMap64(deleted).serialize()
    data += b"\0" * (-len(data) % 4)  # Z85 takes whole 4-byte groups
    vector = DeletionVector.from_log({"storageType": "i", "pathOrInlineDv": z85_encode(data),
                                      "sizeInBytes": len(data), "cardinality": len(deleted)})
    stat = path.stat()
    split = ArrowSplit((FilePart(str(path), path.name, stat.st_size, stat.st_mtime_ns, None, deletes=vector.to_json()),))
    read = _read()
    cache = ColumnChunkCache(64 << 20)
    want = list(read_split(read, split, batch_rows=100))
    for _ in range(2):
        got = list(read_split(read, split, batch_rows=100, chunks=cache))
        _same(got, want)
        assert max(b.num_rows for b in got) <= 100
    assert cache.hits == 3 and cache.misses == 3
    assert [i for b in got for i in b.column(0).to_pylist()] == sorted(set(range(12_000)) - set(deleted))


def test_a_smaller_bound_keeps_the_most_recently_used(tmp_path, monkeypatch):
    monkeypatch.setattr(chunk_cache_module, "ENTRY_SHARE", 1)  # any entry that fits the bound
    paths = [_write(tmp_path / f"{n}.parquet", [1000], first=n * 1000) for n in range(4)]
    read = _read(["id"])
    cache = ColumnChunkCache(64 << 20)
    for path in paths + paths[:2]:  # 0 and 1 read again: the most recently used
        _batches(read, [path], cache)
    size = next(iter(cache._entries.values())).nbytes
    cache.configure(2 * size)
    assert sorted(k[0].rsplit("/", 1)[1] for k in cache._entries) == ["0.parquet", "1.parquet"]
    hits = cache.hits
    _batches(read, paths[:2], cache)
    assert cache.hits == hits + 2 and cache.evictions == 0


def test_a_sweep_larger_than_the_cache_keeps_its_first_part_for_the_next(tmp_path, monkeypatch):
    """A table larger than the cache, read end to end twice the same way: a plain LRU evicts
    each row group before the next read returns to it (no hits, every row group filled
    again); a sweep never evicts its own entries, so its first part stays and the next sweep
    of the same kind reads it from memory, the rest from the files without keeping it."""
    monkeypatch.setattr(chunk_cache_module, "ENTRY_SHARE", 1)
    paths = [_write(tmp_path / f"{n}.parquet", [2000], first=n * 2000) for n in range(8)]
    read = _read(["id", "price"])
    want = _batches(read, paths, None)
    probe = ColumnChunkCache(1 << 30)
    _batches(read, paths[:1], probe)
    bound = probe.nbytes * 3 + 100  # room for three of the eight files
    plain = ColumnChunkCache(bound)
    for _ in range(2):
        _same(_batches(read, paths, plain), want)
    assert plain.hits == 0 and plain.inserts == 2 * 8 * 2  # every read fills it all again, for nothing

    cache = ColumnChunkCache(bound)
    for _ in range(3):
        _same(_batches(read, paths, cache.sweep(("t.t", ("id", "price")))), want)
        assert cache.nbytes <= bound
    assert cache.hits == 2 * 3 and cache.inserts == 3 * 2 and cache.evictions == 0
    assert cache.passed == 3 * 5  # the five files past the bound, decoded and passed on every time
    # Another sweep (another table's files) takes the cache over as LRU does.
    others = [_write(tmp_path / f"other{n}.parquet", [2000]) for n in range(2)]
    _batches(read, others, cache.sweep(("t.other", ("id", "price"))))
    assert cache.evictions == 2 * 2 and cache.nbytes <= bound and cache.passed == 3 * 5
