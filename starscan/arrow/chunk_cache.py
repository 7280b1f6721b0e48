"""Decoded Parquet column chunks kept in memory for the next read of the same file (the BE's
page cache).

StarRocks' BE keeps the decompressed pages of the lake files it scanned in memory (its Page
Cache, on by default, sized as a share of the machine's memory), so a warm scan of an
external table costs little more than sending the rows. Decoding is the largest share of a
warm scan's CPU here too: of TPC-H lineitem's ~560-640 ms of server CPU per million rows,
pyarrow's Parquet decode (snappy, text, dictionary codes) is ~300 (bench/RESULTS.md).

What is kept: one row group's column of one file, as pyarrow decodes it (text read as
dictionary codes already expanded): the arrays of the batches the read passed on (copying
them into buffers of their own doubled the first read's CPU), keyed by the file's path,
size and modification time, the row group and the column's name in the file. The key is the
identity the planner and the reader already check a file against (a file rewritten in place
gets a new size or time, so a new key; entries of files gone or rewritten age out). A file
modified less than ``SETTLED_NS`` before its read is not kept: object stores give times in
whole seconds, and a rewrite of the same size within that second would not show in the key.

Reads take what the cache holds and decode the rest: row groups of a file whose wanted
columns are all held come from memory, the others from the file (and are kept once their
last row has passed, so a read stopped half way keeps nothing of the row group it stopped
in). Batches from memory are the kept arrays (no copy); row groups smaller than a batch are
joined as one ``iter_batches`` over the file joins them.

Memory: the entries together stay under ``max_bytes`` (least recently used first out); an
entry over an eighth of it is not kept, so one large column cannot empty the cache. 0: off.

A table larger than the cache: a plain LRU read end to end by a scan larger than it evicts
each row group before the next scan comes back to it, so every scan misses everything and
pays for filling besides (lineitem SF10, 5 GB decoded against a 5 GB cache, read the same
way twice: no hits at all). Each scan therefore reads through a ``sweep`` (its plan's
table and columns): what a sweep puts in or reads from the cache is its own, and a fill
never evicts an entry of its own sweep. A sweep larger than the cache keeps its first
part cached, reads the rest from the files without keeping it, and the next sweep of the
same kind reads that first part from memory again; a sweep of something else evicts
other sweeps' entries as LRU does.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, ItemsView, Iterator, Sequence, ValuesView
from itertools import groupby
from typing import Any

import pyarrow as pa

#: A file as the cache knows it: (path, size, mtime_ns), as planned and checked at open.
FileKey = tuple[str, int, int]

#: A file modified this recently is read but not kept (coarse store times; see above).
SETTLED_NS = 2_000_000_000

#: Bytes an entry costs besides its buffers (key, objects, Arrow's array data), counted
#: with them: a table of many small files makes many small entries.
ENTRY_OVERHEAD = 1024

#: One entry may take at most this share of the cache.
ENTRY_SHARE = 8


class _Chunk:
    """One row group's column: its field (name, type, nullability, metadata as the file's
    batches carry them) and its values, the decoded batches' own arrays (no copy). Its size
    counts each array's whole buffers: a batch that spans two row groups is counted in both
    (never less than the memory held)."""

    __slots__ = ("field", "values", "nbytes", "sweep")

    def __init__(self, field: pa.Field, values: list[pa.Array], sweep: Hashable = None):
        self.field = field
        self.values = pa.chunked_array(values, type=field.type)
        self.nbytes = sum(v.get_total_buffer_size() for v in values) + ENTRY_OVERHEAD
        self.sweep = sweep  # the sweep that last put it in or read it


_Key = tuple[str, int, int, int, str]


class _Entries:
    """Chunks by key in least-recently-used order, with the bytes they hold."""

    def __init__(self) -> None:
        self._chunks: OrderedDict[_Key, _Chunk] = OrderedDict()
        self.currsize = 0

    def get(self, key: _Key) -> _Chunk | None:
        chunk = self._chunks.get(key)
        if chunk is not None:
            self._chunks.move_to_end(key)
        return chunk

    def size_of(self, key: _Key) -> int:
        """The bytes ``key``'s entry holds (0: none), without counting as a use of it."""
        chunk = self._chunks.get(key)
        return chunk.nbytes if chunk is not None else 0

    def __setitem__(self, key: _Key, chunk: _Chunk) -> None:
        if key in self._chunks:
            del self[key]
        self._chunks[key] = chunk
        self.currsize += chunk.nbytes

    def __delitem__(self, key: _Key) -> None:
        self.currsize -= self._chunks.pop(key).nbytes

    def __contains__(self, key: object) -> bool:
        return key in self._chunks

    def __len__(self) -> int:
        return len(self._chunks)

    def __iter__(self) -> Iterator[_Key]:
        return iter(self._chunks)

    def items(self) -> ItemsView[_Key, _Chunk]:
        return self._chunks.items()

    def values(self) -> ValuesView[_Chunk]:
        return self._chunks.values()

    def oldest(self) -> Iterator[tuple[_Key, _Chunk]]:
        """Least recently used first."""
        return iter(self._chunks.items())

    def popitem(self) -> tuple[_Key, _Chunk]:
        key, chunk = self._chunks.popitem(last=False)
        self.currsize -= chunk.nbytes
        return key, chunk

    def clear(self) -> None:
        self._chunks.clear()
        self.currsize = 0


