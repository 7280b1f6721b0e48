"""``x % n`` in the arrow engine's filter (starscan.arrow.filter._remainder): Java's
remainder of the values widened as Spark widens them, for integer values by a non-zero
integer literal only. The property tests compare whole scans with Spark SQL
(tests/integration/test_scan_properties.py); this checks the edges by hand."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from starscan import expr as E
from starscan.arrow.filter import NotArrowable, to_arrow_filter
from starscan.arrow.scan import Fields
from starscan.core.sql_types import parse_schema

SCHEMA = T.StructType([T.StructField("b", T.ByteType()), T.StructField("l", T.LongType()),
                       T.StructField("d", T.DecimalType(9, 2)), T.StructField("x", T.DoubleType())])
FIELDS = Fields(parse_schema(SCHEMA.json()))
LONG_MIN = -(2**63)


def java_remainder(a: int, n: int) -> int:
    """Java's ``a % n``: the sign of the dividend."""
    r = abs(a) % abs(n)
    return -r if a < 0 else r


def rows_where(column: str, values: list, divisor: str, kind: str, op: str, right: str) -> list:
    table = pa.table({column: pa.array(values, pa.int8() if column == "b" else pa.int64())})
    predicate = E.op(op, E.op("%", E.column(column), E.literal(kind, divisor)), E.literal("int", right))
    return table.filter(to_arrow_filter(predicate, FIELDS)).column(column).to_pylist()


@pytest.mark.parametrize("divisor", ["3", "-3", "9973", "-1", "1", "2", str(2**62)])
def test_the_remainder_has_the_dividends_sign_as_in_java(divisor):
    values = [-10, -9, -7, -1, 0, 1, 7, 9, 10, None, LONG_MIN, 2**63 - 1]
    n = int(divisor)
    for right in range(-3, 4):
        want = [v for v in values if v is not None and java_remainder(v, n) == right]
        assert rows_where("l", values, divisor, "int", "=", str(right)) == want, (divisor, right)


def test_a_byte_column_by_a_bigint_literal_is_widened_first():
    values = [-128, -5, 5, 127, None]
    want = [v for v in values if v is not None and java_remainder(v, 3_000_000_000) == v]
    assert rows_where("b", values, "3000000000", "bigint", "=", "0") == [] and want == [-128, -5, 5, 127]
    assert rows_where("b", values, "3000000000", "bigint", "!=", "0") == want


@pytest.mark.parametrize("predicate", [
    E.op("=", E.op("%", E.column("l"), E.literal("int", "0")), E.literal("int", "0")),       # division by zero
    E.op("=", E.op("%", E.column("l"), E.column("b")), E.literal("int", "0")),               # a column divisor
    E.op("=", E.op("%", E.column("d"), E.literal("int", "2")), E.literal("int", "0")),       # a decimal
    E.op("=", E.op("%", E.column("x"), E.literal("int", "2")), E.literal("int", "0")),       # floating point
    E.op("=", E.op("%", E.literal("int", "7"), E.column("l")), E.literal("int", "0")),       # a literal dividend
    E.op("=", E.op("+", E.column("l"), E.literal("int", "1")), E.literal("int", "0")),       # other arithmetic
])
def test_other_remainders_stay_with_the_sql_engine(predicate):
    with pytest.raises(NotArrowable):
        to_arrow_filter(predicate, FIELDS)


def test_every_byte_by_every_byte_divisor_is_javas_remainder():
    values = list(range(-128, 128))
    for n in [d for d in range(-128, 128) if d != 0]:
        for right in (0, 1, -1, 5, -127):
            want = [v for v in values if java_remainder(v, n) == right]
            assert rows_where("b", values, str(n), "int", "=", str(right)) == want, (n, right)
