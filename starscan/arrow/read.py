"""What a task of the ``arrow`` engine or a client's direct read reads: a split's Parquet
row groups, with pyarrow, into batches of Spark's own Arrow types (what
``DataFrame.toArrowBatchRdd`` would give for the same rows), filtered exactly as the plan's
predicate filters in Spark SQL.

Runs in Spark's Python workers (provider/push/task.py hands the batches on) and in the
client (starscan.client.direct); the read instructions come from starscan.arrow.scan. Each file is
checked against the plan first (size and modification time), so a file rewritten under
the scan fails it with "version ... is gone" instead of giving other rows.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from starscan.arrow.avro import MAGIC as AVRO_MAGIC
from starscan.arrow.avro import AvroDataFile
from starscan.arrow.deletes import DeletesUnreadable, DeletionVector, EqualityKeys, IcebergDeletes, kept_mask, row_deletes
from starscan.arrow.dictionary_reads import dictionary_columns, expanded
from starscan.arrow.nested import (
    FileKey,
    FileName,
    NestedMismatch,
    conform,
    field_id_of,
    is_nested_name,
    key_of,
    map_leaves,
)
from starscan.arrow.read_stats import ReadStats
from starscan.arrow.rebase import (
    CORRECTED,
    LEGACY,
    CalendarRules,
    RebaseError,
    file_calendar,
    is_utc,
    read_column,
    zone_tables_available,
)
from starscan.arrow.statistics_use import StatisticsUse
from starscan.core.errors import StarscanError
from starscan.core.sql_types import SqlType
from starscan.storage.stores import LOCAL, Storage

if TYPE_CHECKING:  # the BE's page cache (cachetools): passed in by the BE, never loaded by a client
    from starscan.arrow.chunk_cache import ColumnChunkCache

BATCH_ROWS = 4096
# INT96 timestamps (Spark's default) as microseconds, Spark's unit: as nanoseconds, years
# after 2262 would overflow.
@functools.cache
def _parquet_format() -> Any:
    """pyarrow.dataset's Parquet format, for row-group statistics. Loaded when a predicate
    first needs it: pyarrow.dataset brings pandas with it (0.17 s), which a full scan in a
    reader's fresh process would otherwise pay for nothing."""
    import pyarrow.dataset as ds

    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))


class SplitReadError(Exception):
    """A file of the split cannot be read as the plan says (gone, changed, corrupt, typed
    differently): the message names the table and the file."""


class PlannedFileGone(SplitReadError):
    """A planned file was removed or rewritten since the plan: its table version is gone."""


@dataclass(frozen=True)
class FilePart:
    path: str                     # absolute
    relative: str                 # as the plan names it
    size: int
    mtime_ns: int
    row_groups: tuple[int, ...] | None        # None: the whole file
    partition: tuple[tuple[str, object], ...] = ()  # canonical column -> typed value
    # The file's row-level deletes (starscan.arrow.deletes: JSON, a vector file's path made
    # absolute), or None.
    deletes: str | None = None


@dataclass(frozen=True)
class ArrowSplit:
    parts: tuple[FilePart, ...]

    def describe(self, files: int | None = None) -> str:
        """The split's files (and row groups) as an error message names them; past ``files``
        of them, how many more (a split of small files may pack hundreds)."""
        shown = self.parts if files is None else self.parts[:files]
        text = ", ".join(f"file {part.relative}{_row_groups_text(part.row_groups)}" for part in shown)
        return text + (f" and {len(self.parts) - len(shown)} more files" if len(shown) < len(self.parts) else "")


def _row_groups_text(groups: tuple[int, ...] | None) -> str:
    """Row groups as a message names them: ' row groups 2-4' for a run, ' row groups 1, 3'
    otherwise, nothing for a whole file."""
    if groups is None:
        return ""
    if not groups:
        return " (no row groups)"
    if len(groups) > 1 and list(groups) == list(range(groups[0], groups[-1] + 1)):
        return f" row groups {groups[0]}-{groups[-1]}"
    return f" row group{'s' if len(groups) != 1 else ''} {', '.join(map(str, groups))}"


