"""The Spark-free type model (starscan/core/sql_types.py) reads Spark's schema JSON to the same
Arrow types pyspark gives, and to the wire's types (pyspark's with dates and timestamps as
text); the kernel's Arrow filter translates through it exactly as before."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from starscan import expr as E
from starscan.arrow.filter import NotArrowable, to_arrow_filter
from starscan.arrow.scan import Fields
from starscan.core.sql_types import SqlType, parse_schema, parse_type
from starscan.spark import compat

pytestmark = pytest.mark.quick

SCALARS = [T.BooleanType(), T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType(), T.FloatType(), T.DoubleType(),
           T.DecimalType(10, 2), T.DecimalType(38, 18), T.DecimalType(1, 0), T.StringType(), T.BinaryType(), T.DateType(),
           T.TimestampType(), T.TimestampNTZType()]
NESTED = [T.ArrayType(T.DateType(), False), T.ArrayType(T.LongType()), T.MapType(T.StringType(), T.TimestampType()),
          T.MapType(T.IntegerType(), T.DecimalType(5, 1), False),
          T.StructType([T.StructField("a", T.DateType()), T.StructField("b", T.ArrayType(T.StringType()), False)])]


def to_arrow_type(dt: T.DataType, time_zone: str) -> pa.DataType:
    """pyspark's own Arrow type of ``dt`` (timestamps in ``time_zone``), on every Spark line."""
    return compat.arrow_schema(T.StructType([T.StructField("c", dt)]), time_zone).field("c").type


def collated(name: str, collation: str) -> T.StructField:
    """A string column with a collation, as Spark 4's schema JSON records it (what
    ``StringType("UTF8_LCASE")`` gives; written out, so the test runs on 3.5 too)."""
    return T.StructField(name, T.StringType(), True, {"__COLLATIONS": {name: f"spark.{collation}"}})


def _wire(t: pa.DataType) -> pa.DataType:
    """The wire's Arrow type, from pyspark's: StarRocks sends dates and timestamps as text
    (docs/protocol.md 5.2), everything else as Spark gives it."""
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        return pa.utf8()
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_wire(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(_wire(t.key_type), t.item_field.with_type(_wire(t.item_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_wire(f.type)) for f in t])
    return t


@pytest.mark.parametrize("dt", SCALARS + NESTED, ids=lambda t: t.simpleString())
def test_spark_json_reads_to_pysparks_arrow_and_the_wire_types(dt):
    st = parse_type(dt.jsonValue())
    assert st.simple_string() == dt.simpleString()
    for tz in ("UTC", "Asia/Kolkata"):
        assert st.spark_arrow_type(tz) == to_arrow_type(dt, tz)
    spark_arrow = to_arrow_type(dt, "UTC")
    assert st.wire_arrow_type() == _wire(spark_arrow)
    assert st.needs_wire_conversion() == (_wire(spark_arrow) != spark_arrow)
    assert st.is_scalar == (dt in SCALARS)


def test_a_schema_keeps_names_nullability_char_lengths_and_collations():
    schema = T.StructType([
        T.StructField("Id", T.LongType(), False),
        T.StructField("code", T.StringType(), True, {"__CHAR_VARCHAR_TYPE_STRING": "char(4)"}),
        T.StructField("label", T.StringType(), True, {"__CHAR_VARCHAR_TYPE_STRING": "varchar(9)"}),
        collated("ci", "UTF8_LCASE"),
        T.StructField("span", T.DayTimeIntervalType()),
    ])
    fields = parse_schema(schema.json())
    assert [(f.name, f.nullable) for f in fields] == [("Id", False), ("code", True), ("label", True), ("ci", True),
                                                       ("span", True)]
    assert fields[1].declared_char_length == 4 and fields[1].is_char
    assert fields[2].declared_char_length is None and not fields[2].is_char
    assert fields[3].type.collation == "UTF8_LCASE" and fields[0].type.collation is None
    assert not fields[4].type.is_scalar
    with pytest.raises(TypeError):
        fields[4].type.spark_arrow_type("UTC")


def test_the_filter_refuses_what_it_cannot_translate_exactly():
    schema = T.StructType([T.StructField("x", T.DoubleType()), T.StructField("f", T.FloatType()),
                           T.StructField("c", T.StringType(), True, {"__CHAR_VARCHAR_TYPE_STRING": "char(2)"}),
                           collated("ci", "UTF8_LCASE"), T.StructField("d", T.DecimalType(9, 2))])
    fields = Fields(parse_schema(schema.json()))
    ok = E.op("and", E.op(">", E.column("x"), E.literal("int", "1")), E.op("<", E.column("d"), E.literal("decimal", "2.5")))
    assert isinstance(to_arrow_filter(ok, fields), pa.compute.Expression)
    for refused in (E.op("=", E.column("f"), E.column("d")), E.op("=", E.column("c"), E.literal("string", "a")),
                    E.op("=", E.column("ci"), E.literal("string", "a")), E.op("=", E.column("nope"), E.literal("int", "1"))):
        with pytest.raises(NotArrowable):
            to_arrow_filter(refused, fields)
    assert SqlType("decimal", precision=9, scale=2).simple_string() == "decimal(9,2)"
