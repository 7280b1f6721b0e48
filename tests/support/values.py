"""Spark's values in the StarRocks text forms the wire carries (docs/protocol.md 5.2), and
the comparison of a wire value with Spark's."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from zoneinfo import ZoneInfo

import pyarrow as pa
from pyspark.sql import types as T


def sr_date(value: dt.date) -> str:
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"


def sr_datetime(value: dt.datetime) -> str:
    text = f"{sr_date(value)} {value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    return text + (f".{value.microsecond:06d}" if value.microsecond else "")


def instant_to_zone(value: dt.datetime, zone: str) -> dt.datetime:
    """PySpark hands TIMESTAMP (instant) values over as naive local datetimes of this
    process; the wall clock StarRocks shows is the instant's in the server time zone."""
    return value.astimezone(ZoneInfo(zone)).replace(tzinfo=None)


def spark_to_starrocks(value, data_type, zone: str):

    if value is None:
        return None
    if isinstance(data_type, T.DateType):
        return sr_date(value)
    if isinstance(data_type, T.TimestampType):
        return sr_datetime(instant_to_zone(value, zone))
    if isinstance(data_type, T.TimestampNTZType):
        return sr_datetime(value)
    if isinstance(data_type, T.BinaryType):
        return bytes(value)
    if isinstance(data_type, T.ArrayType):
        return [spark_to_starrocks(v, data_type.elementType, zone) for v in value]
    if isinstance(data_type, T.MapType):
        return {spark_to_starrocks(k, data_type.keyType, zone): spark_to_starrocks(v, data_type.valueType, zone)
                for k, v in value.items()}
    if isinstance(data_type, T.StructType):
        return {f.name: spark_to_starrocks(value[i], f.dataType, zone) for i, f in enumerate(data_type.fields)}
    return value


def same(got, want) -> bool:
    """Equality that treats NaN as NaN, keeps the sign of zero and the value type."""
    if want is None or got is None:
        return got is None and want is None
    if isinstance(want, float):
        if not isinstance(got, float):
            return False
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)
    if isinstance(want, Decimal):
        return isinstance(got, Decimal) and got == want
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    return type(got) is type(want) and got == want


def arrow_value(value, arrow_type: pa.DataType):
    """Arrow's Python value with maps as dicts (key order is not a value property)."""
    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        keys = [k for k, _ in value]
        assert len(keys) == len(set(keys)), f"duplicate map keys {keys}"
        return {k: arrow_value(v, arrow_type.item_type) for k, v in value}
    if pa.types.is_list(arrow_type):
        return [arrow_value(v, arrow_type.value_type) for v in value]
    if pa.types.is_struct(arrow_type):
        return {f.name: arrow_value(value[f.name], f.type) for f in arrow_type}
    return value
