"""Spark's Arrow output -> the Arrow StarRocks clients expect (docs/protocol.md 5.2).

The BE converts every batch it sends with this; the client converts its direct reads with
the same code, so both give the same values.

DATE becomes `YYYY-MM-DD` text, DATETIME `YYYY-MM-DD HH:MM:SS` plus `.ffffff` only when
the microseconds are non-zero (wall clock in the server time zone, which is Spark's session
time zone, so Spark already delivers timestamps in it); nested types are converted
element-wise. Everything else passes through untouched. The target schema and the
per-column work are decided once per scan; the per-batch path only runs Arrow kernels.
"""

from __future__ import annotations

import array
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from starscan.core.sql_types import SqlType

EOS_MARKER = b"\xff\xff\xff\xff\x00\x00\x00\x00"
ArrayFn = Callable[[pa.Array], pa.Array]


# Arrow's casts to text print exactly StarRocks' forms (zero-padded years, 6 fraction digits)
# and are about 7x faster than pc.strftime (bench/RESULTS.md).
def _dates_by_cast(arr: pa.Array) -> pa.Array:
    return arr.cast(pa.utf8())  # YYYY-MM-DD


# Taking each day's text from a table of days is ~3x faster than formatting every value (1 M
# dates: 6.8 ms against 19 ms), and dates were a quarter of a worker's time on TPC-H lineitem.
# The table is one per process, built once (~3 ms) for the days almost all data has, 1900-01-01
# through 2149-06-06 (0.9 MB); a batch with a day outside it, or a small batch, is cast.
_DATE_TABLE_FIRST = -25_567  # 1900-01-01, as days since 1970-01-01
_DATE_TABLE_END = 1 << 16  # 2149-06-07 (excluded)
_DATE_LOOKUP_MIN_ROWS = 1024
_date_lookup: tuple[pa.FixedSizeBinaryArray, pa.Scalar] | None = None  # built by the first batch that needs it
_date_offsets: pa.Buffer | None = None  # int32 0, 10, 20, ...: shared by every batch


def _days_table() -> tuple[pa.FixedSizeBinaryArray, pa.Scalar]:
    """The text of every day of the table's range (10 bytes each), and the int32 scalar that
    turns a day into its index there (made once: a Python int costs 10 µs per call, and
    ``pa.scalar`` imports pandas, see _int32_range). Two threads may both build them: the
    same values, and either pair is whole when assigned."""
    global _date_lookup
    lookup = _date_lookup
    if lookup is None:
        texts = _dates_by_cast(_int32_range(_DATE_TABLE_FIRST, _DATE_TABLE_END).view(pa.date32()))
        table = pa.FixedSizeBinaryArray.from_buffers(pa.binary(_DATE_WIDTH), len(texts), [None, texts.buffers()[2]])
        lookup = _date_lookup = (table, _int32_range(-_DATE_TABLE_FIRST, 1 - _DATE_TABLE_FIRST)[0])
    return lookup


def _offsets_for(rows: int) -> pa.Buffer:
    global _date_offsets
    offsets = _date_offsets
    if offsets is None or offsets.size < 4 * (rows + 1):
        offsets = _date_offsets = _int32_range(0, _DATE_WIDTH * (2 * rows + 1), _DATE_WIDTH).buffers()[1]
    return offsets


def _date_text(arr: pa.Array) -> pa.Array:
    """DATE -> ``YYYY-MM-DD``: each day's text taken from the process's table (every day in
    it is 10 characters, so the result's offsets are the shared 0, 10, 20, ...)."""
    if len(arr) < _DATE_LOOKUP_MIN_ROWS or arr.null_count == len(arr):
        return _dates_by_cast(arr)
    days = arr.view(pa.int32())
    bounds = pc.min_max(days)  # NULLs skipped: Parquet leaves any value under one
    if bounds["min"].as_py() < _DATE_TABLE_FIRST or bounds["max"].as_py() >= _DATE_TABLE_END:
        return _dates_by_cast(arr)
    table, day_to_index = _days_table()
    taken = table.take(pc.add(days, day_to_index))  # NULL where the date is NULL
    return pa.StringArray.from_buffers(len(taken), _offsets_for(len(taken)), taken.buffers()[1],
                                       taken.buffers()[0], taken.null_count)


_DATE_WIDTH = 10  # YYYY-MM-DD


def _int32_range(start: int, stop: int, step: int = 1) -> pa.Array:
    """``range`` as an int32 Arrow array, built from the bytes: ``pa.array`` of a Python
    object first imports pandas (0.3 s in a reader's fresh process) to ask whether it is one."""
    values = array.array("i", range(start, stop, step))
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(values)])


