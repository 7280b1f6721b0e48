"""A split's file opened for reading: checked against the plan (still the planned version),
its format found (Parquet, or ORC and Avro data files of Iceberg tables), its columns matched
to the plan's by name or field id, its row groups chosen by their statistics, its deletes
and calendar rules found (``OpenPart``). Every row group of a file is then read from this
one open file, whichever thread reads it (starscan.arrow.decode).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from starscan.arrow.avro import MAGIC as AVRO_MAGIC
from starscan.arrow.avro import AvroDataFile
from starscan.arrow.delete_files import deleted_rows
from starscan.arrow.deletes import EqualityKeys
from starscan.arrow.dictionary_reads import dictionary_columns
from starscan.arrow.nested import file_fields
from starscan.arrow.rebase import CORRECTED, LEGACY, file_calendar, is_utc, zone_tables_available
from starscan.arrow.split_plan import ArrowRead, FilePart, PlannedFileGone, SplitReadError, first_line
from starscan.arrow.statistics_use import StatisticsUse
from starscan.core.errors import StarscanError


# INT96 timestamps (Spark's default) as microseconds, Spark's unit: as nanoseconds, years
# after 2262 would overflow.
@functools.cache
def _parquet_format() -> Any:
    """pyarrow.dataset's Parquet format, for row-group statistics. Loaded when a predicate
    first needs it: pyarrow.dataset brings pandas with it (0.17 s), which a full scan in a
    reader's fresh process would otherwise pay for nothing."""
    import pyarrow.dataset as ds

    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))


@dataclass(frozen=True)
class OpenPart:
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
    # whole file (``open_part``'s ``alone``; a second reader over the same footer costs
    # ~50 µs, much of a small file's read); None when threads read its row groups side by
    # side, each with a reader of its own over ``source`` and ``metadata``.
    parquet: Any = None
    # Text columns read as dictionary codes and expanded after (starscan.arrow.dictionary_reads).
    dictionary: tuple[str, ...] = ()

    @property
    def has_deletes(self) -> bool:
        return self.deleted is not None or bool(self.equality)


def open_part(read: ArrowRead, part: FilePart, statistics: StatisticsUse,
               alone: bool = False) -> OpenPart | None:
    """The file checked and opened; None when no row group of it can hold a matching row.
    ``statistics``: the split's record of whether small files' row-group statistics pay.
    ``alone``: one thread reads the whole file, with the
    reader the checks opened (``OpenPart.parquet``); threads reading its row groups side
    by side make readers of their own, and none is kept (a kept one, on the decoding
    threads' path, made a reader thread that outlived the main thread abort the interpreter
    at exit, now and then, in std::terminate)."""
    try:
        return _open_part_of_store(read, part, statistics, alone)
    except StarscanError as exc:  # the store refused or did not answer
        raise SplitReadError(f"table {read.table}: file {part.relative}: {exc.message}") from None


def _check_identity(read: ArrowRead, part: FilePart) -> None:
    """The planned file is still the one planned (size and modification time), or the scan's
    version is gone."""
    identity = read.storage.file_identity(part.path)
    if identity is None:
        raise PlannedFileGone(f"table {read.table} version {read.version} is gone: file {part.relative} was removed "
                             "during the scan; ask the FE for a new plan")
    if identity != (part.size, part.mtime_ns):
        raise PlannedFileGone(f"table {read.table} version {read.version} is gone: file {part.relative} was rewritten "
                             "during the scan; ask the FE for a new plan")


def _open_file(read: ArrowRead, part: FilePart) -> tuple[Any, pq.ParquetFile | None, Any, pa.Schema, int, int]:
    """The file opened once for all its row groups, by its format (its first bytes): the
    source, its Parquet reader or its ORC/Avro reader, its Arrow schema, row groups (ORC
    stripes) and rows."""
    try:
        source = read.storage.open(part.path)
        if isinstance(source, str):
            source = pa.OSFile(source)  # one open file for every row group, as planned
        head = bytes(source.read_at(4, 0))
        if head[:3] == b"ORC":
            import pyarrow.orc

            orc: Any = pyarrow.orc.ORCFile(source)
            return source, None, orc, orc.schema, orc.nstripes, orc.nrows
        if head == AVRO_MAGIC:  # an Iceberg Avro data file: decoded whole, read as ORC files are
            orc = AvroDataFile(source)
            return source, None, orc, orc.schema, orc.nstripes, orc.nrows
        parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
        return source, parquet, None, parquet.schema_arrow, parquet.num_row_groups, parquet.metadata.num_rows
    except (OSError, ValueError, EOFError, pa.ArrowException) as exc:
        raise SplitReadError(f"table {read.table}: file {part.relative} is not a readable Parquet, ORC or Avro file: "
                             f"{first_line(exc, part)}") from None


def _open_part_of_store(read: ArrowRead, part: FilePart, statistics: StatisticsUse,
                        alone: bool) -> OpenPart | None:
    storage = read.storage
    _check_identity(read, part)
    source, parquet, orc, physical, num_row_groups, num_rows = _open_file(read, part)
    lookup = file_fields(physical)
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
    rebase = calendar_of(read, parquet, present) if parquet is not None else ()
    deleted: Any = None
    starts: tuple[int, ...] = ()
    equality: tuple[tuple[EqualityKeys, tuple[str | None, ...]], ...] = ()
    key_columns: list[str] = []
    if part.deletes is not None:
        deleted, keys = deleted_rows(read, part)
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
                                 f"{first_line(exc, part)}") from None
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
    return OpenPart(part, source, parquet.metadata if parquet is not None else None, columns, present, row_groups,
                     output_order, rebase, deleted if part.deletes is not None and len(deleted) else None, starts,
                     equality, tuple(key_columns), orc, parquet if alone and not dictionary else None, dictionary)


def _running_starts(counts: list[int]) -> list[int]:
    out, total = [], 0
    for n in counts:
        out.append(total)
        total += n
    return out

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
    lookup = file_fields(parquet.schema_arrow)
    present = {name: found for name, _ in read.needed if (found := lookup(read.file_name(name))) is not None}
    for _name, kind, mode, zone in calendar_of(read, parquet, present):
        if kind != "date" and mode == LEGACY and not is_utc(zone):
            raise SplitReadError(f"table {read.table}: file {part.relative} holds timestamps of Spark's legacy calendar "
                                 f"in time zone {zone}, which need Spark's zone tables (pyspark is not installed here)")


def calendar_of(read: ArrowRead, parquet: pq.ParquetFile, present: dict[str, pa.Field]) -> tuple[tuple[str, str, str, str], ...]:
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


def parquet_reader(opened: OpenPart) -> pq.ParquetFile:
    """A reader of its own over the part's open file and footer (reads are positional, so
    threads reading row groups of one file side by side do not disturb each other)."""
    return pq.ParquetFile(opened.source, metadata=opened.metadata, coerce_int96_timestamp_unit="us",
                          read_dictionary=opened.dictionary or None)

