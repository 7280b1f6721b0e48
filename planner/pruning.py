"""Tablet pruning on Hive-style partition values.

The WHERE predicate is evaluated once per distinct partition-value tuple with SQL's
three-valued logic, generalised to *sets* of possible outcomes: an expression evaluates to a
non-empty subset of {TRUE, FALSE, NULL}. A singleton is an exact result; anything that reads
a non-partition column, or that this module cannot evaluate exactly as Spark would, widens to
the set of outcomes it might have (``UNKNOWN`` = all three). A tablet is dropped only when
every possible outcome is FALSE or NULL, i.e. when Spark would certainly filter out every row
of it.

Type coercion is deliberately narrow and mirrors Spark's (ANSI and non-ANSI agree on every
case handled here):

* numbers compare as numbers: integers and decimals exactly (unless Spark's widened decimal
  type would exceed precision 38, where Spark rounds), anything with a double in floating
  point (a decimal only when it is exactly a double);
* strings compare as UTF-8 bytes; a string against a number is UNKNOWN;
* dates and timestamps compare with each other and with strings that parse *strictly*
  (``YYYY-MM-DD``, ``YYYY-MM-DD HH:MM:SS[.ffffff]``); other strings are UNKNOWN;
* timestamps (Spark's local-time-zone kind) compare exactly only when the session time zone
  is known to have a fixed offset (``time_zone``); otherwise only values more than 48 hours
  apart, or equal, are decided (DST gaps and overlaps cannot change those).

Pure Python: no Spark call is made.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation

from pyspark.sql import types as T

from starscan.core.sql_types import decimal_precision_scale
from starscan.expr import COMPARISONS, LOGICAL, Expr, ExprVisitor, Kind, Operator
from starscan.planner.pruning_values import (
    INT_WIDTH,
    LITERAL_INT_RE,
    MAX_PRECISION,
    NULL_VAL,
    TS_MARGIN,
    BooleanV,
    DateV,
    DecimalV,
    DoubleV,
    ExactNumber,
    IntV,
    NullV,
    Number,
    StringV,
    TimestampV,
    Val,
    cast_value,
    double_value,
    is_fixed_offset_zone,
    parse_date,
    parse_timestamp,
    partition_value,
)
from starscan.spark.types import INTEGER_RANGES
from starscan.tables.catalog import Tablet

# ---- three-valued logic over sets of outcomes ------------------------------------------
TRUE, FALSE, NULL = "T", "F", "N"
ALWAYS_TRUE = frozenset({TRUE})
ALWAYS_FALSE = frozenset({FALSE})
ALWAYS_NULL = frozenset({NULL})
UNKNOWN = frozenset({TRUE, FALSE, NULL})
NOT_NULL = frozenset({TRUE, FALSE})
_DROPPABLE = frozenset({FALSE, NULL})

_NOT = {TRUE: FALSE, FALSE: TRUE, NULL: NULL}


def _and1(a: str, b: str) -> str:
    if a == FALSE or b == FALSE:
        return FALSE
    if a == NULL or b == NULL:
        return NULL
    return TRUE


def _or1(a: str, b: str) -> str:
    if a == TRUE or b == TRUE:
        return TRUE
    if a == NULL or b == NULL:
        return NULL
    return FALSE


def t_not(a: frozenset) -> frozenset:
    return frozenset(_NOT[x] for x in a)


def t_and(a: frozenset, b: frozenset) -> frozenset:
    return frozenset(_and1(x, y) for x in a for y in b)


def t_or(a: frozenset, b: frozenset) -> frozenset:
    return frozenset(_or1(x, y) for x in a for y in b)


_UNK = None  # a value that cannot be known here (pruning_values)


# ---- the evaluator -------------------------------------------------------------------------
_COMPARISONS = COMPARISONS - {Operator.EQ_NULL_SAFE}  # <=> never gives NULL: null_safe_equal
_BOOLEAN_OPS = COMPARISONS | LOGICAL


class _Evaluator:
    """What a predicate says about one tablet's partition values: its ``truth`` (the set
    of values it can take) and the ``value`` of a scalar node (``_UNK``: not known)."""

    def __init__(self, columns: Mapping[str, Val | None], ts_exact: bool):
        self.columns = columns  # lower-cased partition column -> value (None: unknown)
        self.ts_exact = ts_exact
        self.values = _Values(self)
        self.truths = _Truths(self)

    def value(self, e: Expr) -> Val | None:
        return self.values.visit(e)

    def truth(self, e: Expr) -> frozenset:
        out = self.truths.visit(e)
        return t_not(out) if e.negated and e.kind in _NEGATABLE else out


_NEGATABLE = (Kind.IN, Kind.BETWEEN, Kind.IS_NULL, Kind.LIKE)


class _Values(ExprVisitor["Val | None"]):
    """A scalar node's value on the tablet; ``_UNK`` for arithmetic, functions, LIKE, CASE."""

    def __init__(self, ev: _Evaluator):
        super().__init__()
        self.ev = ev

    def too_deep(self, e: Expr) -> Val | None:
        return _UNK

    def otherwise(self, e: Expr) -> Val | None:
        return _UNK

    def visit_column(self, e: Expr) -> Val | None:
        return self.ev.columns.get((e.name or "").lower(), _UNK)

    def visit_literal(self, e: Expr) -> Val | None:
        return literal_value(e)

    def visit_cast(self, e: Expr) -> Val | None:
        inner = self.visit(e.children[0])
        return cast_value(inner, e.type_name, self.ev.ts_exact) if inner is not None else _UNK

    def _boolean(self, e: Expr) -> Val | None:
        t = self.ev.truth(e)
        if len(t) == 1:
            (only,) = t
            return NULL_VAL if only == NULL else BooleanV(only == TRUE)
        return _UNK

    visit_in = visit_between = visit_is_null = visit_like = _boolean

    def visit_op(self, e: Expr) -> Val | None:
        return self._boolean(e) if e.operator in _BOOLEAN_OPS else _UNK


