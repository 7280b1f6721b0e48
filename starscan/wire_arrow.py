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

from starscan.sql_types import SqlType

EOS_MARKER = b"\xff\xff\xff\xff\x00\x00\x00\x00"
ArrayFn = Callable[[pa.Array], pa.Array]


# Arrow's casts to text print exactly StarRocks' forms (zero-padded years, 6 fraction digits)
# and are about 7x faster than pc.strftime (bench/RESULTS.md).
def _dates_by_cast(arr: pa.Array) -> pa.Array:
    return arr.cast(pa.utf8())  # YYYY-MM-DD


# A column of dates usually spans a few thousand distinct days. Taking each day's text from a
# table of the days in range is ~3x faster than formatting every value (1 M dates: 6.8 ms
# against 19 ms), and dates were a quarter of a worker's time on TPC-H lineitem.
_DATE_SPAN_MAX = 1 << 16  # days (~180 years): the table stays under 1 MB
_DATE_LOOKUP_MIN_ROWS = 1024


class _DateText:
    """DATE -> ``YYYY-MM-DD`` for one scan's column; keeps the day-to-text table it built
    (first day, texts) as one value, so threads sharing a converter never see half of it.

    Every date Spark reads (years 1-9999) is 10 characters, so the table is fixed-width:
    taking 10 bytes per row and pointing offsets 10 apart, with the days themselves as the
    indexes when the table starts at 1970-01-01, costs 6 ms per million dates, against 13 ms
    for taking variable-width strings and 23 ms for Arrow's cast."""

    def __init__(self) -> None:
        self._table: tuple[int, pa.Array] | None = None
        self._offsets: pa.Buffer | None = None  # int32 0, 10, 20, ...: shared by every batch

    def __call__(self, arr: pa.Array) -> pa.Array:
        if len(arr) < _DATE_LOOKUP_MIN_ROWS or arr.null_count == len(arr):
            return _dates_by_cast(arr)
        days = arr.view(pa.int32())
        bounds = pc.min_max(days)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        table = self._table
        if table is None or lo < table[0] or hi >= table[0] + len(table[1]):
            if table is not None:  # widen what is kept rather than rebuild it per batch
                lo, hi = min(lo, table[0]), max(hi, table[0] + len(table[1]) - 1)
            if hi - lo + 1 > min(_DATE_SPAN_MAX, len(arr)):
                return _dates_by_cast(arr)
            # From day 0 (1970-01-01) when the dates allow: the days are then the indexes.
            lo = 0 if 0 <= lo and hi < _DATE_SPAN_MAX else lo
            texts = _dates_by_cast(_int32_range(lo, hi + 1).view(pa.date32()))
            widths = pc.min_max(pc.binary_length(texts))  # (no Python scalar: see _int32_range)
            if not widths["min"].as_py() == widths["max"].as_py() == _DATE_WIDTH:
                return _dates_by_cast(arr)  # a year outside 1-9999: not fixed-width
            fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(_DATE_WIDTH), len(texts), [None, texts.buffers()[2]])
            table = self._table = (lo, fixed)
        first, fixed = table
        taken = fixed.take(days if first == 0 else pc.subtract(days, first))  # NULL where the date is NULL
        return pa.StringArray.from_buffers(len(taken), self._offsets_for(len(taken)), taken.buffers()[1],
                                           taken.buffers()[0], taken.null_count)

    def _offsets_for(self, rows: int) -> pa.Buffer:
        offsets = self._offsets
        if offsets is None or offsets.size < 4 * (rows + 1):
            offsets = self._offsets = _int32_range(0, _DATE_WIDTH * (2 * rows + 1), _DATE_WIDTH).buffers()[1]
        return offsets


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
        return _DateText()
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
    """Built once per scan from the output columns (name, type, nullable)."""

    def __init__(self, columns: list[tuple[str, SqlType, bool]]):
        self.schema = pa.schema([pa.field(name, dt.wire_arrow_type(), nullable) for name, dt, nullable in columns])
        self._fns = [_converter(dt) for _, dt, _ in columns]
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


class IpcStream:
    """One ``get_next`` reply's Arrow IPC stream, kept as its parts: the BE sends them to the
    socket as they are (provider/server.py), not joined and copied again into thriftpy2's
    buffers."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: tuple[bytes | memoryview, ...]):
        self.parts = parts
        self.size = sum(memoryview(p).nbytes for p in parts)

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)
