"""The values the FE's partition pruning (planner.pruning) reasons about, read as Spark
reads them: a partition folder's value for its column's type, a literal's value, a strict
date or timestamp text, and CAST where its result is certain in both ANSI and legacy mode.
``_UNK`` (None) is a value that cannot be known here.

Pure Python: no Spark call is made.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import ClassVar

from pyspark.sql import types as T

from starscan.spark.types import INTEGER_RANGES
from starscan.storage.hadoop_paths import unescape_path_name


# ---- values ------------------------------------------------------------------------------
# One class per kind of known SQL value; ``None`` stands for a value that cannot be known.
# ``kind`` names the class for the coercion tables below; the fields are typed per kind.
@dataclass(frozen=True)
class NullV:
    kind: ClassVar[str] = "null"


@dataclass(frozen=True)
class IntV:
    """An integer; ``p``: the decimal precision Spark widens its integer type to."""

    v: int
    p: int
    kind: ClassVar[str] = "int"
    s: ClassVar[int] = 0


@dataclass(frozen=True)
class DecimalV:
    v: Decimal
    p: int
    s: int
    kind: ClassVar[str] = "decimal"


@dataclass(frozen=True)
class DoubleV:
    v: float
    kind: ClassVar[str] = "double"


@dataclass(frozen=True)
class StringV:
    v: str
    kind: ClassVar[str] = "string"


@dataclass(frozen=True)
class DateV:
    v: _dt.date
    kind: ClassVar[str] = "date"


@dataclass(frozen=True)
class TimestampV:
    """``ntz``: a TIMESTAMP_NTZ value (else Spark's local-time-zone kind)."""

    v: _dt.datetime
    ntz: bool = False
    kind: ClassVar[str] = "timestamp"


@dataclass(frozen=True)
class BooleanV:
    v: bool
    kind: ClassVar[str] = "boolean"


Val = NullV | IntV | DecimalV | DoubleV | StringV | DateV | TimestampV | BooleanV
ExactNumber = IntV | DecimalV
Number = IntV | DecimalV | DoubleV

_UNK = None  # "some value we cannot know"
NULL_VAL = NullV()

INT_WIDTH = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}
_TYPE_ALIASES = {
    "integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint",
    "timestamp_ltz": "timestamp", "varchar": "string",
}
MAX_PRECISION = 38
_CTX = Context(prec=200)  # exact for every decimal(38, s) operation done here
TS_MARGIN = _dt.timedelta(hours=48)