class _Truths(ExprVisitor[frozenset]):
    """The truth values a boolean node can take on the tablet (before its own negation)."""

    def __init__(self, ev: _Evaluator):
        super().__init__()
        self.ev = ev

    def too_deep(self, e: Expr) -> frozenset:
        return UNKNOWN

    def otherwise(self, e: Expr) -> frozenset:
        return UNKNOWN

    def visit_op(self, e: Expr) -> frozenset:
        ev, ch, operator = self.ev, e.children, e.operator
        if operator is Operator.AND:
            left = ev.truth(ch[0])
            return ALWAYS_FALSE if left == ALWAYS_FALSE else t_and(left, ev.truth(ch[1]))
        if operator is Operator.OR:
            left = ev.truth(ch[0])
            return ALWAYS_TRUE if left == ALWAYS_TRUE else t_or(left, ev.truth(ch[1]))
        if operator is Operator.NOT:
            return t_not(ev.truth(ch[0]))
        if operator in _COMPARISONS:
            return compare(operator, ev.value(ch[0]), ev.value(ch[1]), ev.ts_exact)
        if operator is Operator.EQ_NULL_SAFE:
            return null_safe_equal(ev.value(ch[0]), ev.value(ch[1]), ev.ts_exact)
        return UNKNOWN

    def visit_is_null(self, e: Expr) -> frozenset:
        v = self.ev.value(e.children[0])
        if v is None:
            return NOT_NULL
        return ALWAYS_TRUE if isinstance(v, NullV) else ALWAYS_FALSE

    def visit_between(self, e: Expr) -> frozenset:
        x, lo, hi = (self.ev.value(c) for c in e.children)
        return t_and(compare(">=", x, lo, self.ev.ts_exact), compare("<=", x, hi, self.ev.ts_exact))

    def visit_in(self, e: Expr) -> frozenset:
        return in_list([self.ev.value(c) for c in e.children], self.ev.ts_exact)

    def _scalar(self, e: Expr) -> frozenset:
        v = self.ev.value(e)
        if v is None:
            return UNKNOWN
        if isinstance(v, NullV):
            return ALWAYS_NULL
        if isinstance(v, BooleanV):
            return ALWAYS_TRUE if v.v else ALWAYS_FALSE
        return UNKNOWN

    visit_column = visit_literal = visit_cast = _scalar


