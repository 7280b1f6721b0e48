"""Reading a direct plan's tablets from their files, in the reader's process.

A direct plan (starscan.arrow.direct) names each tablet's files and says how the BE would read
them. This module reads them the same way, with the kernel's own code: the read
instructions and the predicate's exact pyarrow form (starscan.arrow.scan), the Parquet
reader (starscan.arrow.read) and the wire types (starscan.arrow.wire), so a tablet read
here gives the rows and types the BE would have sent.

The storage is reached with the reader's own credentials (``StorageOptions``, or the
store's standard environment): the plan never carries any. Before a tablet's first row,
every file's identity (size and modification time) is checked against the plan; a tablet
whose file changed, vanished or cannot be reached is not read here (``Unreadable``), and
the reader sends it to the BE (``direct="auto"``) or fails (``direct=True``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from starscan.arrow.direct import DirectFile, DirectRead, file_part
from starscan.arrow.filter import NotArrowable
from starscan.arrow.opening import check_calendar
from starscan.arrow.read import read_split
from starscan.arrow.split_plan import ArrowRead, ArrowSplit, PlannedFileGone, SplitReadError
from starscan.arrow.wire import BatchConverter
from starscan.client.errors import DirectReadError, SnapshotGoneError
from starscan.core.errors import StarscanError
from starscan.storage.stores import Storage, StorageOptions, local_path, open_storage


class Unreadable(Exception):
    """This tablet cannot be read from its files by this reader; the message says why."""


#: Rows per batch of a direct read at least: two row groups of lineitem decoding side by side
#: (2 cores) take 0.52 s for its 6 M rows in 16,384-row batches, 0.56 s in 4,096-row ones
#: and 0.58 s in 65,536-row ones (medians of 5).
MIN_BATCH_ROWS = 16384


class DirectReader:
    """One direct plan's read instructions, for any of its tablets."""

    def __init__(self, section: dict[str, Any], storage_options: StorageOptions | None, native: bool,
                 batch_rows: int = MIN_BATCH_ROWS, workers: int = 1):
        self.spec = DirectRead.from_json(section)
        self.storage_options = storage_options
        self.native = native
        self.batch_rows = max(batch_rows, MIN_BATCH_ROWS)
        # Row groups decoded at once per tablet: the cores left to each tablet read at once
        # (``workers``: the read's workers, or fewer when it has fewer direct tablets).
        self.decode_threads = min(MAX_DECODE_THREADS, max(1, _cores() // max(1, workers)))
        self._reads: dict[int, ArrowRead] = {}  # per store (id of its Storage)
        # The read's worker threads share this reader: a read is published only after the
        # converter it needs, under this lock (a thread that found the read while another
        # was still building the converter once converted with none, in CI).
        self._lock = threading.Lock()
        # The output columns and their wire conversion: the same for every store's read.
        self._converter: BatchConverter | None = None
        self._native: pa.Schema | None = None  # native_types' schema
        # A store that refused this reader or did not answer, and why: its other tablets go
        # to the BE at once rather than each waiting for the store's time-outs.
        self._failed_stores: dict[str, str] = {}

    def _read_for(self, storage: Storage) -> ArrowRead:
        read = self._reads.get(id(storage))
        if read is not None:
            return read
        with self._lock:
            read = self._reads.get(id(storage))
            if read is not None:
                return read
            try:
                read = self.spec.arrow_read(storage)
            except NotArrowable as why:  # the FE checked the same rules: a newer FE than this client
                raise Unreadable(f"this client cannot read the plan's files exactly: {why}") from None
            if self._converter is None:
                converter = BatchConverter(list(read.output_columns))
                self._native = native_schema(read.output_columns, converter.schema)
                self._converter = converter
            self._reads[id(storage)] = read  # last: a thread that finds it finds the converter too
        return read

    def _where(self, f: DirectFile) -> tuple[Storage, str]:
        """The storage and the location in it of a file of the plan."""
        failed = self._failed_stores.get(_store_of(f.storage_path))
        if failed is not None:
            raise Unreadable(failed)
        try:
            storage = open_storage(f.storage_path, self.storage_options)
        except StarscanError as exc:
            raise self._store_failed(f.storage_path, exc) from None
        return storage, local_path(f.storage_path) if storage.fs is None else f.storage_path

    def _store_failed(self, location: str, exc: StarscanError) -> Unreadable:
        why = f"{location}: {exc.message}"
        self._failed_stores[_store_of(location)] = why
        return Unreadable(why)

    def tablet(self, tablet_id: int, info: dict[str, Any]) -> Iterator[pa.RecordBatch]:
        """The rows of one direct tablet (``info``: its ``partitions`` entry), in the wire's
        types or (``native``) in Arrow's own; Unreadable before the first row when the
        tablet cannot be read here, whatever the reason."""
        try:
            batches, first = self._open(tablet_id, info)
        except Unreadable:
            raise
        except Exception as exc:  # noqa: BLE001 - before the first row any failure sends the tablet to the BE
            raise Unreadable(f"tablet {tablet_id}: {type(exc).__name__}: {str(exc)[:300]}") from None
        if first is None:
            return
        yield first
        try:
            yield from batches  # a failure from here on is the read's (rows were handed out)
        except PlannedFileGone as exc:
            raise SnapshotGoneError(str(exc)) from None
        except (SplitReadError, StarscanError, OSError, pa.ArrowException) as exc:  # a file failing mid-read
            raise DirectReadError(f"tablet {tablet_id}: {type(exc).__name__}: {str(exc)[:300]}") from None

    def _open(self, tablet_id: int, info: dict[str, Any]) -> tuple[Iterator[pa.RecordBatch], pa.RecordBatch | None]:
        """The tablet's batches (converted) after the first, and the first (None: no rows)."""
        if not info.get("direct"):
            raise Unreadable(f"tablet {tablet_id} is not direct: {info.get('reason', 'the FE gave no files')}")
        files = [DirectFile.from_json(f) for f in info.get("files") or ()]
        if not files:
            return iter(()), None
        places = [self._where(f) for f in files]
        storage = places[0][0]
        if any(s is not storage for s, _ in places):
            raise Unreadable(f"tablet {tablet_id}'s files are in more than one store")
        read = self._read_for(storage)
        parts = [file_part(read, f, location) for f, (_, location) in zip(files, places)]
        for part in parts:  # every file as planned, before the first row is handed out
            try:
                identity = storage.file_identity(part.path)
            except StarscanError as exc:
                raise self._store_failed(part.relative, exc) from None
            if identity != (part.size, part.mtime_ns):
                what = "is gone" if identity is None else "was rewritten"
                raise Unreadable(f"{part.relative} {what} since the plan (table {read.table} version {read.version})")
            try:
                check_calendar(read, part)
            except SplitReadError as exc:
                raise Unreadable(str(exc)) from None
        batches = read_split(read, ArrowSplit(tuple(parts)), self.batch_rows, self.decode_threads, self._convert)
        try:
            first = next(batches, None)
        except SplitReadError as exc:
            raise Unreadable(str(exc)) from None
        return batches, first

    def _convert(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        converter, native = self._converter, self._native
        assert converter is not None and native is not None  # set with the first read instructions
        return to_native(batch, native) if self.native else converter.convert(batch)


def native_schema(columns: tuple[tuple[str, Any, bool], ...], wire: pa.Schema) -> pa.Schema:
    """The schema ``to_native`` gives: dates as date32, timestamps as timestamp[us] (no
    zone), the rest in the wire's types. Built once per read."""
    fields = []
    for (name, sql_type, nullable), wire_field in zip(columns, wire):
        if sql_type.kind == "date":
            arrow_type = pa.date32()
        elif sql_type.kind in ("timestamp", "timestamp_ntz"):
            arrow_type = pa.timestamp("us")
        else:
            arrow_type = wire_field.type
        fields.append(pa.field(name, arrow_type, nullable))
    return pa.schema(fields)


def to_native(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Spark's Arrow as the client's ``native_types`` gives the BE's rows (``schema``:
    ``native_schema``): timestamps on the session's wall clock."""
    arrays = []
    for column, field in zip(batch.columns, schema):
        if pa.types.is_timestamp(column.type) and column.type.tz is not None:
            column = pc.local_timestamp(column)
        arrays.append(column if column.type == field.type else column.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


#: Row groups one tablet decodes at once at most (each holds a row group's column chunks).
MAX_DECODE_THREADS = 8


def _cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers set)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _store_of(location: str) -> str:
    """``scheme://authority`` of a location (one store), or "" for local files."""
    scheme, sep, rest = location.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}" if sep and scheme != "file" else ""


def storage_options(value: StorageOptions | dict[str, Any] | None) -> StorageOptions | None:
    """``StorageOptions`` from itself or a dict of its fields (endpoint, region,
    access_key_id, secret_access_key, session_token, path_style)."""
    if value is None or isinstance(value, StorageOptions):
        return value
    return StorageOptions(**value)
