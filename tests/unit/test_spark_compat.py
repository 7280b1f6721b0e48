"""starscan.spark.compat: the answers for pyspark's older line give what 4.x gives itself."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T

from starscan.spark import compat

SCHEMA = T.StructType([
    T.StructField("ts", T.TimestampType()),
    T.StructField("ntz", T.TimestampNTZType()),
    T.StructField("d", T.DateType()),
    T.StructField("s", T.StringType()),
    T.StructField("tags", T.ArrayType(T.TimestampType())),
    T.StructField("m", T.MapType(T.StringType(), T.TimestampType())),
    T.StructField("inner", T.StructType([T.StructField("at", T.TimestampType()), T.StructField("n", T.LongType())])),
])


def test_the_older_lines_arrow_schema_is_the_newer_ones(monkeypatch):
    """On 3.5 ``to_arrow_schema`` has no time zone and gives UTC; compat puts the session's
    zone in every timestamp, nested ones too, as 4.x's own ``timezone=`` does."""
    zone = "America/Los_Angeles"
    native = compat.arrow_schema(SCHEMA, zone)
    assert native.field("ts").type == pa.timestamp("us", tz=zone)
    assert native.field("ntz").type == pa.timestamp("us")
    from pyspark.sql.pandas import types as pandas_types

    newer = pandas_types.to_arrow_schema
    # 3.5's function: no time zone to give, every timestamp in UTC
    monkeypatch.setattr(pandas_types, "to_arrow_schema", lambda schema: newer(schema, timezone="UTC"))
    monkeypatch.setattr(compat, "SPARK_4", False)
    older = compat.arrow_schema(SCHEMA, zone)
    assert older == native
    assert older.field("inner").type.field("at").type == pa.timestamp("us", tz=zone)
    assert older.field("m").type.item_type == pa.timestamp("us", tz=zone)


def test_the_line_is_read_from_the_installed_pyspark():
    import pyspark

    assert compat.PYSPARK_LINE == tuple(int(p) for p in pyspark.__version__.split(".")[:2])
    assert compat.HAS_PYTHON_DATA_SOURCE == (compat.PYSPARK_LINE >= (4, 0))
