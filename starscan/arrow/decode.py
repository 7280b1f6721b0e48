"""Decoding an opened file's row groups (starscan.arrow.opening) into the plan's output:
batches from the page cache or the file, the file's deleted rows left out, Spark's calendar
rule applied, columns coerced to the table's types (starscan.arrow.coercion), partition
values added, and the plan's predicate and output columns (``finish``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from starscan.arrow.coercion import as_type
from starscan.arrow.deletes import kept_mask
from starscan.arrow.dictionary_reads import expanded
from starscan.arrow.nested import map_leaves
from starscan.arrow.opening import OpenPart, parquet_reader
from starscan.arrow.read_stats import ReadStats
from starscan.arrow.rebase import RebaseError, read_column
from starscan.arrow.split_plan import ArrowRead, SplitReadError, first_line

if TYPE_CHECKING:  # the BE's page cache (cachetools): passed in by the BE, never loaded by a client
    from starscan.arrow.chunk_cache import ChunkSource

#: How much larger than ``batch_rows`` a batch of a file with deleted rows is decoded.
_WIDER = 4


def decode(read: ArrowRead, opened: OpenPart, row_groups: list[int], batch_rows: int,
            unfiltered: bool = False, chunks: ChunkSource | None = None,
            stats: ReadStats | None = None) -> Iterator[pa.RecordBatch]:
    """Row groups of one file as the plan's output, decoded on the calling thread alone
    (one ``iter_batches`` for all of them: a file of many small row groups still gives
    full batches). ``unfiltered``: the plan's columns before its predicate and output step
    (``finish``), which the caller runs over runs of batches it gathers itself (the page
    cache's pieces then come as they are kept, short ones not copied together)."""
    part = opened.part
    try:
        # The file's one reader when one thread reads it all, else a reader of its own over
        # the shared open file and footer (reads are positional, so threads do not disturb
        # each other). ParquetFile streams a row group batch by
        # batch (the dataset scanner decodes far ahead first: 0.1 s before the first batch
        # of a 500k-row group, against 7 ms).
        if opened.has_deletes:
            batches = _without_deleted(opened, row_groups, batch_rows, chunks)
        elif opened.orc is not None:
            batches = (batch for _, batch in _orc_batches(opened, opened.columns, batch_rows))
        else:
            batches = _file_batches(opened, row_groups, opened.columns, batch_rows, chunks, joined=not unfiltered)
        for raw in batches:
            if stats is not None:
                stats.read(raw.num_rows)
            order = opened.output_order
            if order is not None and raw.schema.names == opened.columns:
                if raw.num_rows:
                    yield pa.RecordBatch.from_arrays([raw.column(i) for i in order], schema=read.output_schema)
                continue
            out = _shape(read, opened, raw, unfiltered)
            if out is not None and out.num_rows:
                yield out
    except SplitReadError:
        raise
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise SplitReadError(f"table {read.table}: file {part.relative} cannot be read: {first_line(exc, part)}") from None


def _expanded(opened: OpenPart, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    return expanded(batches, opened.dictionary) if opened.dictionary else batches


def _file_batches(opened: OpenPart, row_groups: list[int], columns: list[str], batch_rows: int,
                  chunks: ChunkSource | None, parquet: pq.ParquetFile | None = None,
                  joined: bool = True) -> Iterator[pa.RecordBatch]:
    """A Parquet file's row groups, its ``columns`` as pyarrow decodes them (text read as
    dictionary codes expanded), in batches of at most ``batch_rows`` (one ``iter_batches``
    over all of them: a file of many small row groups still gives full batches): from
    ``chunks`` where it holds them, else decoded from the file (``parquet``: a reader of it
    already open; ``joined``: short pieces from ``chunks`` copied together up to
    ``batch_rows``)."""

    def decode(groups: list[int]) -> Iterator[pa.RecordBatch]:
        reader = parquet if parquet is not None else opened.parquet if opened.parquet is not None else \
            parquet_reader(opened)
        return _expanded(opened, reader.iter_batches(batch_size=batch_rows, row_groups=groups, columns=columns,
                                                     use_threads=False))

    if chunks is None or not chunks.enabled or opened.metadata is None:
        return decode(row_groups)
    part, meta = opened.part, opened.metadata
    return chunks.batches((part.path, part.size, part.mtime_ns), row_groups,
                          [meta.row_group(rg).num_rows for rg in row_groups], columns, batch_rows, decode, joined)


def _positioned(opened: OpenPart, row_groups: list[int], columns: list[str],
                batch_rows: int, chunks: ChunkSource | None = None) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The row groups' batches, each with the position in the file of its first row: a
    Parquet file's row groups read one by one from where the footer says they start, an
    ORC file's stripes in order from its first row."""
    if opened.orc is not None:
        yield from _orc_batches(opened, columns, batch_rows)
        return
    parquet = parquet_reader(opened)
    for rg in row_groups:
        position = opened.row_group_starts[rg]
        for raw in _file_batches(opened, [rg], columns, batch_rows, chunks, parquet):
            yield position, raw
            position += raw.num_rows


def _orc_batches(opened: OpenPart, columns: list[str], batch_rows: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """An ORC file's rows, stripe after stripe, in batches of at most ``batch_rows``, each
    with the position of its first row."""
    position = 0
    for stripe in range(opened.orc.nstripes):
        whole = opened.orc.read_stripe(stripe, columns=columns)
        for start in range(0, whole.num_rows, batch_rows):
            raw = whole.slice(start, batch_rows)
            yield position, raw
            position += raw.num_rows


def _without_deleted(opened: OpenPart, row_groups: list[int], batch_rows: int,
                     chunks: ChunkSource | None = None) -> Iterator[pa.RecordBatch]:
    """The row groups' batches with the file's deleted rows left out (by the positions of
    the batches' rows in the file); the rows whose keys an equality delete names are left
    out too."""
    columns = opened.columns + list(opened.key_columns)
    if opened.deleted is not None and opened.orc is None and not opened.equality:
        yield from _without_positions(opened, row_groups, columns, batch_rows, chunks)
        return
    for position, raw in _positioned(opened, row_groups, columns, batch_rows, chunks):
        n = raw.num_rows
        mask = kept_mask(opened.deleted, position, n) if opened.deleted is not None else None
        for keys, names in opened.equality:
            key_values = [raw.column(columns.index(name)) if name is not None else pa.nulls(n, wanted)
                          for name, wanted in zip(names, keys.types)]
            deleted = keys.deleted_mask(key_values)
            if deleted.any():
                mask = ~deleted if mask is None else (mask & ~deleted)
        yield from _kept(opened, raw, mask, batch_rows)


def _without_positions(opened: OpenPart, row_groups: list[int], columns: list[str],
                       batch_rows: int, chunks: ChunkSource | None = None) -> Iterator[pa.RecordBatch]:
    """A Parquet file's row groups without the rows at its deleted positions: the kept
    rows of a row group are marked once, and each row group is decoded in batches larger by
    its deleted share (at most ``_WIDER`` times), so that the batches left are about
    ``batch_rows`` rows as a compacted file's would be: fewer, fuller batches for every
    later step (bench/deletes.py, issue 37). Where the deleted rows bunch up, a batch left
    with more than ``batch_rows`` rows is sliced; a slice holds at most ``_WIDER`` batches'
    buffers. (One mask per batch in ``_without_deleted``'s loop instead, also wider, cost
    25 % more CPU on the bench's table: 0.90 s against 0.72 s.)"""
    parquet = parquet_reader(opened)
    deleted = opened.deleted
    assert deleted is not None
    for rg in row_groups:
        start = opened.row_group_starts[rg]
        rows = parquet.metadata.row_group(rg).num_rows
        keep = kept_mask(deleted, start, rows)
        kept = rows if keep is None else int(np.count_nonzero(keep))
        if kept == 0:
            continue
        size = min(rows, max(batch_rows, -(-batch_rows * rows // kept)), _WIDER * batch_rows)
        position = 0
        for raw in _file_batches(opened, [rg], columns, size, chunks, parquet):
            n = raw.num_rows
            part = keep[position:position + n] if keep is not None else None
            position += n
            yield from _kept(opened, raw, None if part is None or part.all() else part, batch_rows)


def _kept(opened: OpenPart, raw: pa.RecordBatch, mask: np.ndarray | None,
          batch_rows: int) -> Iterator[pa.RecordBatch]:
    """A decoded batch of a file with deletes as the reader passes it on: the plan's columns
    (without the keys only equality deletes needed), the rows ``mask`` keeps (None: all), in
    batches of at most ``batch_rows``."""
    if opened.key_columns:
        raw = pa.RecordBatch.from_arrays([raw.column(i) for i in range(len(opened.columns))], names=opened.columns)
    if mask is not None:
        raw = raw.filter(pa.array(mask))
    for first in range(0, raw.num_rows, batch_rows):
        yield raw.slice(first, batch_rows) if raw.num_rows > batch_rows else raw


def _rebase_nested(column: Any, kind: str, mode: str, zone: str) -> pa.Array:
    """A nested column's dates and timestamps as Spark reads them (``calendar_of``'s
    "nested" entries: ``mode`` is the dates' mode and the timestamps' mode)."""
    date_mode, stamp_mode = mode.split("/")
    stamp_kind = "int96" if kind == "nested-int96" else "timestamp"

    def leaf(values: pa.Array) -> pa.Array:
        if pa.types.is_date32(values.type):
            return read_column(values, "date", date_mode, zone)
        if pa.types.is_timestamp(values.type) and values.type.tz is not None:  # never TIMESTAMP_NTZ
            return read_column(values, stamp_kind, stamp_mode, zone)
        return values

    return map_leaves(column, leaf)


def _shape(read: ArrowRead, opened: OpenPart, raw: pa.RecordBatch, unfiltered: bool = False) -> pa.RecordBatch | None:
    """A file's batch as the plan's output (``unfiltered``: its columns before the predicate
    and the output step, ``finish``)."""
    part, present = opened.part, opened.present
    n = raw.num_rows
    rebase = {name: (kind, mode, zone) for name, kind, mode, zone in opened.rebase}
    arrays, names = [], []
    for name, expected in read.needed:
        found = present.get(name)
        if found is None:
            arrays.append(pa.nulls(n, expected))
        else:
            column = raw.column(found.name)
            if name in rebase:
                kind, mode, zone = rebase[name]
                try:
                    column = _rebase_nested(column, kind, mode, zone) if kind.startswith("nested") else \
                        read_column(column, kind, mode, zone)
                except RebaseError as exc:
                    raise SplitReadError(f"table {read.table}: column {name} of file {part.relative}: {exc}") from None
            arrays.append(as_type(read, part, name, column, expected))
        names.append(name)
    values = dict(part.partition)
    for name, expected in read.partition_columns:
        arrays.append(pa.array([values.get(name)] * n, expected) if n else pa.array([], expected))
        names.append(name)
    batch = pa.RecordBatch.from_arrays(arrays, names=names)
    return batch if unfiltered else finish(read, batch)


def finish(read: ArrowRead, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The plan's predicate and output columns over its needed and partition columns."""
    if read.filter is not None:
        batch = batch.filter(read.filter)
    return pa.RecordBatch.from_arrays(_output_columns(read, batch), schema=read.output_schema)


def finish_table(read: ArrowRead, table: pa.Table) -> pa.Table:
    """``finish`` over a table of several batches: pyarrow runs a predicate through an Acero
    plan of its own per call, so one call over a run's batches costs the fixed part once."""
    if read.filter is not None:
        table = table.filter(read.filter)
    return pa.Table.from_arrays(_output_columns(read, table), schema=read.output_schema)


def _output_columns(read: ArrowRead, data: pa.RecordBatch | pa.Table) -> list[pa.Array | pa.ChunkedArray]:
    names = data.schema.names
    out = []
    for _out_name, source, char_len in read.output:
        column = data.column(names.index(source))
        if char_len:
            column = pc.utf8_rpad(column, width=char_len, padding=" ")
        out.append(column)
    return out