class ColumnChunkCache:
    """Decoded column chunks, bounded in bytes; safe to share between threads."""

    def __init__(self, max_bytes: int = 0):
        self._lock = threading.Lock()
        self._max_bytes = 0
        self._entries = _Entries()
        self.hits = self.misses = self.inserts = self.evictions = 0  # row groups read; entries
        self.passed = 0  # row groups decoded and not kept: their sweep's own entries fill the cache
        self.configure(max_bytes)

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def enabled(self) -> bool:
        return self._max_bytes > 0

    @property
    def nbytes(self) -> int:
        with self._lock:
            return int(self._entries.currsize)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def configure(self, max_bytes: int) -> None:
        """A new bound (0: off, every entry dropped); entries over it are evicted now."""
        with self._lock:
            self._max_bytes = max(0, int(max_bytes))
            while self._entries and self._entries.currsize > self._max_bytes:
                self._entries.popitem()  # the least recently used
            for key in [key for key, chunk in self._entries.items() if chunk.nbytes > self._entry_max()]:
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _entry_max(self) -> int:
        return self._max_bytes // ENTRY_SHARE

    def sweep(self, sweep: Hashable) -> CacheSweep:
        """The cache as one sweep reads it (see the module's docstring)."""
        return CacheSweep(self, sweep)

    def batches(self, file: FileKey, row_groups: Sequence[int], rows: Sequence[int], columns: Sequence[str],
                batch_rows: int, decode: Callable[[list[int]], Iterator[pa.RecordBatch]],
                joined: bool = True, sweep: Hashable = None) -> Iterator[pa.RecordBatch]:
        """The columns ``columns`` of the file's ``row_groups`` (``rows``: each one's row
        count, from the footer) in batches of at most ``batch_rows``: from memory where every
        column of a row group is held, else ``decode(row_groups)`` (consecutive ones at
        once; its batches are passed on as they are, and kept row group by row group).
        Pieces from memory shorter than ``batch_rows`` (a row group's last, or the kept
        arrays of a read in smaller batches) are copied together up to it when ``joined``,
        else passed on as they are (for a caller that gathers batches itself). ``sweep``:
        whose read this is (None: a read of no sweep, which any fill may evict)."""
        if not self.enabled or len(set(columns)) != len(columns) or not columns:
            yield from decode(list(row_groups))
            return
        held = [self._held(file, rg, columns, sweep) if n else [] for rg, n in zip(row_groups, rows)]
        for from_memory, run in groupby(zip(row_groups, rows, held), key=lambda item: item[2] is not None):
            group = list(run)
            if from_memory:
                pieces = (piece for _, _, chunks in group for piece in _slices(chunks or [], batch_rows))
                yield from _joined(pieces, batch_rows) if joined else pieces
            else:
                yield from self._filling(file, [rg for rg, _, _ in group], [n for _, n, _ in group], columns,
                                         decode([rg for rg, _, _ in group]), sweep)

    def _held(self, file: FileKey, row_group: int, columns: Sequence[str], sweep: Hashable) -> list[_Chunk] | None:
        with self._lock:
            chunks = [self._entries.get((*file, row_group, name)) for name in columns]
            if any(chunk is None for chunk in chunks):
                self.misses += 1
                return None
            self.hits += 1
            for chunk in chunks:
                chunk.sweep = sweep  # type: ignore[union-attr]
            return chunks  # type: ignore[return-value]

    def _filling(self, file: FileKey, row_groups: list[int], rows: list[int], columns: Sequence[str],
                 batches: Iterator[pa.RecordBatch], sweep: Hashable) -> Iterator[pa.RecordBatch]:
        """``batches`` passed on; each row group's share of them kept once it is complete."""
        keep = time.time_ns() - file[2] >= SETTLED_NS
        targets = [(rg, n) for rg, n in zip(row_groups, rows) if n > 0]
        index, left, pieces = 0, targets[0][1] if targets else 0, []
        for batch in batches:
            yield batch
            start = 0
            while keep and start < batch.num_rows:
                if index >= len(targets):  # more rows than the footer says: keep nothing more
                    keep = False
                    break
                take = min(left, batch.num_rows - start)
                pieces.append(batch.slice(start, take))
                start += take
                left -= take
                if left == 0:
                    self._keep(file, targets[index][0], columns, pieces, sweep)
                    pieces = []
                    index += 1
                    left = targets[index][1] if index < len(targets) else 0

    def _keep(self, file: FileKey, row_group: int, columns: Sequence[str], pieces: list[pa.RecordBatch],
              sweep: Hashable) -> None:
        names = pieces[0].schema.names
        if sorted(names) != sorted(columns) or any(p.schema.names != names for p in pieces):
            return
        chunks = []
        try:
            for name in columns:
                i = names.index(name)
                chunks.append(_Chunk(pieces[0].schema.field(i), [p.column(i) for p in pieces], sweep))
        except (pa.ArrowException, ValueError):
            return
        keys = [(*file, row_group, name) for name in columns]
        with self._lock:
            if any(chunk.nbytes > self._entry_max() for chunk in chunks):
                return
            if not self._room(sum(c.nbytes for c in chunks) - sum(self._entries.size_of(k) for k in keys), sweep):
                self.passed += 1
                return
            for key, chunk in zip(keys, chunks):
                self._entries[key] = chunk
                self.inserts += 1

    def _room(self, size: int, sweep: Hashable) -> bool:
        """Room for ``size`` more bytes, made by evicting the least recently used entries of
        other sweeps; False (nothing evicted) when that would take one of ``sweep``'s own."""
        over = self._entries.currsize + size - self._max_bytes
        if over <= 0:
            return True
        victims, freed = [], 0
        for key, chunk in self._entries.oldest():
            if sweep is not None and chunk.sweep == sweep:
                return False
            victims.append(key)
            freed += chunk.nbytes
            if freed >= over:
                break
        if freed < over:
            return False
        for key in victims:
            del self._entries[key]
        self.evictions += len(victims)
        return True


