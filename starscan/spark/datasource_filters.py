"""Spark's filters, as a Python data source is offered them (``pyspark.sql.datasource``'s
filter classes, Spark 4.1 on: compat.HAS_DATA_SOURCE_FILTERS), written as SQL the FE
accepts: comparisons, IN, IS [NOT] NULL, NOT, string prefix, suffix and contains. A filter
that cannot be written exactly is left to Spark."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)


def _column(f: Any) -> str | None:
    attribute = f.attribute
    if len(attribute) != 1:
        return None  # a nested field
    return "`" + str(attribute[0]).replace("`", "``") + "`"


def _literal(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else None
    if isinstance(value, dt.datetime):
        return None  # timestamps: the time zone of a literal is not the server's to guess
    if isinstance(value, dt.date):
        return f"'{value.isoformat()}'"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
    return None


_COMPARISONS = {EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<="}


def filter_sql(f: Filter) -> str | None:
    """``f`` as SQL the FE accepts, or None when it cannot be written exactly."""
    col = _column(f) if hasattr(f, "attribute") else None
    for cls, op in _COMPARISONS.items():
        if isinstance(f, cls):
            lit = _literal(f.value)  # type: ignore[attr-defined]
            return None if col is None or lit is None else f"{col} {op} {lit}"
    if isinstance(f, In):
        lits = [_literal(v) for v in f.value]
        if col is None or not lits or any(v is None for v in lits):
            return None
        return f"{col} in ({', '.join(lits)})"  # type: ignore[arg-type]
    if isinstance(f, IsNull):
        return None if col is None else f"{col} is null"
    if isinstance(f, IsNotNull):
        return None if col is None else f"{col} is not null"
    if isinstance(f, Not):
        inner = filter_sql(f.child)
        return None if inner is None else f"not ({inner})"
    if isinstance(f, (StringStartsWith, StringEndsWith, StringContains)):
        value = f.value
        if col is None or not isinstance(value, str) or any(ch in value for ch in "%_\\"):
            return None
        pattern = {StringStartsWith: f"{value}%", StringEndsWith: f"%{value}", StringContains: f"%{value}%"}[type(f)]
        return f"{col} like {_literal(pattern)}"
    return None