@dataclass(frozen=True)
class ArrowRead:
    table: str                    # db.table, for messages
    version: int
    needed: tuple[tuple[str, pa.DataType], ...]   # file columns read: canonical name, Arrow type
    partition_columns: tuple[tuple[str, pa.DataType], ...]
    output: tuple[tuple[str, str, int | None], ...]  # (output name, canonical source, CHAR length)
    output_schema: pa.Schema      # Spark's Arrow types of the output, named as the output
    filter: pc.Expression | None = None
    pushdown: pc.Expression | None = None         # conjuncts over file columns only (row-group stats)
    # File columns of types Spark rebases (DATE, TIMESTAMP; never TIMESTAMP_NTZ), and the
    # session's rules for them (starscan.arrow.rebase).
    dates: tuple[str, ...] = ()
    calendar: CalendarRules = CalendarRules()
    storage: Storage = LOCAL      # where the files are (a local folder or an object store)
    output_columns: tuple[tuple[str, SqlType, bool], ...] = ()  # what the wire conversion needs
    # Column -> its name in the files (starscan.arrow.nested.FileName), where the table
    # format names them apart from the schema (Delta column mapping, Iceberg field ids); a
    # column not here has its own name in the files, and so have its nested fields.
    file_names: tuple[tuple[str, FileName], ...] = ()

    def file_name(self, name: str) -> FileKey:
        """The column's name in the files, or its field id (an int) where ids resolve columns."""
        return key_of(dict(self.file_names).get(name, name))

    def nested_names(self, name: str) -> FileName | None:
        """The column's name in the files with its nested fields' names, where they are named
        apart from the schema; None where they are not."""
        found = dict(self.file_names).get(name)
        return found if found is not None and is_nested_name(found) else None


