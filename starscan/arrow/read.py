"""What a task of the ``arrow`` engine or a client's direct read reads: a split's Parquet
row groups, with pyarrow, into batches of Spark's own Arrow types (what
``DataFrame.toArrowBatchRdd`` would give for the same rows), filtered exactly as the plan's
predicate filters in Spark SQL.

Runs in Spark's Python workers (provider/push/task.py hands the batches on), in the BE's
own reads and in the client (starscan.client.direct); the read instructions come from
starscan.arrow.scan (``ArrowRead``, starscan.arrow.split_plan). Each file is checked against
the plan first (size and modification time), so a file rewritten under the scan fails it
with "version ... is gone" instead of giving other rows. The steps, a module each: opening
a file (starscan.arrow.opening, its deletes from starscan.arrow.delete_files), decoding its
row groups into the plan's output (starscan.arrow.decode, types by
starscan.arrow.coercion); this module runs them over a split: in order on one thread,
filtered in runs, or row groups side by side on several (starscan.core.interleave).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from starscan.arrow.decode import decode, finish_table
from starscan.arrow.opening import OpenPart, open_part
from starscan.arrow.read_stats import ReadStats
from starscan.arrow.split_plan import BATCH_ROWS, ArrowRead, ArrowSplit, SplitReadError
from starscan.arrow.statistics_use import StatisticsUse
from starscan.core.interleave import Interleaved

if TYPE_CHECKING:  # the BE's page cache (cachetools): passed in by the BE, never loaded by a client
    from starscan.arrow.chunk_cache import ChunkSource

#: Batches each decoding thread may hold ahead of the caller (memory: threads x this x a batch).
_AHEAD = 2


def read_split(read: ArrowRead, split: ArrowSplit, batch_rows: int = BATCH_ROWS, threads: int = 1,
               finish: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None,
               cut: bool = True, chunks: ChunkSource | None = None,
               stats: ReadStats | None = None) -> Iterator[pa.RecordBatch]:
    """The split's rows in batches of at most ``batch_rows``; ``stats``: counts what the read
    took from the files (starscan.arrow.read_stats).

    ``cut=False`` (one thread): a file of more than ``batch_rows`` rows in batches as long as a
    filter's runs (``_decode_rows``: 64 Ki rows, fewer where rows are wide), for a caller that
    converts them to the wire's types and cuts them itself (``rechunk``). Decoding and
    converting cost a fixed time per batch: lineitem's read, conversion and IPC took 540-640 ms
    of CPU per million rows in 4,096-row batches against 440-490 in 32 Ki-row ones.

    ``threads`` 1 (a Spark task, which shares its cores with the other tasks): one row group
    after another in the caller's thread, in order. More (a reader's own process): up to
    ``threads`` row groups decoded at once, each on a thread of its own, their batches
    interleaved. Whole row groups side by side use the cores better than one row group's
    columns in parallel: lineitem's 6 M rows take 0.52 s on 2 cores, against 0.68-0.87 s
    (docs/direct-reads.md). ``finish`` runs on each batch in the thread that decoded it
    (the client's wire conversion, so that it is parallel too). ``chunks``: the process's
    cache of decoded column chunks (the BE's; starscan.arrow.chunk_cache), asked before a
    Parquet file's row groups are decoded and filled after."""
    if threads <= 1:
        if read.filter is not None:
            yield from _filtered_in_runs(read, split, batch_rows, finish, cut, chunks, stats)
            return
        statistics = StatisticsUse()
        for part in split.parts:
            opened = open_part(read, part, statistics, alone=True)
            if opened is None:
                continue
            rows = batch_rows if cut or opened.metadata is None or opened.metadata.num_rows <= batch_rows \
                else _decode_rows(opened, batch_rows)
            for batch in decode(read, opened, opened.row_groups, rows, chunks=chunks, stats=stats):
                yield finish(batch) if finish is not None else batch
        return
    yield from _read_concurrently(read, split, batch_rows, threads, finish, chunks, stats)


#: Rows a predicate runs over at once (``_filtered_in_runs``): pyarrow runs an expression
#: through an Acero plan of its own, a fixed ~0.4-1.5 ms per call on the machines measured.
#: On one lineitem file, with four columns, the filter cost 91 ms of CPU per million rows read
#: over 4,096-row batches and 18 ms over runs of 64 Ki rows; with every column, 48 ms over
#: 64 Ki-row batches and 23 ms over a table of sixteen of them. A run is a table of the
#: decoded batches (``DECODE_ROWS`` each, not copied together) and stays under
#: ``FILTER_RUN_BYTES`` of the columns read, as the file's footer sizes them (lineitem's whole
#: rows: ~9 MB for 64 Ki rows), so wide rows make shorter runs. What a run holds is the
#: memory a reader of a filtered scan needs at most besides its output.
FILTER_RUN_ROWS = 1 << 18
FILTER_RUN_BYTES = 32 << 20

#: Rows per decoded batch of a reader that cuts the batches itself (``cut=False``, and the
#: runs' batches): decoding and converting cost a fixed time per batch.
DECODE_ROWS = 1 << 16


def _run_rows(opened: OpenPart, batch_rows: int) -> int:
    """Rows per filter run for this file: ``FILTER_RUN_ROWS``, fewer where the columns read
    are wide, never fewer than ``batch_rows``."""
    meta = opened.metadata
    if meta is None or not opened.row_groups:
        return batch_rows
    group = meta.row_group(opened.row_groups[0])
    if group.num_rows <= 0:
        return batch_rows
    wanted = set(opened.columns)
    width = sum(group.column(j).total_uncompressed_size for j in range(group.num_columns)
                if group.column(j).path_in_schema.split(".")[0] in wanted) / group.num_rows
    return max(batch_rows, min(FILTER_RUN_ROWS, int(FILTER_RUN_BYTES // max(width, 1.0))))


def _decode_rows(opened: OpenPart, batch_rows: int) -> int:
    """Rows per decoded batch for a reader that cuts the batches itself: ``DECODE_ROWS``,
    fewer where the columns read are wide (as ``_run_rows``), never fewer than ``batch_rows``."""
    return max(batch_rows, min(_run_rows(opened, batch_rows), DECODE_ROWS))


def _filtered_in_runs(read: ArrowRead, split: ArrowSplit, batch_rows: int,
                      finish: Callable[[pa.RecordBatch], pa.RecordBatch] | None,
                      cut: bool = True, chunks: ChunkSource | None = None,
                      stats: ReadStats | None = None) -> Iterator[pa.RecordBatch]:
    """``read_split`` in one thread for a plan with a predicate: the files' batches, in order,
    are gathered into runs of up to ``_run_rows`` rows before the predicate and the output step run on them, then handed on in batches of at
    most ``batch_rows``. A predicate costs a fixed time per call whatever the rows, so a large
    file pays it per run, and a split of many small files (a streaming job's) per run, not
    per file. ``cut=False``: each run's output handed on as the predicate gives it, a piece
    per batch of the run, for a caller that cuts (and joins) the rows itself (``rechunk``)."""
    run: list[pa.RecordBatch] = []
    rows = 0

    def emit() -> Iterator[pa.RecordBatch]:
        # The run's batches as one table (no copy: its columns are the batches' arrays), so
        # the predicate runs once over all of them; only the rows it keeps are copied, once
        # (joining its pieces would copy them again: 0.9 GB/s here, slower than the filter).
        try:
            tables = [pa.Table.from_batches(run)]
        except pa.ArrowInvalid:  # batches of files that differ in a detail of their types: one by one
            tables = [pa.Table.from_batches([batch]) for batch in run]
        run.clear()
        for table in tables:
            try:
                out = finish_table(read, table)
            except (ValueError, pa.ArrowException) as exc:
                raise SplitReadError(f"table {read.table}: the scan's predicate cannot be evaluated: "
                                     f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from None
            step = batch_rows if cut else max(out.num_rows, 1)
            for piece in out.to_batches(max_chunksize=step):
                yield finish(piece) if finish is not None else piece

    statistics = StatisticsUse()
    for part in split.parts:
        opened = open_part(read, part, statistics, alone=True)
        if opened is None:
            continue
        run_rows = _run_rows(opened, batch_rows)
        for raw in decode(read, opened, opened.row_groups, _decode_rows(opened, batch_rows), unfiltered=True,
                           chunks=chunks, stats=stats):
            if run and rows + raw.num_rows > run_rows:
                yield from emit()
                rows = 0
            run.append(raw)
            rows += raw.num_rows
            if rows >= run_rows:
                yield from emit()
                rows = 0
    if run:
        yield from emit()


def _read_concurrently(read: ArrowRead, split: ArrowSplit, batch_rows: int, threads: int,
                       finish: Callable[[pa.RecordBatch], pa.RecordBatch] | None,
                       chunks: ChunkSource | None = None,
                       stats: ReadStats | None = None) -> Iterator[pa.RecordBatch]:
    """``read_split`` with up to ``threads`` row groups decoding at once, their batches
    handed out as they come (row groups interleave; a row group's own batches stay in
    order), at most ``threads x _AHEAD`` of them waiting. Files are opened and checked in the
    split's order; the first error reaches the caller and stops the others."""

    def row_group(unit: tuple[OpenPart, int]) -> Iterator[pa.RecordBatch]:
        opened, group = unit
        for batch in decode(read, opened, opened.row_groups if group < 0 else [group], batch_rows,
                            chunks=chunks, stats=stats):
            yield finish(batch) if finish is not None else batch

    yield from Interleaved(_units(read, split), row_group, threads, ahead=_AHEAD, name="starscan-decode")


def _units(read: ArrowRead, split: ArrowSplit) -> Iterator[tuple[OpenPart, int]]:
    """(open file, row group; -1: all of an ORC file's) in the split's order, each file
    opened when first needed."""
    statistics = StatisticsUse()
    for part in split.parts:
        opened = open_part(read, part, statistics)
        if opened is not None:
            if opened.orc is not None:  # read whole, in order
                yield opened, -1
                continue
            for row_group in opened.row_groups:
                yield opened, row_group