class CacheSweep:
    """One sweep's way into the cache: ``ColumnChunkCache.batches`` with its name."""

    __slots__ = ("cache", "name")

    def __init__(self, cache: ColumnChunkCache, name: Hashable):
        self.cache = cache
        self.name = name

    @property
    def enabled(self) -> bool:
        return self.cache.enabled

    def batches(self, file: FileKey, row_groups: Sequence[int], rows: Sequence[int], columns: Sequence[str],
                batch_rows: int, decode: Callable[[list[int]], Iterator[pa.RecordBatch]],
                joined: bool = True) -> Iterator[pa.RecordBatch]:
        return self.cache.batches(file, row_groups, rows, columns, batch_rows, decode, joined, self.name)


#: What a read takes its decoded chunks from: the cache, or one sweep's way into it.
ChunkSource = ColumnChunkCache | CacheSweep


def _slices(chunks: list[_Chunk], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """A row group's kept columns as batches: the decoded batches again where every column
    was kept from the same read (else cut where any column's arrays end)."""
    if not chunks:  # a row group without rows
        return
    table = pa.Table.from_arrays([chunk.values for chunk in chunks], schema=pa.schema([chunk.field for chunk in chunks]))
    yield from table.to_batches(max_chunksize=batch_rows)


def _joined(pieces: Iterator[pa.RecordBatch], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """``pieces`` with consecutive short ones joined up to ``batch_rows`` rows (a full one
    passes as it is)."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for piece in pieces:
        if pending and rows + piece.num_rows > batch_rows:
            yield from _concat(pending)
            pending, rows = [], 0
        if piece.num_rows >= batch_rows:
            yield piece
            continue
        pending.append(piece)
        rows += piece.num_rows
    if pending:
        yield from _concat(pending)


def _concat(batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if len(batches) == 1:
        yield batches[0]
        return
    try:
        yield pa.concat_batches(batches)
    except pa.ArrowInvalid:  # e.g. dictionary columns whose row groups' dictionaries differ
        yield from batches


class ChunkCacheMetrics:
    """prometheus-client collector: the cache's numbers at scrape time."""

    def __init__(self, cache_of: Callable[[], ColumnChunkCache | None]):
        self.cache_of = cache_of

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        cache = self.cache_of()
        if cache is None:
            return
        for name, doc, value in (("hits", "Row groups of Parquet files read from the page cache", cache.hits),
                                 ("misses", "Row groups of Parquet files decoded from the file (then kept)", cache.misses),
                                 ("inserts", "Decoded column chunks put in the page cache", cache.inserts),
                                 ("evictions", "Column chunks dropped from the page cache to make room", cache.evictions),
                                 ("passed", "Row groups decoded and not kept: their scan's own entries filled the page "
                                            "cache (a table larger than it)", cache.passed)):
            yield CounterMetricFamily(f"starscan_page_cache_{name}", doc, value=value)
        yield GaugeMetricFamily("starscan_page_cache_bytes", "Bytes held by the page cache", value=cache.nbytes)
        yield GaugeMetricFamily("starscan_page_cache_entries", "Column chunks in the page cache", value=len(cache))
        yield GaugeMetricFamily("starscan_page_cache_max_bytes", "page_cache_max_bytes", value=cache.max_bytes)