def literal_value(e: Expr) -> Val | None:
    lt, text = e.literal_type, e.literal_value
    if lt == "null":
        return NULL_VAL
    if text is None:
        return _UNK
    try:
        if lt in ("int", "bigint"):
            if not LITERAL_INT_RE.fullmatch(text):
                return _UNK
            value = int(text)
            lo, hi = INTEGER_RANGES[lt]
            return IntV(value, INT_WIDTH[lt]) if lo <= value <= hi else _UNK
        if lt == "decimal":
            parsed = Decimal(text)
            if not parsed.is_finite():
                return _UNK
            number, p, s = decimal_precision_scale(parsed)
            return DecimalV(number, p, s) if p <= MAX_PRECISION else _UNK
        if lt == "double":
            return double_value(float(text))
    except (ValueError, InvalidOperation):
        return _UNK
    if lt == "string":
        return StringV(text)
    if lt == "boolean":
        return BooleanV(text.lower() == "true") if text.lower() in ("true", "false") else _UNK
    if lt == "date":
        d = parse_date(text)
        return DateV(d) if d is not None else _UNK
    if lt == "timestamp":
        ts = parse_timestamp(text)
        return TimestampV(ts) if ts is not None else _UNK
    return _UNK


# ---- comparisons ---------------------------------------------------------------------------
def _as_float(v: Number) -> float | None:
    if isinstance(v, DoubleV):
        return v.v
    if isinstance(v, IntV):
        return float(v.v)  # round-to-nearest, as Java's long -> double
    f = float(v.v)
    # Only when exact: no doubt about how the JVM rounds.
    return f if Decimal(f) == v.v else None


def _wider_precision(vals: Iterable[ExactNumber]) -> int:
    listed = list(vals)
    scale = max(v.s for v in listed)
    return scale + max(v.p - v.s for v in listed)


def _num_cmp(a: Number, b: Number) -> int | None:
    if isinstance(a, DoubleV) or isinstance(b, DoubleV):
        fa, fb = _as_float(a), _as_float(b)
        if fa is None or fb is None:
            return None
        return (fa > fb) - (fa < fb)
    if _wider_precision((a, b)) > MAX_PRECISION:
        return None  # Spark would round to a bounded decimal type
    da, db = Decimal(a.v), Decimal(b.v)  # comparisons of Decimals are exact
    return (da > db) - (da < db)


def _ts_cmp(a: _dt.datetime, b: _dt.datetime, exact: bool) -> int | None:
    if a == b:
        return 0
    if exact or abs(a - b) > TS_MARGIN:
        return -1 if a < b else 1
    return None


def _to_date(v: Val) -> _dt.date | None:
    if isinstance(v, DateV):
        return v.v
    return parse_date(v.v) if isinstance(v, StringV) else None


def _to_timestamp(v: Val) -> _dt.datetime | None:
    if isinstance(v, TimestampV):
        return v.v
    if isinstance(v, DateV):
        return _dt.datetime.combine(v.v, _dt.time())
    return parse_timestamp(v.v) if isinstance(v, StringV) else None


_NUMBERS = (IntV, DecimalV, DoubleV)


def order(a: Val, b: Val, ts_exact: bool) -> int | None:
    """-1/0/1 for two known non-null values under Spark's coercion, None if not sure."""
    ka, kb = a.kind, b.kind
    if isinstance(a, _NUMBERS) and isinstance(b, _NUMBERS):
        return _num_cmp(a, b)
    if isinstance(a, StringV) and isinstance(b, StringV):
        ea, eb = a.v.encode("utf-8", "surrogatepass"), b.v.encode("utf-8", "surrogatepass")
        return (ea > eb) - (ea < eb)
    if isinstance(a, BooleanV) and isinstance(b, BooleanV):
        return (a.v > b.v) - (a.v < b.v)
    if {ka, kb} <= {"date", "string"} and "date" in (ka, kb):
        da, db = _to_date(a), _to_date(b)
        if da is None or db is None:
            return None
        return (da > db) - (da < db)
    if "timestamp" in (ka, kb) and {ka, kb} <= {"timestamp", "date", "string"}:
        ta, tb = _to_timestamp(a), _to_timestamp(b)
        if ta is None or tb is None:
            return None
        both_ntz = all(v.ntz for v in (a, b) if isinstance(v, TimestampV))
        return _ts_cmp(ta, tb, ts_exact or both_ntz)
    return None


_OPS = {
    "=": lambda c: c == 0, "!=": lambda c: c != 0, "<": lambda c: c < 0,
    "<=": lambda c: c <= 0, ">": lambda c: c > 0, ">=": lambda c: c >= 0,
}


def compare(op: str, a: Val | None, b: Val | None, ts_exact: bool) -> frozenset:
    if isinstance(a, NullV) or isinstance(b, NullV):
        return ALWAYS_NULL
    if a is None or b is None:
        return UNKNOWN
    c = order(a, b, ts_exact)
    if c is None:
        return NOT_NULL
    return ALWAYS_TRUE if _OPS[op](c) else ALWAYS_FALSE


