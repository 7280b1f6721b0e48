"""``starscan.expr.Expr`` -> Spark ``Column``, built with the Column API only.

No SQL text is ever handed to Spark (no ``F.expr``, ``selectExpr`` or ``spark.sql``): every
node becomes the Catalyst expression Spark's own SQL parser would have produced for the same
predicate, so a plan filters exactly as ``spark.sql("select ... where <predicate>")`` would.

Literal typing follows Spark's SQL parser: ``int`` -> IntegerType, ``bigint`` -> LongType,
``decimal`` text -> DecimalType(precision, scale) of that text (``1.50`` is decimal(3,2),
``0.001`` is decimal(3,3)), ``double`` -> DoubleType, ``string`` -> StringType.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from starscan.core.errors import PlanInvalid, SqlInvalid
from starscan.core.sql_types import decimal_type_of
from starscan.expr import Expr, ExprVisitor
from starscan.expr.functions import SPARK_FUNCTIONS
from starscan.spark.types import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN

# Functions that reach outside the row (JVM reflection, the input file): never callable,
# whatever the plan says.
_FORBIDDEN_FUNCTIONS = {"reflect", "java_method", "try_reflect", "input_file_name",
                        "input_file_block_start", "input_file_block_length"}
_FUNCTION_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_INTEGER = re.compile(r"[+-]?[0-9]+")

_COMPARE: dict[str, Callable[[Column, Column], Column]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,            # Not(EqualTo(a, b)), as Spark parses `a != b`
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<=>": lambda a, b: a.eqNullSafe(b),
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,              # Divide
    "%": lambda a, b: a % b,              # Remainder
    "div": lambda a, b: F.call_function("div", a, b),  # IntegralDivide
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
}
_UNARY: dict[str, Callable[[Column], Column]] = {
    "not": lambda a: ~a,
    "neg": lambda a: -a,                  # UnaryMinus
}


_ALLOWED = frozenset(n.lower() for n in SPARK_FUNCTIONS)


def check_function_name(name: str | None) -> str:
    """The Spark function a ``func`` node may call, or ``SqlInvalid``."""
    fname = (name or "").lower()
    if not fname or not _FUNCTION_NAME.fullmatch(fname):
        raise SqlInvalid(f"bad function name {name!r}")
    if fname in _FORBIDDEN_FUNCTIONS or "reflect" in fname or fname.startswith("input_file"):
        raise SqlInvalid(f"function {fname} is not allowed")
    if fname not in _ALLOWED:
        raise SqlInvalid(f"unknown or disallowed function {fname}")
    return fname


def _int_value(text: str | None, lo: int, hi: int, kind: str) -> int:
    if text is None or not _INTEGER.fullmatch(text.strip()):
        raise PlanInvalid(f"query plan has a bad {kind} literal {text!r}")
    value = int(text.strip())
    if not lo <= value <= hi:
        raise PlanInvalid(f"query plan has an out-of-range {kind} literal {text!r}")
    return value


def literal_column(e: Expr) -> Column:
    lt, text = e.literal_type, e.literal_value
    if lt == "null":
        return F.lit(None)
    if text is None:
        raise PlanInvalid(f"query plan has a {lt} literal without a value")
    if lt == "boolean":
        low = text.strip().lower()
        if low not in ("true", "false"):
            raise PlanInvalid(f"query plan has a bad boolean literal {text!r}")
        return F.lit(low == "true")
    if lt == "int":
        return F.lit(_int_value(text, INT_MIN, INT_MAX, "int"))
    if lt == "bigint":
        value = _int_value(text, LONG_MIN, LONG_MAX, "bigint")
        if INT_MIN <= value <= INT_MAX:
            # py4j would hand a small Python int to the JVM as an Integer.
            return F.lit(value).cast(T.LongType())
        return F.lit(value)
    if lt == "decimal":
        number, precision, scale = decimal_type_of(text)
        return F.lit(number).cast(T.DecimalType(precision, scale))
    if lt == "double":
        try:
            double = float(text)
        except ValueError:
            raise PlanInvalid(f"query plan has a bad double literal {text!r}") from None
        if not math.isfinite(double):
            # Spark's parser rejects such a literal (INVALID_NUMERIC_LITERAL_RANGE).
            raise SqlInvalid(f"numeric literal {text!r} is outside the valid range for double")
        return F.lit(double)
    if lt == "string":
        return F.lit(text)
    if lt in ("date", "timestamp"):
        # DATE '...' / TIMESTAMP '...': the string read as Spark reads it for that type
        # (the session time zone and default timestamp type apply, as in Spark SQL).
        return F.lit(text).cast(lt)
    raise PlanInvalid(f"query plan has a literal of unknown type {lt!r}")


def to_column(expr: Expr, resolve: Callable[[str], str]) -> Column:
    """Build the Spark Column for ``expr``. ``resolve`` maps a column name as written in the
    SQL to the table's canonical column name (its exceptions propagate)."""
    return SparkColumns(resolve).visit(expr)


def quote_identifier(name: str) -> str:
    """``name`` as a Spark SQL identifier: in backticks, a backtick doubled."""
    return "`" + name.replace("`", "``") + "`"


def column_ref(name: str) -> Column:
    """The column named exactly ``name`` (dots, spaces and backticks taken literally)."""
    return F.col(quote_identifier(name))


class SparkColumns(ExprVisitor[Column]):
    """Each node as the Catalyst expression Spark's SQL parser makes of it."""

    def __init__(self, resolve: Callable[[str], str]):
        super().__init__()
        self.resolve = resolve

    def visit_column(self, e: Expr) -> Column:
        return column_ref(self.resolve(e.name or ""))

    def visit_literal(self, e: Expr) -> Column:
        return literal_column(e)

    def visit_op(self, e: Expr) -> Column:
        operator = e.operator
        operands = [self.visit(c) for c in e.children]
        if operator in _UNARY:
            return _UNARY[operator](operands[0])
        return _COMPARE[operator](operands[0], operands[1])

    def visit_func(self, e: Expr) -> Column:
        fname = check_function_name(e.name)
        return F.call_function(fname, *(self.visit(c) for c in e.children))

    def visit_cast(self, e: Expr) -> Column:
        type_name = (e.type_name or "").strip()
        child = self.visit(e.children[0])
        try:
            return child.cast(type_name)
        except Exception as exc:  # noqa: BLE001 - Spark's data type parser rejected the name
            raise SqlInvalid(f"cannot cast to {type_name!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None

    def visit_in(self, e: Expr) -> Column:
        return _negated(e, self.visit(e.children[0]).isin(*(self.visit(c) for c in e.children[1:])))

    def visit_between(self, e: Expr) -> Column:
        value, lo, hi = (self.visit(c) for c in e.children)
        return _negated(e, value.between(lo, hi))

    def visit_is_null(self, e: Expr) -> Column:
        return _negated(e, self.visit(e.children[0]).isNull())

    def visit_like(self, e: Expr) -> Column:
        return _negated(e, F.call_function(str(e.name), *(self.visit(c) for c in e.children)))

    def visit_case(self, e: Expr) -> Column:
        children = list(e.children)
        default = children.pop() if e.name == "else" else None
        out = None
        for i in range(0, len(children), 2):
            cond, value = self.visit(children[i]), self.visit(children[i + 1])
            out = F.when(cond, value) if out is None else out.when(cond, value)
        assert out is not None  # the node has at least one WHEN/THEN pair
        return out.otherwise(self.visit(default)) if default is not None else out


def _negated(e: Expr, column: Column) -> Column:
    return ~column if e.negated else column
