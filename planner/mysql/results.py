"""Arrow rows as the MySQL protocol sends them, streamed: each batch is turned into rows
and written as it arrives, so the port holds one batch of a result, whatever its size.

Values as StarRocks' MySQL port prints them: timestamps as the wall-clock time in the
session's time zone, decimals as their digits at their scale, nested values as JSON, TINYINT
as a signed byte."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from decimal import Decimal
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from mysql_mimic import ResultColumn, ResultSet
from mysql_mimic.types import ColumnType

from starscan.planner.mysql.mimic_internals import streamed_result


def result_set(schema: pa.Schema, batches: Iterator[pa.RecordBatch],
               error: Callable[[BaseException], BaseException]) -> ResultSet:
    """The rows of ``batches`` (read and converted in worker threads: Spark and the BEs
    block) as a result mysql-mimic streams (planner/mysql/mimic_internals.py); a failure on
    the way is ``error(exc)`` (the client gets that error after the rows it has, never a
    shorter answer alone)."""
    columns = [_result_column(field) for field in schema]
    converters = [_converter(field.type) for field in schema]
    row_lists = _row_lists(batches, converters, error)
    return streamed_result(_one_by_one(row_lists), row_lists, columns)


async def _row_lists(batches: Iterator[pa.RecordBatch], converters: list[Callable[[pa.Array], list]],
                     error: Callable[[BaseException], BaseException]) -> AsyncIterator[list]:
    done = object()
    try:
        while True:
            try:
                rows = await asyncio.to_thread(_next_rows, batches, converters, done)
            except Exception as exc:  # noqa: BLE001 - every failure is the wire's error
                raise error(exc) from None
            if rows is done:
                return
            yield cast(list, rows)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            await asyncio.to_thread(close)


async def _one_by_one(row_lists: AsyncIterator[list]) -> AsyncIterator[tuple]:
    async for rows in row_lists:
        for row in rows:
            yield row


def _next_rows(batches: Iterator[pa.RecordBatch], converters: list, done: object) -> list[tuple] | object:
    """The next batch's rows, converted (in a worker thread); ``done`` after the last."""
    while True:
        batch = next(batches, None)
        if batch is None:
            return done
        if batch.num_rows:
            return list(zip(*(convert(column) for convert, column in zip(converters, batch.columns))))


_TYPES = [
    (pa.types.is_boolean, ColumnType.TINY), (pa.types.is_int8, ColumnType.TINY), (pa.types.is_int16, ColumnType.SHORT),
    (pa.types.is_int32, ColumnType.LONG), (pa.types.is_int64, ColumnType.LONGLONG),
    (pa.types.is_float32, ColumnType.FLOAT), (pa.types.is_float64, ColumnType.DOUBLE),
    (pa.types.is_decimal, ColumnType.NEWDECIMAL), (pa.types.is_date, ColumnType.DATE),
    (pa.types.is_timestamp, ColumnType.DATETIME), (pa.types.is_binary, ColumnType.BLOB),
    (pa.types.is_large_binary, ColumnType.BLOB),
]


# A date's binary form from the text its column carries (dates are sent as text, below).
_DATE_BINARY = ResultColumn("date", ColumnType.DATE).binary_encoder


def _result_column(field: pa.Field) -> ResultColumn:
    if pa.types.is_int8(field.type):
        # mysql-mimic's binary TINY encoder writes bool(value): pack the signed byte here.
        return ResultColumn(field.name, ColumnType.TINY, binary_encoder=lambda col, v: struct.pack("<b", int(v)))
    if pa.types.is_date(field.type):
        return ResultColumn(field.name, ColumnType.DATE,
                            binary_encoder=lambda col, v: _DATE_BINARY(col, dt.date.fromisoformat(v)))
    kind = next((t for test, t in _TYPES if test(field.type)), ColumnType.VARCHAR)
    return ResultColumn(field.name, kind)


def _converter(arrow_type: pa.DataType) -> Callable[[pa.Array], list]:
    """How a column of ``arrow_type`` becomes Python values mysql-mimic writes."""
    if pa.types.is_timestamp(arrow_type):
        if arrow_type.tz is not None:
            return lambda column: pc.local_timestamp(column).to_pylist()  # the wall clock in the type's zone
        return _pylist
    if pa.types.is_decimal(arrow_type):
        return _decimal_text
    if pa.types.is_date(arrow_type):
        # As text, by Arrow (YYYY-MM-DD: what the text protocol sends), faster than dates.
        return lambda column: pc.cast(column, pa.string()).to_pylist()
    if pa.types.is_nested(arrow_type):
        return lambda column: [None if v is None else _json(v, arrow_type) for v in column.to_pylist()]
    if pa.types.is_null(arrow_type):
        return lambda column: [None] * len(column)
    return _pylist


def _decimal_text(column: pa.Array) -> list:
    """Decimals as their digits at their scale (``12.30``, ``-0.0000000001``): Arrow's text,
    three to four times faster than Python's Decimals, except where it writes an exponent
    (tiny values: ``-1E-10``), which Python writes out."""
    text = pc.cast(column, pa.string())
    out = text.to_pylist()
    if pc.any(pc.match_substring(text, "E")).as_py():
        for i, value in enumerate(out):
            if value is not None and "E" in value:
                out[i] = format(Decimal(value), "f")
    return out


def _pylist(column: pa.Array) -> list:
    return column.to_pylist()


def _json(value: Any, arrow_type: pa.DataType) -> str:
    """A nested value as Spark's to_json writes it: maps and structs as objects, no spaces,
    decimals as numbers, dates and timestamps as text."""
    if value is None:
        return "null"
    if pa.types.is_map(arrow_type):
        return "{" + ",".join(json.dumps(str(k)) + ":" + _json(v, arrow_type.item_type) for k, v in value) + "}"
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return "[" + ",".join(_json(v, arrow_type.value_type) for v in value) + "]"
    if pa.types.is_struct(arrow_type):
        return "{" + ",".join(json.dumps(f.name) + ":" + _json(value.get(f.name), f.type) for f in arrow_type) + "}"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dt.datetime, dt.date)):
        return json.dumps(value.isoformat())
    if isinstance(value, bytes):
        return json.dumps(value.decode("utf-8", errors="replace"))
    if isinstance(value, float) and value != value:
        return '"NaN"'
    return json.dumps(value, ensure_ascii=False)
