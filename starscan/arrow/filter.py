"""``starscan.expr.Expr`` -> a pyarrow compute expression that filters exactly as Spark SQL
would, or ``NotArrowable`` with the reason.

The BE's ``arrow`` engine and the client's direct reads (starscan.arrow.scan) filter with
what this returns; a plan whose predicate does not translate runs on the ``sql`` engine
instead (and is not read directly). So this module says yes
only where the answer is provably Spark's:

* three-valued logic: ``and``/``or``/``not`` are Arrow's Kleene kernels, comparisons with a
  NULL are NULL, ``IN`` is NULL for a NULL value (it is written as ``if_else(is_null(x),
  NULL, is_in(x))``, so ``NOT IN`` drops NULLs as Spark does) and where no item matched
  and an item is NULL, ``BETWEEN`` is the two comparisons;
* comparisons of integers with integers, of decimals (and integers) with decimals at a
  common exact scale, of strings byte-wise (Spark's default UTF8_BINARY collation), of
  booleans, of dates with dates and with ``'YYYY-MM-DD'`` strings (Spark casts the string);
* ``LIKE`` with Spark's default escape (``\\``): Arrow's ``match_like`` has the same
  wildcards and also lets ``_``/``%`` match a newline;
* FLOAT and DOUBLE columns compared with number literals and with each other, in Spark's
  order of floating-point values: NaN equals NaN and is above every other value, -0.0 =
  0.0 (``_compare_floating``); the literal takes the type Spark compares in (an integer
  against a FLOAT column rounds to the nearest float, anything else compares as DOUBLE).

* ``x % n`` of an integer value by a non-zero integer literal (``_remainder``).

Not translated (the ``sql`` engine runs them): a floating-point column against an integer or
decimal column, NaN and infinity literals (they are casts), decimal literals whose nearest
double Spark's rounding is not known to give here, timestamps (session time zone), casts,
functions, arithmetic other than that remainder, CASE, ``<=>``, NULL literals outside an ``IN`` list, ``ILIKE``, explicit
``ESCAPE`` characters.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from starscan.core.sql_types import INTEGRAL_DIGITS, Field, SqlType, decimal_type_of
from starscan.expr import Expr, ExprVisitor, Kind, LiteralType, Operator

_DATE_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_COMPARE = {"=": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal"}
MAX_DEPTH = 200
_DATE = SqlType("date")


class NotArrowable(Exception):
    """The predicate (or a column) has no exact pyarrow translation: use the sql engine."""


class _Typed:
    """A translated operand: the Arrow expression and the Spark type it has."""

    __slots__ = ("expr", "spark_type", "literal")

    def __init__(self, expr: Any, spark_type: SqlType, literal: Any = None):
        self.expr = expr
        self.spark_type = spark_type
        self.literal = literal  # the Python value when the operand is a literal


def to_arrow_filter(expr: Expr, field_of: Callable[[str], Field]) -> pc.Expression:
    """The filter for ``expr`` over a table whose columns are named as ``field_of`` returns
    them (the table's canonical names). Raises NotArrowable."""
    return _ArrowFilter(field_of).visit(expr)


class _Untranslatable(ExprVisitor[Any]):
    """A node this translator has no exact form for sends the scan to the sql engine."""

    max_depth = MAX_DEPTH

    def too_deep(self, e: Expr) -> NoReturn:
        raise NotArrowable("the predicate is nested too deeply")

    def otherwise(self, e: Expr) -> NoReturn:
        raise NotArrowable(f"{_describe(e)} has no exact Arrow translation")


class _ArrowFilter(_Untranslatable):
    """A boolean node as a pyarrow filter expression."""

    def __init__(self, field_of: Callable[[str], Field]):
        super().__init__()
        self.operands = _ArrowOperand(field_of)

    def visit_op(self, e: Expr) -> pc.Expression:
        operator = e.operator
        if operator in (Operator.AND, Operator.OR):
            a, b = (self.visit(c) for c in e.children)
            return (a & b) if operator is Operator.AND else (a | b)
        if operator is Operator.NOT:
            return ~self.visit(e.children[0])
        if operator in _COMPARE:
            left, right = (self.operands.visit(c) for c in e.children)
            return _compare(operator, left, right)
        return self.otherwise(e)

    def visit_is_null(self, e: Expr) -> pc.Expression:
        operand = self.operands.visit(e.children[0])
        return operand.expr.is_valid() if e.negated else operand.expr.is_null()

    def visit_between(self, e: Expr) -> pc.Expression:
        value, lo, hi = (self.operands.visit(c) for c in e.children)
        out = _compare(">=", value, lo) & _compare("<=", value, hi)
        return ~out if e.negated else out

    def visit_in(self, e: Expr) -> pc.Expression:
        return _in(e, self.operands)

    def visit_like(self, e: Expr) -> pc.Expression:
        return _like(e, self.operands)

    def visit_column(self, e: Expr) -> pc.Expression:
        operand = self.operands.visit(e)
        if operand.spark_type.kind == "boolean":
            return operand.expr
        return self.otherwise(e)

    def visit_literal(self, e: Expr) -> pc.Expression:
        if e.literal_type is LiteralType.BOOLEAN:
            return pc.scalar((e.literal_value or "").strip().lower() == "true")
        return self.otherwise(e)


class _ArrowOperand(_Untranslatable):
    """A value node (column, literal, DATE '...') with the Spark type it has."""

    def __init__(self, field_of: Callable[[str], Field]):
        super().__init__()
        self.field_of = field_of

    def visit_column(self, e: Expr) -> _Typed:
        field = self.field_of(e.name or "")
        dtype = field.type
        if dtype.collation is not None:
            raise NotArrowable(f"column {field.name} has a collation")
        if field.is_char:  # Spark pads the other side of a CHAR comparison too
            raise NotArrowable(f"column {field.name} is CHAR")
        if dtype.kind == "varchar":
            dtype = SqlType("string")
        return _Typed(pc.field(field.name), dtype)

    def visit_literal(self, e: Expr) -> _Typed:
        return _literal(e)

    def visit_op(self, e: Expr) -> _Typed:
        if e.operator is Operator.MOD:
            left, right = (self.visit(c) for c in e.children)
            return _remainder(e, left, right)
        return self.otherwise(e)

    def visit_cast(self, e: Expr) -> _Typed:
        child = e.children[0]
        if ((e.type_name or "").strip().lower() == "date" and child.kind is Kind.LITERAL
                and child.literal_type is LiteralType.STRING):
            value = _date(child.literal_value or "")  # DATE '...': a date literal
            return _Typed(pc.scalar(value), _DATE, value)
        return self.otherwise(e)


_INTEGRAL_ORDER = ("byte", "short", "integer", "long")
_INTEGRAL_ARROW = {"byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64()}


def _remainder(e: Expr, left: _Typed, right: _Typed) -> _Typed:
    """``x % n``: an integer value by a non-zero integer literal (``id % 100 = 7``, a sample of
    rows). Spark widens both to the wider integral type and takes Java's remainder, whose sign
    is the dividend's; Arrow's ``remainder`` is that remainder. With a non-zero divisor it
    never fails (the smallest value % -1 is 0 in both), so Spark's ANSI mode changes nothing.
    Anything else (a column divisor, zero, decimals, floating point) stays with the sql engine."""
    if not (left.spark_type.is_integral and left.literal is None and right.spark_type.is_integral
            and right.literal is not None):
        raise NotArrowable(f"{_describe(e)} has no exact Arrow translation (only an integer value % a non-zero "
                           "integer literal has)")
    if int(right.literal) == 0:
        raise NotArrowable("% 0 is a division by zero in Spark")
    wider = max(left.spark_type.kind, right.spark_type.kind, key=_INTEGRAL_ORDER.index)
    arrow_type = _INTEGRAL_ARROW[wider]
    return _Typed(_java_remainder(left.expr.cast(arrow_type), int(right.literal), arrow_type), SqlType(wider))


def _java_remainder(value: Any, n: int, arrow_type: pa.DataType) -> Any:
    """Java's remainder of an integer ``value`` by a non-zero integer ``n`` (its sign the
    dividend's): ``value - (value / n) * n``, Arrow's integer division truncating toward zero
    as Java's does. None of it overflows: ``|(value / n) * n| <= |value|``. By 1 or -1 it is 0
    (the smallest value / -1 would overflow). pyarrow's own ``remainder`` is 26's only, and
    starscan takes pyarrow 21 on."""
    if n in (1, -1):
        return pc.multiply(value, pc.scalar(pa.scalar(0, type=arrow_type)))
    divisor = pc.scalar(pa.scalar(n, type=arrow_type))
    return pc.subtract(value, pc.multiply(pc.divide(value, divisor), divisor))


def _literal(e: Expr) -> _Typed:
    lt, text = e.literal_type, e.literal_value
    if text is None or lt in ("null", "timestamp"):
        raise NotArrowable(f"a {lt} literal has no exact Arrow translation")
    if lt == "double":
        double = float(text)  # Java's Double.parseDouble and Python round the same way
        if double != double or double in (float("inf"), float("-inf")):
            raise NotArrowable(f"the double literal {text} is not a finite number")
        return _Typed(pc.scalar(double), SqlType("double"), double)
    if lt in ("int", "bigint"):
        value = int(text)
        return _Typed(pc.scalar(value), SqlType("integer" if lt == "int" else "long"), value)
    if lt == "decimal":
        number, precision, scale = decimal_type_of(text)
        return _Typed(None, SqlType("decimal", precision=precision, scale=scale), number)
    if lt == "string":
        return _Typed(pc.scalar(text), SqlType("string"), text)
    if lt == "date":
        return _Typed(pc.scalar(_date(text)), _DATE, _date(text))
    if lt == "boolean":
        value = text.strip().lower() == "true"
        return _Typed(pc.scalar(value), SqlType("boolean"), value)
    raise NotArrowable(f"a {lt} literal has no exact Arrow translation")


def _date(text: str) -> dt.date:
    if not _DATE_TEXT.fullmatch(text.strip()):
        raise NotArrowable(f"the date {text!r} is not written YYYY-MM-DD")
    try:
        return dt.date.fromisoformat(text.strip())
    except ValueError:
        raise NotArrowable(f"{text!r} is not a date") from None


def _decimal_shape(t: SqlType) -> tuple[int, int] | None:
    """(integer digits, scale) of an exact numeric type."""
    if t.kind == "decimal":
        assert t.precision is not None and t.scale is not None
        return t.precision - t.scale, t.scale
    if t.is_integral:
        return INTEGRAL_DIGITS[t.kind], 0
    return None


def _as_decimal(operand: _Typed, precision: int, scale: int) -> Any:
    target = pa.decimal128(precision, scale)
    if operand.literal is not None:
        return pc.scalar(pa.scalar(Decimal(operand.literal), type=target))
    return operand.expr.cast(target)


_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


_FLOATING = ("float", "double")
#: A decimal literal converts to the double nearest to it in Spark (Decimal.toDouble), as
#: Python's float(Decimal) does, wherever both operands of its division are exact doubles.
_EXACT_UNSCALED = 2**53
_EXACT_SCALE = 22


def _decimal_as_double(value: Decimal) -> float:
    number = float(value)
    if Decimal(number) == value:
        return number
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # a finite literal
    unscaled = int("".join(map(str, digits)) or "0")
    if unscaled < _EXACT_UNSCALED and -exponent <= _EXACT_SCALE:
        return number  # the nearest double, as Spark's conversion gives it
    raise NotArrowable(f"the decimal {value} has no double Spark is known to round it to here")


def _integer_as_float(value: int) -> float:
    """An integer literal cast to FLOAT as Java's (float) long does: the nearest float."""
    return float(np.int64(value).astype(np.float32))


def _floating_literal(operand: _Typed, column_kind: str) -> float:
    """A number literal compared with a FLOAT or DOUBLE column, as the double holding the
    value Spark compares: Spark's common type of a FLOAT column and an integer literal is
    FLOAT (the integer rounds to the nearest float), of anything else with a float type
    DOUBLE (integers round to the nearest double, decimals to the nearest double)."""
    value = operand.literal
    t = operand.spark_type
    if t.kind in _FLOATING:
        return float(value)
    if t.is_integral:
        return _integer_as_float(int(value)) if column_kind == "float" else float(int(value))
    if t.kind == "decimal" and value is not None:
        return _decimal_as_double(Decimal(value))
    raise NotArrowable(f"comparing a {column_kind} with {t.simple_string()} has no exact Arrow translation")


def _is_nan(e: pc.Expression) -> pc.Expression:
    return pc.Expression._call("is_nan", [e])


def _as_double(operand: _Typed) -> pc.Expression:
    return operand.expr.cast(pa.float64()) if operand.spark_type.kind == "float" else operand.expr


def _compare_floating(op: str, left: _Typed, right: _Typed) -> pc.Expression:
    """``left op right`` where one side is FLOAT or DOUBLE, with Spark's order of floating
    point values: NaN equals NaN and is above every other value (+infinity too), -0.0 equals
    0.0. Arrow's comparisons are IEEE's (every comparison with NaN is false but ``!=``), so
    each operator is written out for NaN. Nulls stay null (Arrow's Kleene ``and``/``or``
    give null wherever an operand is null and the rest does not decide)."""
    if left.literal is not None and right.literal is not None:
        raise NotArrowable("comparing two literals has no Arrow translation here")
    if left.literal is not None:
        return _compare_floating(_FLIPPED[op], right, left)
    if right.literal is not None:
        if left.spark_type.kind not in _FLOATING:
            raise NotArrowable(f"comparing {left.spark_type.simple_string()} with a {right.spark_type.simple_string()} "
                               "has no exact Arrow translation")
        return _compare_with_number(op, _as_double(left), pc.scalar(_floating_literal(right, left.spark_type.kind)))
    if left.spark_type.kind not in _FLOATING or right.spark_type.kind not in _FLOATING:
        raise NotArrowable(f"comparing {left.spark_type.simple_string()} with {right.spark_type.simple_string()} "
                           "has no exact Arrow translation")
    return _compare_floating_columns(op, _as_double(left), _as_double(right))


def _compare_with_number(op: str, x: pc.Expression, c: pc.Expression) -> pc.Expression:
    """``x op c`` for a floating-point ``x`` and a number ``c`` that is not NaN: NaN is above
    ``c``, so ``x > c`` and ``x >= c`` hold for it, and IEEE's answer (false, but true for
    ``!=``) is Spark's for every other operator."""
    out = pc.Expression._call(_COMPARE[op], [x, c])
    return out | _is_nan(x) if op in (">", ">=") else out


def _compare_floating_columns(op: str, x: pc.Expression, y: pc.Expression) -> pc.Expression:
    """``x op y`` for two floating-point values, either of which may be NaN."""
    if op in ("=", "!="):
        equal = pc.Expression._call("equal", [x, y]) | (_is_nan(x) & _is_nan(y))
        return equal if op == "=" else ~equal
    if op in ("<", ">="):
        less = pc.Expression._call("less", [x, y]) | (~_is_nan(x) & _is_nan(y))
        return less if op == "<" else ~less
    greater = pc.Expression._call("less", [y, x]) | (~_is_nan(y) & _is_nan(x))
    return greater if op == ">" else ~greater


def _compare(op: str, left: _Typed, right: _Typed) -> pc.Expression:
    a, b = left.spark_type, right.spark_type
    fn = _COMPARE[op]
    if a.kind in _FLOATING or b.kind in _FLOATING:
        return _compare_floating(op, left, right)
    if a.is_integral and b.is_integral:
        return pc.Expression._call(fn, [left.expr, right.expr])
    if (a.kind == "decimal" or a.is_integral) and (b.kind == "decimal" or b.is_integral):
        shape_a, shape_b = _decimal_shape(a), _decimal_shape(b)
        assert shape_a is not None and shape_b is not None  # both exact numeric types
        (ia, sa), (ib, sb) = shape_a, shape_b
        scale = max(sa, sb)
        precision = max(ia, ib) + scale
        if precision > 38:
            raise NotArrowable("a decimal comparison needs more than 38 digits")
        return pc.Expression._call(fn, [_as_decimal(left, precision, scale), _as_decimal(right, precision, scale)])
    if a.kind == "string" and b.kind == "string":
        return pc.Expression._call(fn, [left.expr, right.expr])
    if a.kind == "boolean" and b.kind == "boolean":
        return pc.Expression._call(fn, [left.expr, right.expr])
    if a.kind == "date" or b.kind == "date":
        left, right = _as_date(left), _as_date(right)
        return pc.Expression._call(fn, [left.expr, right.expr])
    raise NotArrowable(f"comparing {a.simple_string()} with {b.simple_string()} has no exact Arrow translation")


def _as_date(operand: _Typed) -> _Typed:
    if operand.spark_type.kind == "date":
        return operand
    if operand.spark_type.kind == "string" and operand.literal is not None:
        value = _date(operand.literal)
        return _Typed(pc.scalar(value), _DATE, value)
    raise NotArrowable(f"comparing a date with {operand.spark_type.simple_string()} has no exact Arrow translation")


#: A boolean NULL (``pa.scalar(None, ...)`` would load pandas, which a direct reader never needs).
_NULL_BOOL = pc.scalar(pa.nulls(1, pa.bool_())[0])


def _in(e: Expr, operands: _ArrowOperand) -> pc.Expression:
    """``x [NOT] IN (items)`` as Spark answers it: NULL for a NULL ``x``, and NULL rather
    than FALSE when no item matched and an item is NULL (so ``NOT IN`` with a NULL item
    holds for no row)."""
    value = operands.visit(e.children[0])
    literals = e.children[1:]
    null_item = any(c.kind is Kind.LITERAL and c.literal_type is LiteralType.NULL for c in literals)
    items = [operands.visit(c) for c in literals if not (c.kind is Kind.LITERAL and c.literal_type is LiteralType.NULL)]
    if any(item.literal is None for item in items):
        raise NotArrowable("IN with a non-literal item has no exact Arrow translation")
    matched = _matched(value, items) if items else None
    out = matched if matched is not None else _NULL_BOOL
    if null_item and matched is not None:
        out = out | _NULL_BOOL  # TRUE where an item matched, else NULL
    return ~out if e.negated else out


def _matched(value: _Typed, items: list[_Typed]) -> pc.Expression:
    """Whether ``value`` equals one of ``items`` (literals), NULL for a NULL value."""
    # Each item must compare with the value exactly: reuse the comparison's rules.
    for item in items:
        _compare("=", value, item)
    t = value.spark_type
    if t.kind in _FLOATING:
        # Spark widens the value and all items to one type: FLOAT only when every item is an
        # integer, DOUBLE otherwise. Compared one by one, not with is_in: -0.0 = 0.0.
        kind = "float" if t.kind == "float" and all(i.spark_type.is_integral for i in items) else "double"
        x = _as_double(value)
        out = None
        for item in items:
            eq = pc.Expression._call("equal", [x, pc.scalar(_floating_literal(item, kind))])
            out = eq if out is None else (out | eq)
        assert out is not None
        return out
    if t.is_integral:
        values = pa.array([int(i.literal) for i in items if i.spark_type.is_integral], pa.int64())
        if len(values) != len(items):
            raise NotArrowable("IN mixes an integer column with non-integer values")
        matched = value.expr.cast(pa.int64()).isin(values)
    elif t.kind == "string":
        matched = value.expr.isin(pa.array([i.literal for i in items], pa.string()))
    elif t.kind == "date":
        matched = value.expr.isin(pa.array([_as_date(i).literal for i in items], pa.date32()))
    else:
        out = None
        for item in items:
            eq = _compare("=", value, item)
            out = eq if out is None else (out | eq)
        assert out is not None  # IN has at least one item
        return out
    # is_in is false for a NULL value; Spark's IN is NULL there (it matters under NOT).
    return pc.Expression._call("if_else", [value.expr.is_null(), _NULL_BOOL, matched])


def _like(e: Expr, operands: _ArrowOperand) -> pc.Expression:
    if e.name != "like" or len(e.children) != 2:
        raise NotArrowable("only LIKE with the default escape has an exact Arrow translation")
    value, pattern = (operands.visit(c) for c in e.children)
    if value.spark_type.kind != "string" or not isinstance(pattern.literal, str):
        raise NotArrowable("LIKE on a non-string or with a non-literal pattern")
    text = pattern.literal
    i = 0
    while i < len(text):  # Spark refuses any other escape; keep those plans on Spark
        if text[i] == "\\":
            if i + 1 >= len(text) or text[i + 1] not in "_%\\":
                raise NotArrowable("a LIKE pattern with an escape Spark refuses")
            i += 2
        else:
            i += 1
    out = pc.Expression._call("match_like", [value.expr], pc.MatchSubstringOptions(text))
    return ~out if e.negated else out


def _describe(e: Expr) -> str:
    return f"{e.kind} {e.name or e.literal_type or ''}".strip()
