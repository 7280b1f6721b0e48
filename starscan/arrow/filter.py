"""``starscan.expr.Expr`` -> a pyarrow compute expression that filters exactly as Spark SQL
would, or ``NotArrowable`` with the reason.

The BE's ``arrow`` engine and the client's direct reads (starscan.arrow.scan) filter with
what this returns; a plan whose predicate does not translate runs on the ``sql`` engine
instead (and is not read directly). So this module says yes
only where the answer is provably Spark's:

* three-valued logic: ``and``/``or``/``not`` are Arrow's Kleene kernels, comparisons with a
  NULL are NULL, ``IN`` is NULL for a NULL value (it is written as ``if_else(is_null(x),
  NULL, is_in(x))``, so ``NOT IN`` drops NULLs as Spark does), ``BETWEEN`` is the two
  comparisons;
* comparisons of integers with integers, of decimals (and integers) with decimals at a
  common exact scale, of strings byte-wise (Spark's default UTF8_BINARY collation), of
  booleans, of dates with dates and with ``'YYYY-MM-DD'`` strings (Spark casts the string);
* ``LIKE`` with Spark's default escape (``\\``): Arrow's ``match_like`` has the same
  wildcards and also lets ``_``/``%`` match a newline;
* a DOUBLE column compared with a number literal (integers, doubles, decimals a double holds
  exactly): Spark casts the literal to double and orders NaN above every number, so
  ``x > c`` and ``x >= c`` are also TRUE for NaN (``greater(x, c) or is_nan(x)``); ``=``, ``!=``,
  ``<`` and ``<=`` already agree with IEEE for a literal that is not NaN, and -0.0 = 0.0 in both.

Not translated (the ``sql`` engine runs them): FLOAT columns, two floating-point columns
compared (NaN = NaN is TRUE in Spark), NaN literals, timestamps (session time zone), casts, functions,
arithmetic, CASE, ``<=>``, NULL literals, ``ILIKE``, explicit ``ESCAPE`` characters.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, NoReturn

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

    def visit_cast(self, e: Expr) -> _Typed:
        child = e.children[0]
        if ((e.type_name or "").strip().lower() == "date" and child.kind is Kind.LITERAL
                and child.literal_type is LiteralType.STRING):
            value = _date(child.literal_value or "")  # DATE '...': a date literal
            return _Typed(pc.scalar(value), _DATE, value)
        return self.otherwise(e)


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


def _double_literal(operand: _Typed) -> float:
    """A number literal as the double Spark casts it to, when that cast is exact or is
    Java's own rounding (integers); NotArrowable otherwise."""
    value = operand.literal
    t = operand.spark_type
    if t.kind == "double":
        return float(value)
    if t.is_integral:
        return float(int(value))  # round to nearest, as Java's long -> double
    if t.kind == "decimal" and value is not None:
        number = float(value)
        if Decimal(number) == Decimal(value):
            return number
        raise NotArrowable(f"the decimal {value} is not exactly a double")
    raise NotArrowable(f"comparing a double with {t.simple_string()} has no exact Arrow translation")


def _compare_double(op: str, column: _Typed, literal: _Typed) -> pc.Expression:
    """``column op literal`` for a DOUBLE column, NaN ordered above every number (Spark)."""
    value = pc.scalar(_double_literal(literal))
    out = pc.Expression._call(_COMPARE[op], [column.expr, value])
    if op in (">", ">="):
        out = out | pc.Expression._call("is_nan", [column.expr])
    return out


def _compare(op: str, left: _Typed, right: _Typed) -> pc.Expression:
    a, b = left.spark_type, right.spark_type
    fn = _COMPARE[op]
    if a.kind == "double" or b.kind == "double":
        if a.kind == "double" and left.literal is None and right.literal is not None:
            return _compare_double(op, left, right)
        if b.kind == "double" and right.literal is None and left.literal is not None:
            return _compare_double(_FLIPPED[op], right, left)
        if left.literal is not None and right.literal is not None:
            raise NotArrowable("comparing two literals has no Arrow translation here")
        raise NotArrowable(f"comparing {a.simple_string()} with {b.simple_string()} has no exact Arrow translation")
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


def _in(e: Expr, operands: _ArrowOperand) -> pc.Expression:
    value = operands.visit(e.children[0])
    items = [operands.visit(c) for c in e.children[1:]]
    if any(item.literal is None for item in items):
        raise NotArrowable("IN with a non-literal item has no exact Arrow translation")
    # Each item must compare with the value exactly: reuse the comparison's rules.
    for item in items:
        _compare("=", value, item)
    t = value.spark_type
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
        return ~out if e.negated else out
    # is_in is false for a NULL value; Spark's IN is NULL there (it matters under NOT).
    out = pc.Expression._call("if_else", [value.expr.is_null(), pc.scalar(pa.scalar(None, pa.bool_())), matched])
    return ~out if e.negated else out


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