def null_safe_equal(a: Val | None, b: Val | None, ts_exact: bool) -> frozenset:
    if a is None or b is None:
        return NOT_NULL
    if isinstance(a, NullV) or isinstance(b, NullV):
        return ALWAYS_TRUE if a.kind == b.kind else ALWAYS_FALSE
    c = order(a, b, ts_exact)
    if c is None:
        return NOT_NULL
    return ALWAYS_TRUE if c == 0 else ALWAYS_FALSE


def in_list(vals: list[Val | None], ts_exact: bool) -> frozenset:
    """``x IN (v1, ...)``: TRUE if some vi = x, else NULL if x or some vi is NULL, else FALSE.
    Spark compares in the common type of *all* operands; where that could differ from the
    pairwise comparison, a definite non-TRUE answer is withheld."""
    x, items = vals[0], vals[1:]
    if isinstance(x, NullV):
        return ALWAYS_NULL
    known: list[Val] = [v for v in vals if v is not None and not isinstance(v, NullV)]
    if len(known) + sum(isinstance(v, NullV) for v in vals) == len(vals):  # every operand known
        kinds = {v.kind for v in known}
        numbers = [v for v in known if isinstance(v, _NUMBERS)]
        if numbers and len(numbers) < len(known):
            return UNKNOWN
        if numbers and "double" in kinds:
            floats = [_as_float(v) for v in numbers]
            doubles = [f for f in floats if f is not None]
            if len(doubles) < len(floats):
                return UNKNOWN
            as_doubles = iter(doubles)
            vals = [v if isinstance(v, NullV) else DoubleV(next(as_doubles)) for v in vals]
            x, items = vals[0], vals[1:]
        elif numbers and _wider_precision(v for v in numbers if not isinstance(v, DoubleV)) > MAX_PRECISION:
            return UNKNOWN
        elif len(kinds) > 1 and not kinds <= {"string", "date", "timestamp"}:
            return UNKNOWN
    out = ALWAYS_FALSE
    for item in items:
        out = t_or(out, compare("=", x, item, ts_exact))
        if out == ALWAYS_TRUE:
            break
    return out


# ---- entry point ---------------------------------------------------------------------------
def prune(
    predicate: Expr | None,
    tablets: Sequence[Tablet],
    partition_types: Mapping[str, T.DataType],
    *,
    time_zone: str | None = None,
) -> list[Tablet]:
    """The tablets that may hold rows matching ``predicate``, in their original order.

    ``partition_types``: Spark's type of each partition column (from the table schema).
    ``time_zone``: the Spark session time zone if known; only a fixed-offset zone (UTC, ...)
    lets timestamps that are close together be compared exactly."""
    tablets = list(tablets)
    if predicate is None or not partition_types or not tablets:
        return tablets
    types: dict[str, T.DataType | None] = {}
    for name, dt in partition_types.items():
        key = name.lower()
        types[key] = None if key in types else dt  # ambiguous by case: never evaluated
    ts_exact = is_fixed_offset_zone(time_zone)
    cache: dict[tuple, bool] = {}
    # A partition's tablets share their first file's partition: one lookup each (a thousand
    # tablets' partitions normalized one by one were most of a warm plan's 13 ms).
    by_partition: dict[tuple, bool] = {}
    kept: list[Tablet] = []
    for tablet in tablets:
        partition = tablet.files[0].partition if tablet.files else ()
        known = by_partition.get(partition)
        if known is not None:
            if known:
                kept.append(tablet)
            continue
        raw: dict[str, str | None] = {}
        seen: set[str] = set()
        for col, value in tablet.raw_partition.items():
            key = col.lower()
            if key in seen:
                raw.pop(key, None)  # two directories differing only in case: not sure
                continue
            seen.add(key)
            raw[key] = value
        signature = tuple(sorted(raw.items(), key=lambda kv: kv[0]))
        keep = cache.get(signature)
        if keep is None:
            columns: dict[str, Val | None] = {}
            for key, column_type in types.items():
                if column_type is None or key not in raw:
                    continue
                columns[key] = partition_value(raw[key], column_type)
            result = _Evaluator(columns, ts_exact).truth(predicate)
            keep = not result <= _DROPPABLE
            cache[signature] = keep
        by_partition[partition] = keep
        if keep:
            kept.append(tablet)
    return kept