def read_split(read: ArrowRead, split: ArrowSplit, batch_rows: int = BATCH_ROWS, threads: int = 1,
               finish: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None,
               cut: bool = True, chunks: ColumnChunkCache | None = None,
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
            opened = _open_part(read, part, statistics, alone=True)
            if opened is None:
                continue
            rows = batch_rows if cut or opened.metadata is None or opened.metadata.num_rows <= batch_rows \
                else _decode_rows(opened, batch_rows)
            for batch in _decode(read, opened, opened.row_groups, rows, chunks=chunks, stats=stats):
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


def _run_rows(opened: _OpenPart, batch_rows: int) -> int:
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


def _decode_rows(opened: _OpenPart, batch_rows: int) -> int:
    """Rows per decoded batch for a reader that cuts the batches itself: ``DECODE_ROWS``,
    fewer where the columns read are wide (as ``_run_rows``), never fewer than ``batch_rows``."""
    return max(batch_rows, min(_run_rows(opened, batch_rows), DECODE_ROWS))


def _filtered_in_runs(read: ArrowRead, split: ArrowSplit, batch_rows: int,
                      finish: Callable[[pa.RecordBatch], pa.RecordBatch] | None,
                      cut: bool = True, chunks: ColumnChunkCache | None = None,
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
                out = _finish_table(read, table)
            except (ValueError, pa.ArrowException) as exc:
                raise SplitReadError(f"table {read.table}: the scan's predicate cannot be evaluated: "
                                     f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from None
            step = batch_rows if cut else max(out.num_rows, 1)
            for piece in out.to_batches(max_chunksize=step):
                yield finish(piece) if finish is not None else piece

    statistics = StatisticsUse()
    for part in split.parts:
        opened = _open_part(read, part, statistics, alone=True)
        if opened is None:
            continue
        run_rows = _run_rows(opened, batch_rows)
        for raw in _decode(read, opened, opened.row_groups, _decode_rows(opened, batch_rows), unfiltered=True,
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


@dataclass(frozen=True)
class _OpenPart:
    """A file of the split, checked against the plan and opened once: every row group of it
    is read from this same open file, whichever thread reads it."""
    part: FilePart
    source: Any                      # the open file (pyarrow NativeFile)
    metadata: pq.FileMetaData | None  # its Parquet footer, read once (None: an ORC file)
    columns: list[str]               # the file's own names of the columns read
    present: dict[str, pa.Field]     # canonical column -> the file's field
    row_groups: list[int]            # those to read, after the row-group statistics
    # The output is the file's columns as they are, picked by position: same names and types,
    # no partition columns, predicate or CHAR padding (a plain table's scan; reshaping such
    # batches column by column was 6.5 % of a task's samples). None: reshaped (_shape).
    output_order: tuple[int, ...] | None = None
    # Columns whose values Spark's calendar rule changes or checks in this file:
    # (canonical name, "date" | "timestamp" | "int96", mode, zone).
    rebase: tuple[tuple[str, str, str, str], ...] = ()
    # The positions (from 0, across row groups) of the file's deleted rows, sorted; None
    # when it has no deletes. With them, row groups are decoded one by one (a batch's rows
    # then have known positions) and the deleted rows dropped before anything else.
    deleted: Any = None
    row_group_starts: tuple[int, ...] = ()
    # Iceberg equality deletes: each set of deleted keys with the file's names of its key
    # columns (None: a column the file lacks, NULL in every row); the key columns not among
    # ``columns`` are read too, after them, and dropped once the rows are matched.
    equality: tuple[tuple[EqualityKeys, tuple[str | None, ...]], ...] = ()
    key_columns: tuple[str, ...] = ()
    # An ORC file (Iceberg data files may be ORC): its stripes are its row groups, read in
    # order (ORC's footer does not say where each stripe's rows start). An Avro data file
    # is shown with the same interface (starscan.arrow.avro), as one stripe.
    orc: Any = None
    # The reader the checks opened the Parquet file with, kept when one thread reads the
    # whole file (``_open_part``'s ``alone``; a second reader over the same footer costs
    # ~50 µs, much of a small file's read); None when threads read its row groups side by
    # side, each with a reader of its own over ``source`` and ``metadata``.
    parquet: Any = None
    # Text columns read as dictionary codes and expanded after (starscan.arrow.dictionary_reads).
    dictionary: tuple[str, ...] = ()

    @property
    def has_deletes(self) -> bool:
        return self.deleted is not None or bool(self.equality)


def _open_part(read: ArrowRead, part: FilePart, statistics: StatisticsUse,
               alone: bool = False) -> _OpenPart | None:
    """The file checked and opened; None when no row group of it can hold a matching row.
    ``statistics``: the split's record of whether small files' row-group statistics pay.
    ``alone``: one thread reads the whole file, with the
    reader the checks opened (``_OpenPart.parquet``); threads reading its row groups side
    by side make readers of their own, and none is kept (a kept one, on the decoding
    threads' path, made a reader thread that outlived the main thread abort the interpreter
    at exit, now and then, in std::terminate)."""
    try:
        return _open_part_of_store(read, part, statistics, alone)
    except StarscanError as exc:  # the store refused or did not answer
        raise SplitReadError(f"table {read.table}: file {part.relative}: {exc.message}") from None


def _open_part_of_store(read: ArrowRead, part: FilePart, statistics: StatisticsUse,
                        alone: bool) -> _OpenPart | None:
    storage = read.storage
    identity = storage.file_identity(part.path)
    if identity is None:
        raise PlannedFileGone(f"table {read.table} version {read.version} is gone: file {part.relative} was removed "
                             "during the scan; ask the FE for a new plan")
    if identity != (part.size, part.mtime_ns):
        raise PlannedFileGone(f"table {read.table} version {read.version} is gone: file {part.relative} was rewritten "
                             "during the scan; ask the FE for a new plan")
    parquet: pq.ParquetFile | None = None
    orc: Any = None
    try:
        source = storage.open(part.path)
        if isinstance(source, str):
            source = pa.OSFile(source)  # one open file for every row group, as planned
        head = bytes(source.read_at(4, 0))
        if head[:3] == b"ORC":
            import pyarrow.orc

            orc = pyarrow.orc.ORCFile(source)
            physical, num_row_groups, num_rows = orc.schema, orc.nstripes, orc.nrows
        elif head == AVRO_MAGIC:  # an Iceberg Avro data file: decoded whole, read as ORC files are
            orc = AvroDataFile(source)
            physical, num_row_groups, num_rows = orc.schema, orc.nstripes, orc.nrows
        else:
            parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
            physical, num_row_groups, num_rows = parquet.schema_arrow, parquet.num_row_groups, parquet.metadata.num_rows
    except (OSError, ValueError, EOFError, pa.ArrowException) as exc:
        raise SplitReadError(f"table {read.table}: file {part.relative} is not a readable Parquet, ORC or Avro file: "
                             f"{_first_line(exc, part)}") from None
    lookup = _file_fields(physical)
    columns, present = [], {}
    exact_names = True
    for name, expected in read.needed:
        found = lookup(read.file_name(name))
        if found is None:
            exact_names = False  # no statistics of it either: the predicate sees NULLs
            continue  # Spark reads a column a file lacks as NULL
        present[name] = found
        columns.append(found.name)
        exact_names &= found.name == name and found.type == expected
    row_groups = list(part.row_groups) if part.row_groups is not None else list(range(num_row_groups))
    if any(not 0 <= rg < num_row_groups for rg in row_groups):
        raise SplitReadError(f"table {read.table}: the plan reads row groups {row_groups[0]}-{row_groups[-1]} of file "
                             f"{part.relative}, which has {num_row_groups}: the plan does not match the file")
    if orc is not None and row_groups != list(range(num_row_groups)):
        raise SplitReadError(f"table {read.table}: the plan reads some stripes of ORC file {part.relative}; starscan "
                             "reads ORC files whole")
    rebase = _calendar_of(read, parquet, present) if parquet is not None else ()
    deleted: Any = None
    starts: tuple[int, ...] = ()
    equality: tuple[tuple[EqualityKeys, tuple[str | None, ...]], ...] = ()
    key_columns: list[str] = []
    if part.deletes is not None:
        deleted, keys = _deleted_rows(read, part)
        for found, ids in keys:
            names = tuple(f.name if (f := lookup(i)) is not None else None for i in ids)
            key_columns += [n for n in names if n is not None and n not in columns and n not in key_columns]
            equality += ((found, names),)
        if len(deleted) and int(deleted[-1]) >= num_rows:
            raise SplitReadError(f"table {read.table}: file {part.relative} has {num_rows} rows but "
                                 f"its deletes name row {int(deleted[-1])}")
        if parquet is not None:
            counts = [parquet.metadata.row_group(i).num_rows for i in range(num_row_groups)]
            starts = tuple(int(x) for x in _running_starts(counts))
    if (read.pushdown is not None and exact_names and not rebase and row_groups and parquet is not None
            and statistics.wanted(part.size, len(row_groups))):
        planned = len(row_groups)
        try:  # row-group statistics: skip the groups no row of which can match
            fs, fs_path = storage.arrow_path(part.path)
            fragment = _parquet_format().make_fragment(fs_path, filesystem=fs, row_groups=row_groups)
            kept = fragment.subset(filter=read.pushdown)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise SplitReadError(f"table {read.table}: file {part.relative} cannot be read: "
                                 f"{_first_line(exc, part)}") from None
        row_groups = [rg.id for rg in kept.row_groups] if kept is not None else []
        statistics.record(part.size, planned, not row_groups)
    if not row_groups:
        return None
    dictionary = dictionary_columns(parquet.metadata, physical, columns, row_groups) if parquet is not None else ()
    position = {name: i for i, (name, _) in enumerate(read.needed)}  # = columns' order when all are present
    output_order = None
    if (exact_names and not rebase and len(present) == len(read.needed) == len(set(columns)) and not read.partition_columns
            and read.filter is None and all(src in position and not char_len for _, src, char_len in read.output)):
        output_order = tuple(position[src] for _, src, _ in read.output)
    return _OpenPart(part, source, parquet.metadata if parquet is not None else None, columns, present, row_groups,
                     output_order, rebase, deleted if part.deletes is not None and len(deleted) else None, starts,
                     equality, tuple(key_columns), orc, parquet if alone and not dictionary else None, dictionary)


def _file_fields(schema: pa.Schema) -> Callable[[str | int], pa.Field | None]:
    """A file's top-level field by name (case-insensitively, the first of names differing
    only in case, as Spark reads Parquet) or by field id (an int: Parquet's, or the
    ``iceberg.id`` attribute of an Iceberg ORC file)."""
    by_lower: dict[str, pa.Field] = {}
    by_id: dict[int, pa.Field] = {}
    for f in schema:
        by_lower.setdefault(f.name.lower(), f)
        raw = field_id_of(f)
        if raw is not None:
            by_id.setdefault(raw, f)

    def lookup(key: str | int) -> pa.Field | None:
        return by_id.get(key) if isinstance(key, int) else by_lower.get(key.lower())

    return lookup


def _running_starts(counts: list[int]) -> list[int]:
    out, total = [], 0
    for n in counts:
        out.append(total)
        total += n
    return out


def _deleted_rows(read: ArrowRead, part: FilePart) -> tuple[Any, list[tuple[EqualityKeys, tuple[int, ...]]]]:
    """The file's deletes (starscan.arrow.deletes), read from the store: the positions of its
    deleted rows (sorted), and its equality deletes as sets of keys with their field ids."""
    assert part.deletes is not None
    storage = read.storage
    try:
        deletes = row_deletes(part.deletes)
        if isinstance(deletes, DeletionVector):
            vector = deletes

            def read_range(offset: int, length: int) -> bytes:
                assert vector.path is not None
                return _read_range(storage, vector.path, offset, length)

            return vector.positions(read_range), []

        def read_positions(path: str, data_file: str) -> Any:
            table = _delete_file(storage, path, ["file_path", "pos"], [("file_path", "=", data_file)])
            return table.column("pos").to_numpy()

        return (deletes.positions(read_positions, lambda path, offset, length: _read_range(storage, path, offset, length)),
                _equality_keys(read, deletes))
    except DeletesUnreadable as exc:
        raise SplitReadError(f"table {read.table}: file {part.relative}: its row deletes cannot be read: "
                             f"{exc}") from None
    except FileNotFoundError:
        raise PlannedFileGone(f"table {read.table} version {read.version} is gone: a delete file of file "
                              f"{part.relative} was removed; ask the FE for a new plan") from None
    except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
        raise SplitReadError(f"table {read.table}: file {part.relative}: its row deletes cannot be read: "
                             f"{_first_line(exc, part)}") from None


def _read_range(storage: Storage, path: str, offset: int, length: int) -> bytes:
    """``length`` bytes of a file of the store from ``offset`` (a deletion vector's)."""
    source = storage.open(path)
    handle = pa.OSFile(source) if isinstance(source, str) else source
    try:
        return bytes(handle.read_at(length, offset))
    finally:
        handle.close()


_KEYS_CACHE_BYTES = 256 << 20
_keys_lock = threading.Lock()
_keys_cache: Any = None


def _equality_keys(read: ArrowRead, deletes: IcebergDeletes) -> list[tuple[EqualityKeys, tuple[int, ...]]]:
    """The deleted keys of the data file's equality delete files, one set per list of field
    ids. Many data files share the same delete files (a global delete of an unpartitioned
    table applies to every older file), so a process keeps the sets it built, by the files'
    locations and identities (delete files are never rewritten in place), within 256 MiB."""
    global _keys_cache
    by_ids: dict[tuple[int, ...], list[str]] = {}
    for e in deletes.equality:
        by_ids.setdefault(e.field_ids, []).append(e.file)
    out = []
    for ids, files in by_ids.items():
        key = (ids, tuple((path, read.storage.file_identity(path)) for path in files))
        if any(identity is None for _, identity in key[1]):
            raise FileNotFoundError(files[0])
        with _keys_lock:
            if _keys_cache is None:
                from cachetools import LRUCache

                _keys_cache = LRUCache(maxsize=_KEYS_CACHE_BYTES, getsizeof=lambda k: max(k.nbytes, 1))
            found = _keys_cache.get(key)
        if found is None:
            tables = [_equality_file(read, path, ids) for path in files]
            merged = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
            found = EqualityKeys([merged.column(i).combine_chunks() for i in range(merged.num_columns)])
            if found.nbytes <= _KEYS_CACHE_BYTES // 4:
                with _keys_lock:
                    _keys_cache[key] = found
        out.append((found, ids))
    return out


def _delete_file(storage: Storage, path: str, columns: list[str] | Callable[[pa.Schema], list[str]],
                 filters: list[tuple[str, str, str]] | None = None) -> pa.Table:
    """Columns of an Iceberg delete file, which its writer wrote in the table's format:
    Parquet (``filters`` applied while reading), ORC or Avro (filtered after).
    ``columns``: their names, or a function of the file's schema giving them."""
    source = storage.open(path)
    handle = pa.OSFile(source) if isinstance(source, str) else source
    head = bytes(handle.read_at(4, 0))
    if head[:3] == b"ORC" or head == AVRO_MAGIC:
        whole: Any
        if head == AVRO_MAGIC:
            whole = AvroDataFile(handle)
        else:
            import pyarrow.orc

            whole = pyarrow.orc.ORCFile(handle)
        names = columns(whole.schema) if callable(columns) else columns
        stripes = [whole.read_stripe(i, columns=names) for i in range(whole.nstripes)]
        table = pa.Table.from_batches(stripes) if stripes else whole.schema.empty_table().select(names)
        for name, _, value in filters or ():
            table = table.filter(pc.equal(table.column(name), value))
        return table
    parquet = pq.ParquetFile(handle)
    names = columns(parquet.schema_arrow) if callable(columns) else columns
    if filters:
        return pq.read_table(handle, columns=names, filters=filters)
    return parquet.read(columns=names)


def _equality_file(read: ArrowRead, path: str, ids: tuple[int, ...]) -> pa.Table:
    """An equality delete file's key columns, found by field id, named by it."""
    fields: list[pa.Field | None] = []

    def key_columns(schema: pa.Schema) -> list[str]:
        lookup = _file_fields(schema)
        fields.extend(lookup(i) for i in ids)
        missing = [i for i, f in zip(ids, fields) if f is None]
        if missing:
            raise DeletesUnreadable(f"equality delete file {path} has no column of field id {missing[0]}")
        return [f.name for f in fields if f is not None]

    table = _delete_file(read.storage, path, key_columns)
    return pa.table([table.column(f.name) for f in fields if f is not None], names=[str(i) for i in ids])


def check_calendar(read: ArrowRead, part: FilePart) -> None:
    """Raise SplitReadError when this process cannot rebase the file's timestamps as Spark
    would (a legacy file in a zone other than UTC, and no Spark installed for its zone
    tables): a direct reader checks its files with this before its first row, so that such
    a tablet goes to the BE instead of failing halfway."""
    if not read.dates or zone_tables_available():
        return
    try:
        parquet = pq.ParquetFile(read.storage.open(part.path))
    except (OSError, ValueError, pa.ArrowException, StarscanError) as exc:
        raise SplitReadError(f"table {read.table}: file {part.relative} cannot be read: {exc}") from None
    lookup = _file_fields(parquet.schema_arrow)
    present = {name: found for name, _ in read.needed if (found := lookup(read.file_name(name))) is not None}
    for _name, kind, mode, zone in _calendar_of(read, parquet, present):
        if kind != "date" and mode == LEGACY and not is_utc(zone):
            raise SplitReadError(f"table {read.table}: file {part.relative} holds timestamps of Spark's legacy calendar "
                                 f"in time zone {zone}, which need Spark's zone tables (pyspark is not installed here)")


def _calendar_of(read: ArrowRead, parquet: pq.ParquetFile, present: dict[str, pa.Field]) -> tuple[tuple[str, str, str, str], ...]:
    """The columns of this file that Spark's calendar rule rebases or checks, with how."""
    names = [name for name in read.dates if name in present]
    if not names:
        return ()
    calendar = file_calendar(parquet.schema_arrow.metadata, read.calendar)
    if calendar.plain:
        return ()
    schema = parquet.schema
    physical = {schema.column(i).path: schema.column(i).physical_type for i in range(len(schema))}
    out = []
    for name in names:
        file_name = present[name].name
        if pa.types.is_nested(present[name].type):
            # Dates and timestamps inside a struct, list or map: one rule for the column's
            # dates and one for its timestamps (INT96 ones when the file stores them so).
            int96 = any(path.startswith(f"{file_name}.") and kind == "INT96" for path, kind in physical.items())
            modes = (calendar.datetime_mode, calendar.int96_mode if int96 else calendar.datetime_mode)
            if any(m != CORRECTED for m in modes):
                out.append((name, "nested-int96" if int96 else "nested", "/".join(modes), calendar.zone))
            continue
        kind = "int96" if physical.get(file_name) == "INT96" else (
            "date" if pa.types.is_date(present[name].type) else "timestamp")
        mode = calendar.int96_mode if kind == "int96" else calendar.datetime_mode
        if mode != CORRECTED:
            out.append((name, kind, mode, calendar.zone))
    return tuple(out)


def _decode(read: ArrowRead, opened: _OpenPart, row_groups: list[int], batch_rows: int,
            unfiltered: bool = False, chunks: ColumnChunkCache | None = None,
            stats: ReadStats | None = None) -> Iterator[pa.RecordBatch]:
    """Row groups of one file as the plan's output, decoded on the calling thread alone
    (one ``iter_batches`` for all of them: a file of many small row groups still gives
    full batches). ``unfiltered``: the plan's columns before its predicate and output step
    (``_finish``), which the caller runs over runs of batches it gathers itself (the page
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
        raise SplitReadError(f"table {read.table}: file {part.relative} cannot be read: {_first_line(exc, part)}") from None


def _parquet_reader(opened: _OpenPart) -> pq.ParquetFile:
    """A reader of its own over the part's open file and footer (reads are positional, so
    threads reading row groups of one file side by side do not disturb each other)."""
    return pq.ParquetFile(opened.source, metadata=opened.metadata, coerce_int96_timestamp_unit="us",
                          read_dictionary=opened.dictionary or None)


def _expanded(opened: _OpenPart, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    return expanded(batches, opened.dictionary) if opened.dictionary else batches


def _file_batches(opened: _OpenPart, row_groups: list[int], columns: list[str], batch_rows: int,
                  chunks: ColumnChunkCache | None, parquet: pq.ParquetFile | None = None,
                  joined: bool = True) -> Iterator[pa.RecordBatch]:
    """A Parquet file's row groups, its ``columns`` as pyarrow decodes them (text read as
    dictionary codes expanded), in batches of at most ``batch_rows`` (one ``iter_batches``
    over all of them: a file of many small row groups still gives full batches): from
    ``chunks`` where it holds them, else decoded from the file (``parquet``: a reader of it
    already open; ``joined``: short pieces from ``chunks`` copied together up to
    ``batch_rows``)."""

    def decode(groups: list[int]) -> Iterator[pa.RecordBatch]:
        reader = parquet if parquet is not None else opened.parquet if opened.parquet is not None else \
            _parquet_reader(opened)
        return _expanded(opened, reader.iter_batches(batch_size=batch_rows, row_groups=groups, columns=columns,
                                                     use_threads=False))

    if chunks is None or not chunks.enabled or opened.metadata is None:
        return decode(row_groups)
    part, meta = opened.part, opened.metadata
    return chunks.batches((part.path, part.size, part.mtime_ns), row_groups,
                          [meta.row_group(rg).num_rows for rg in row_groups], columns, batch_rows, decode, joined)


def _positioned(opened: _OpenPart, row_groups: list[int], columns: list[str],
                batch_rows: int, chunks: ColumnChunkCache | None = None) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The row groups' batches, each with the position in the file of its first row: a
    Parquet file's row groups read one by one from where the footer says they start, an
    ORC file's stripes in order from its first row."""
    if opened.orc is not None:
        yield from _orc_batches(opened, columns, batch_rows)
        return
    parquet = _parquet_reader(opened)
    for rg in row_groups:
        position = opened.row_group_starts[rg]
        for raw in _file_batches(opened, [rg], columns, batch_rows, chunks, parquet):
            yield position, raw
            position += raw.num_rows


def _orc_batches(opened: _OpenPart, columns: list[str], batch_rows: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """An ORC file's rows, stripe after stripe, in batches of at most ``batch_rows``, each
    with the position of its first row."""
    position = 0
    for stripe in range(opened.orc.nstripes):
        whole = opened.orc.read_stripe(stripe, columns=columns)
        for start in range(0, whole.num_rows, batch_rows):
            raw = whole.slice(start, batch_rows)
            yield position, raw
            position += raw.num_rows


def _without_deleted(opened: _OpenPart, row_groups: list[int], batch_rows: int,
                     chunks: ColumnChunkCache | None = None) -> Iterator[pa.RecordBatch]:
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


def _without_positions(opened: _OpenPart, row_groups: list[int], columns: list[str],
                       batch_rows: int, chunks: ColumnChunkCache | None = None) -> Iterator[pa.RecordBatch]:
    """A Parquet file's row groups without the rows at its deleted positions: the kept
    rows of a row group are marked once, and each row group is decoded in batches larger by
    its deleted share (at most ``_WIDER`` times), so that the batches left are about
    ``batch_rows`` rows as a compacted file's would be: fewer, fuller batches for every
    later step (bench/deletes.py, issue 37). Where the deleted rows bunch up, a batch left
    with more than ``batch_rows`` rows is sliced; a slice holds at most ``_WIDER`` batches'
    buffers. (One mask per batch in ``_without_deleted``'s loop instead, also wider, cost
    25 % more CPU on the bench's table: 0.90 s against 0.72 s.)"""
    parquet = _parquet_reader(opened)
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


def _kept(opened: _OpenPart, raw: pa.RecordBatch, mask: np.ndarray | None,
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


#: How much larger than ``batch_rows`` a batch of a file with deleted rows is decoded.
_WIDER = 4

#: Batches each decoding thread may hold ahead of the caller (memory: threads x this x a batch).
_AHEAD = 2
_END = object()


def _read_concurrently(read: ArrowRead, split: ArrowSplit, batch_rows: int, threads: int,
                       finish: Callable[[pa.RecordBatch], pa.RecordBatch] | None,
                       chunks: ColumnChunkCache | None = None,
                       stats: ReadStats | None = None) -> Iterator[pa.RecordBatch]:
    """``read_split`` with up to ``threads`` row groups decoding at once, their batches
    handed out as they come (row groups interleave; a row group's own batches stay in
    order). One queue of ``threads x _AHEAD`` batches bounds the memory: the threads wait
    while it is full. Files are opened and checked in the split's order; the first error
    reaches the caller and stops the others. The threads are daemons, so a read left
    unfinished never keeps the interpreter from exiting (and a reader on a thread of its
    own may go on after the main thread has ended)."""
    stop = threading.Event()
    out: queue.Queue[Any] = queue.Queue(maxsize=threads * _AHEAD)
    units = _units(read, split)
    take = threading.Lock()

    def work() -> None:
        try:
            while not stop.is_set():
                with take:
                    unit = next(units, None)
                if unit is None or stop.is_set():
                    break
                opened, row_group = unit
                for batch in _decode(read, opened, opened.row_groups if row_group < 0 else [row_group], batch_rows,
                                     chunks=chunks, stats=stats):
                    if not _put(out, finish(batch) if finish is not None else batch, stop):
                        return
            _put(out, _END, stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who raises it
            _put(out, exc, stop)

    workers = [threading.Thread(target=work, name=f"starscan-decode-{i}", daemon=True) for i in range(threads)]
    try:
        for worker in workers:
            worker.start()
        running = threads
        while running:
            item = out.get()
            if item is _END:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()


def _units(read: ArrowRead, split: ArrowSplit) -> Iterator[tuple[_OpenPart, int]]:
    """(open file, row group; -1: all of an ORC file's) in the split's order, each file
    opened when first needed."""
    statistics = StatisticsUse()
    for part in split.parts:
        opened = _open_part(read, part, statistics)
        if opened is not None:
            if opened.orc is not None:  # read whole, in order
                yield opened, -1
                continue
            for row_group in opened.row_groups:
                yield opened, row_group


def _put(out: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    """Hand ``item`` to the caller, waiting while the queue is full; False when the read
    was stopped (the caller closed it or failed)."""
    while not stop.is_set():
        try:
            out.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _rebase_nested(column: Any, kind: str, mode: str, zone: str) -> pa.Array:
    """A nested column's dates and timestamps as Spark reads them (``_calendar_of``'s
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


def _shape(read: ArrowRead, opened: _OpenPart, raw: pa.RecordBatch, unfiltered: bool = False) -> pa.RecordBatch | None:
    """A file's batch as the plan's output (``unfiltered``: its columns before the predicate
    and the output step, ``_finish``)."""
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
            arrays.append(_as_type(read, part, name, column, expected))
        names.append(name)
    values = dict(part.partition)
    for name, expected in read.partition_columns:
        arrays.append(pa.array([values.get(name)] * n, expected) if n else pa.array([], expected))
        names.append(name)
    batch = pa.RecordBatch.from_arrays(arrays, names=names)
    return batch if unfiltered else _finish(read, batch)


def _finish(read: ArrowRead, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The plan's predicate and output columns over its needed and partition columns."""
    if read.filter is not None:
        batch = batch.filter(read.filter)
    return pa.RecordBatch.from_arrays(_output_columns(read, batch), schema=read.output_schema)


def _finish_table(read: ArrowRead, table: pa.Table) -> pa.Table:
    """``_finish`` over a table of several batches: pyarrow runs a predicate through an Acero
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


def _as_type(read: ArrowRead, part: FilePart, name: str, array: pa.Array, expected: pa.DataType) -> pa.Array:
    actual = array.type
    if actual == expected:
        return array
    if isinstance(actual, pa.BaseExtensionType):  # a Parquet UUID: arrow.uuid over 16 bytes
        array, actual = array.storage, actual.storage_type
    if pa.types.is_fixed_size_binary(actual):
        if pa.types.is_string(expected) and actual.byte_width == 16:
            return uuid_text(array)
        if pa.types.is_binary(expected):
            return array.cast(expected)
    if pa.types.is_nested(expected) and pa.types.is_nested(actual):
        # Arrays, maps and structs as Spark's Arrow names their parts (a list's "element",
        # a map's "key"/"value"), their struct fields found by the names or field ids the
        # files give them (starscan.arrow.nested), their values by the rules below.
        def leaf(values: pa.Array, wanted: pa.DataType) -> pa.Array:
            return _as_type(read, part, name, values, wanted)

        try:
            return conform(array, read.nested_names(name), expected, leaf)
        except (NestedMismatch, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SplitReadError(f"table {read.table}: column {name} of file {part.relative} is {actual}, "
                                 f"which does not read as the table's {expected}: {exc}") from None
    if pa.types.is_timestamp(expected) and pa.types.is_timestamp(actual):
        if expected.tz is not None:
            # An instant: a zone-less physical timestamp (INT96) counts in UTC, as Spark reads it.
            utc = array if actual.tz is not None else array.cast(pa.timestamp(actual.unit, tz="UTC"))
            return utc.cast(expected, safe=False)
        if actual.tz is None:
            return array.cast(expected, safe=False)
    widening = (
        (pa.types.is_integer(actual) and pa.types.is_integer(expected) and actual.bit_width <= expected.bit_width
         and pa.types.is_signed_integer(actual))
        # Spark reads unsigned Parquet integers as the next wider signed type, UINT64 as
        # DECIMAL(20, 0): every value fits.
        or (pa.types.is_unsigned_integer(actual) and pa.types.is_signed_integer(expected)
            and actual.bit_width < expected.bit_width)
        or (pa.types.is_uint64(actual) and pa.types.is_decimal(expected) and expected.precision - expected.scale >= 20)
        or (pa.types.is_float32(actual) and pa.types.is_float64(expected))
        # Iceberg's decimal promotion: more precision, the same scale
        or (pa.types.is_decimal(actual) and pa.types.is_decimal(expected) and actual.scale == expected.scale
            and actual.precision <= expected.precision)
        or (pa.types.is_large_string(actual) and pa.types.is_string(expected))
        or (pa.types.is_large_binary(actual) and pa.types.is_binary(expected))
        or (pa.types.is_dictionary(actual) and actual.value_type == expected)
    )
    if widening:
        return array.cast(expected)
    raise SplitReadError(f"table {read.table}: column {name} of file {part.relative} is {actual}, "
                         f"but the table's schema says {expected}")


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
# Where the 32 hex digits go in a UUID's 36 characters (8-4-4-4-12, dashes between).
_DIGIT_AT = np.array([i for i in range(36) if i not in (8, 13, 18, 23)])


def uuid_text(array: pa.Array) -> pa.Array:
    """16-byte values as UUID text (lower-case 8-4-4-4-12), as Java's UUID.toString and
    Spark's Iceberg connector write them; nulls stay null."""
    n = len(array)
    if n == 0:
        return pa.array([], pa.string())
    data = np.frombuffer(array.buffers()[1], dtype=np.uint8)[array.offset * 16:(array.offset + n) * 16].reshape(n, 16)
    digits = np.empty((n, 32), dtype=np.uint8)
    digits[:, 0::2] = _HEX[data >> 4]
    digits[:, 1::2] = _HEX[data & 15]
    text = np.full((n, 36), ord("-"), dtype=np.uint8)
    text[:, _DIGIT_AT] = digits
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int32)
    out = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text.tobytes())])
    return pc.if_else(array.is_null(), pa.scalar(None, pa.string()), out) if array.null_count else out


def _first_line(exc: BaseException, part: FilePart) -> str:
    """pyarrow's reason, naming the file as the plan does (not where the warehouse is)."""
    text = str(exc).strip().replace(part.path, part.relative)
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
