"""A file's column as the table's type, by Spark's rules for reading a file written with
another (older or wider) type: integer and float widening, unsigned integers one size up,
Iceberg's decimal promotion, large and dictionary text, INT96 and zone-less timestamps,
16-byte UUIDs as text, and nested types field by field (starscan.arrow.nested). Anything
else is an error naming the file and the column.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from starscan.arrow.nested import NestedMismatch, conform
from starscan.arrow.split_plan import ArrowRead, FilePart, SplitReadError


def as_type(read: ArrowRead, part: FilePart, name: str, array: pa.Array, expected: pa.DataType) -> pa.Array:
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
            return as_type(read, part, name, values, wanted)

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