_INT_RE = re.compile(r"-?[0-9]+")
LITERAL_INT_RE = re.compile(r"[+-]?[0-9]+")
_DEC_RE = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_DOUBLE_RE = re.compile(r"-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
_DATE_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_TS_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?: ([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?)?")
_DECIMAL_TYPE_RE = re.compile(r"(?:decimal|dec|numeric)(?:\((\d+)(?:,(\d+))?\))?")
_FIXED_ZONES = {"utc", "gmt", "z", "ut", "uct", "universal", "zulu", "etc/utc", "etc/gmt", "etc/uct",
                "etc/universal", "etc/zulu", "etc/gmt+0", "etc/gmt-0", "etc/gmt0", "gmt0"}
_FIXED_ZONE_RE = re.compile(r"(?:(?:utc|gmt|ut)?[+-][0-9]{1,2}(?::?[0-9]{2}(?::?[0-9]{2})?)?|etc/gmt[+-][0-9]{1,2})")


def is_fixed_offset_zone(time_zone: str | None) -> bool:
    """True when ``time_zone`` (a Spark session time zone id) never changes its offset."""
    if not time_zone:
        return False
    tz = time_zone.strip().lower()
    return tz in _FIXED_ZONES or bool(_FIXED_ZONE_RE.fullmatch(tz))


def parse_date(text: str) -> _dt.date | None:
    m = _DATE_RE.fullmatch(text)
    if not m:
        return None
    try:
        return _dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def parse_timestamp(text: str) -> _dt.datetime | None:
    m = _TS_RE.fullmatch(text)
    if not m:
        return None
    y, mo, d, hh, mm, ss, frac = m.groups()
    try:
        if hh is None:
            return _dt.datetime(int(y), int(mo), int(d))
        micro = int((frac or "").ljust(6, "0")) if frac else 0
        return _dt.datetime(int(y), int(mo), int(d), int(hh), int(mm), int(ss), micro)
    except ValueError:
        return None


def _fits(value: Decimal, p: int, s: int) -> Decimal | None:
    """``value`` cast to decimal(p, s) as Spark does (HALF_UP), or None on overflow."""
    try:
        q = value.quantize(Decimal(1).scaleb(-s, context=_CTX), rounding=ROUND_HALF_UP, context=_CTX)
    except InvalidOperation:
        return None
    if q.adjusted() >= p - s and q != 0:
        return None
    return q


def _canon_type(type_name: str | None) -> str:
    t = re.sub(r"\s+", "", (type_name or "").lower())
    return _TYPE_ALIASES.get(t, t)


def _exact_decimal(raw: str, precision: int, scale: int) -> Val | None:
    """A decimal partition value as spelled, when the type holds it without rounding."""
    if not _DEC_RE.fullmatch(raw):
        return _UNK
    exact = Decimal(raw)
    q = _fits(exact, precision, scale)
    return DecimalV(q, precision, scale) if q is not None and q == exact else _UNK


# ---- partition values --------------------------------------------------------------------
def partition_value(raw: str | None, dt: T.DataType) -> Val | None:
    """A partition folder's value, as spelled, read as Spark reads it for type ``dt``
    (None: not sure). Spark decodes ``%XX`` escapes in string and timestamp values and
    parses dates, numbers and booleans as they stand (``starscan.storage.hadoop_paths``)."""
    if raw is None:
        return NULL_VAL
    if raw == "":
        return _UNK
    if isinstance(dt, (T.StringType, T.TimestampType, T.TimestampNTZType)):
        raw = unescape_path_name(raw)
    if isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        name = {T.ByteType: "tinyint", T.ShortType: "smallint", T.IntegerType: "int", T.LongType: "bigint"}[type(dt)]
        return _cast_integer(StringV(raw), name)
    if isinstance(dt, T.DecimalType):
        return _exact_decimal(raw, dt.precision, dt.scale)
    if isinstance(dt, T.DoubleType):
        if not _DOUBLE_RE.fullmatch(raw):
            return _UNK
        return double_value(float(raw))
    if isinstance(dt, (T.StringType, T.VarcharType)) and not isinstance(dt, T.CharType):
        if getattr(dt, "collation", "UTF8_BINARY") not in (None, "UTF8_BINARY"):
            return _UNK
        return StringV(raw)
    if isinstance(dt, T.DateType):
        d = parse_date(raw)
        return DateV(d) if d is not None else _UNK
    if isinstance(dt, (T.TimestampType, T.TimestampNTZType)):
        ts = parse_timestamp(raw)
        return TimestampV(ts, ntz=isinstance(dt, T.TimestampNTZType)) if ts is not None else _UNK
    if isinstance(dt, T.BooleanType):
        return BooleanV(raw == "true") if raw in ("true", "false") else _UNK
    return _UNK


def double_value(x: float) -> DoubleV | None:
    if x != x or x in (float("inf"), float("-inf")):
        return _UNK  # NaN / infinities: Spark's special ordering, not worth the risk
    return DoubleV(x)


def cast_value(v: Val, type_name: str | None, ts_exact: bool) -> Val | None:
    """CAST(v AS type_name) where the result is certain in both ANSI and legacy mode."""
    to = _canon_type(type_name)
    if isinstance(v, NullV):
        return NULL_VAL
    if to in INTEGER_RANGES:
        return _cast_integer(v, to)
    m = _DECIMAL_TYPE_RE.fullmatch(to)
    if m:
        return _cast_decimal(v, int(m.group(1)) if m.group(1) else 10, int(m.group(2)) if m.group(2) else 0)
    if to == "double":
        if isinstance(v, IntV):
            return double_value(float(v.v))
        return v if isinstance(v, DoubleV) else _UNK
    if to == "string":
        return _cast_string(v)
    if to == "date":
        return _cast_date(v, ts_exact)
    if to in ("timestamp", "timestamp_ntz"):
        return _cast_timestamp(v, to == "timestamp_ntz", ts_exact)
    if to == "boolean" and isinstance(v, BooleanV):
        return v
    return _UNK


def _cast_integer(v: Val, to: str) -> Val | None:
    lo, hi = INTEGER_RANGES[to]
    if isinstance(v, IntV):
        value = v.v
    elif isinstance(v, StringV) and _INT_RE.fullmatch(v.v):
        value = int(v.v)
    else:
        return _UNK
    return IntV(value, INT_WIDTH[to]) if lo <= value <= hi else _UNK


def _cast_decimal(v: Val, p: int, s: int) -> Val | None:
    if not (1 <= p <= MAX_PRECISION and 0 <= s <= p):
        return _UNK
    if isinstance(v, (IntV, DecimalV)):
        number = Decimal(v.v)
    elif isinstance(v, StringV) and _DEC_RE.fullmatch(v.v):
        number = Decimal(v.v)
    else:
        return _UNK
    q = _fits(number, p, s)
    return DecimalV(q, p, s) if q is not None else _UNK


def _cast_string(v: Val) -> Val | None:
    if isinstance(v, StringV):
        return v
    if isinstance(v, IntV):
        return StringV(str(v.v))
    if isinstance(v, DateV):
        return StringV(v.v.isoformat())
    if isinstance(v, BooleanV):
        return StringV("true" if v.v else "false")
    return _UNK


def _cast_date(v: Val, ts_exact: bool) -> Val | None:
    if isinstance(v, DateV):
        return v
    if isinstance(v, StringV):
        d = parse_date(v.v)
        return DateV(d) if d is not None else _UNK
    if isinstance(v, TimestampV) and (v.ntz or ts_exact):
        return DateV(v.v.date())
    return _UNK


def _cast_timestamp(v: Val, ntz: bool, ts_exact: bool) -> Val | None:
    if isinstance(v, StringV):
        ts = parse_timestamp(v.v)
        return TimestampV(ts, ntz=ntz) if ts is not None else _UNK
    if isinstance(v, DateV):
        return TimestampV(_dt.datetime.combine(v.v, _dt.time()), ntz=ntz)
    if isinstance(v, TimestampV) and (v.ntz == ntz or ts_exact):
        return TimestampV(v.v, ntz=ntz)
    return _UNK