def _timestamps(arr: pa.Array) -> pa.Array:
    if arr.type.tz is not None:
        # Render the wall clock of the array's own zone (Spark's session time zone).
        arr = pc.local_timestamp(arr)
    text = arr.cast(pa.timestamp("us")).cast(pa.utf8())  # YYYY-MM-DD HH:MM:SS.ffffff
    # StarRocks prints the fraction only when it is not zero.
    return pc.replace_substring_regex(text, pattern=r"\.000000$", replacement="")


def _converter(dt: SqlType) -> ArrayFn | None:
    if not dt.needs_wire_conversion():
        return None
    if dt.kind == "date":
        return _date_text
    if dt.kind in ("timestamp", "timestamp_ntz"):
        return _timestamps
    target = dt.wire_arrow_type()
    if dt.kind == "array":
        assert dt.element is not None
        inner = _converter(dt.element)

        def lists(arr: pa.Array) -> pa.Array:
            arr = _unsliced(arr)
            values = inner(arr.values) if inner else arr.values
            return pa.ListArray.from_arrays(arr.offsets, values, type=target, mask=arr.is_null() if arr.null_count else None)

        return lists
    if dt.kind == "map":
        assert dt.key is not None and dt.value is not None
        kfn, vfn = _converter(dt.key), _converter(dt.value)

        def maps(arr: pa.Array) -> pa.Array:
            arr = _unsliced(arr)
            keys = kfn(arr.keys) if kfn else arr.keys
            items = vfn(arr.items) if vfn else arr.items
            return pa.MapArray.from_arrays(arr.offsets, keys, items, type=target, mask=arr.is_null() if arr.null_count else None)

        return maps
    if dt.kind == "struct":
        fns = [_converter(f.type) for f in dt.fields]

        def structs(arr: pa.Array) -> pa.Array:
            children = [fn(arr.field(i)) if fn else arr.field(i) for i, fn in enumerate(fns)]
            return pa.StructArray.from_arrays(
                children, fields=list(target), mask=arr.is_null() if arr.null_count else None
            )

        return structs
    return None


def _unsliced(arr: pa.Array) -> pa.Array:
    # from_arrays needs offsets that index the child as given; a sliced list is re-based.
    return pa.concat_arrays([arr]) if arr.offset else arr


class BatchConverter:
    """Built once per scan from the output columns (name, type, nullable). ``arrow_types_tz``:
    keep Spark's values in Arrow's own types (timestamps in that session time zone) instead of
    StarRocks' wire forms (the Arrow Flight SQL front's scans)."""

    def __init__(self, columns: list[tuple[str, SqlType, bool]], arrow_types_tz: str | None = None):
        if arrow_types_tz is None:
            self.schema = pa.schema([pa.field(name, dt.wire_arrow_type(), nullable) for name, dt, nullable in columns])
            self._fns: list[ArrayFn | None] = [_converter(dt) for _, dt, _ in columns]
        else:
            self.schema = pa.schema([pa.field(name, dt.spark_arrow_type(arrow_types_tz), nullable)
                                     for name, dt, nullable in columns])
            self._fns = [_cast_to(f.type) for f in self.schema]
        self.passthrough = all(fn is None for fn in self._fns)
        self.schema_message = self.schema.serialize().to_pybytes()

    def convert(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        arrays = [fn(col) if fn else col for fn, col in zip(self._fns, batch.columns)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def ipc_stream(self, batch: pa.RecordBatch, ipc: bytes | memoryview | pa.Buffer | None = None) -> IpcStream:
        """One Arrow IPC stream: schema message, one record batch, end-of-stream marker, as
        its three parts. ``ipc``: the batch's IPC message already serialized (as a scan task
        sent it), used as it is."""
        return IpcStream((self.schema_message, memoryview(ipc if ipc is not None else batch.serialize()), EOS_MARKER))


def _cast_to(target: pa.DataType) -> ArrayFn:
    """An array in Spark's Arrow type as declared (a reader may give an equal type spelled
    apart, such as another name of the session's time zone): cast only when it differs."""

    def cast(arr: pa.Array) -> pa.Array:
        return arr if arr.type == target else arr.cast(target)

    return cast


class IpcStream:
    """One ``get_next`` reply's Arrow IPC stream, kept as its parts: the BE sends them to the
    socket as they are (starscan/thrift/server.py), not joined and copied again into thriftpy2's
    buffers."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: tuple[bytes | memoryview, ...]):
        self.parts = parts
        self.size = sum(memoryview(p).nbytes for p in parts)

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)
