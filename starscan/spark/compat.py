"""Where pyspark's lines differ in what starscan uses, the one place that knows.

starscan supports the Spark lines 3.5 (the long-term-support line many clusters still run)
to 4.3 (``TESTED_RELEASES``; the server extra admits those and no other, docs/scaling.md).
3.5 lacks some of 4.x's Python API; each difference starscan meets is answered here with a
branch per line, so that no other module asks which pyspark it runs on. Found with pyspark
3.5.5 and 3.5.9 beside pyarrow 26:

- ``pyspark.sql.pandas.types.to_arrow_schema`` takes no ``timezone`` before 4.2 (nor
  ``prefers_large_types`` before 4.0) and gives every timestamp as UTC; Spark's JVM writes
  timestamps in the session's time zone on every line (``arrow_schema``);
- ``DataFrame.toArrow`` is new in 4.0 (3.5 has the private ``_collect_as_arrow``:
  starscan.spark.pyspark_internals ``collect_arrow``);
- ``StructType.fromDDL`` is new in 4.0 (``struct_type``);
- the Python data source API (``pyspark.sql.datasource``) is new in 4.0
  (``HAS_PYTHON_DATA_SOURCE``), and Spark offers such a source its filters from 4.1
  (``HAS_DATA_SOURCE_FILTERS``: the filter classes and ``pushFilters``);
- below the public API (starscan.spark.pyspark_internals, which branches by these flags):
  ``_load_from_socket`` is a context manager from 4.2, an iterator before, in
  ``pyspark.util`` from 4.0 and in ``pyspark.rdd`` before; Spark 4 is built on Scala 2.13,
  3.5 on 2.12, and Spark's internal ``PartitioningUtils.parsePartitions`` takes one argument
  more from 4.0.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyspark
from pyspark.sql import types as T

#: The installed pyspark's (major, minor).
PYSPARK_LINE: tuple[int, int] = tuple(int(part) for part in pyspark.__version__.split(".")[:2])  # type: ignore[assignment]
SPARK_4 = PYSPARK_LINE >= (4, 0)
SPARK_4_2 = PYSPARK_LINE >= (4, 2)

#: Each Spark line starscan supports, with the release its tests ran on (the newest and the
#: oldest line in every CI run, the others once by hand: docs/scaling.md has the table).
#: The server extra's pyspark range in pyproject.toml admits exactly these lines.
TESTED_RELEASES: dict[tuple[int, int], str] = {
    (3, 5): "3.5.9", (4, 0): "4.0.5", (4, 1): "4.1.4", (4, 2): "4.2.1", (4, 3): "4.3.0",
}


def unsupported_line() -> str | None:
    """Why the installed pyspark is not one starscan supports (one installed by force, past
    the extra's range), or None when it is."""
    if PYSPARK_LINE in TESTED_RELEASES:
        return None
    lines = ", ".join(".".join(map(str, line)) for line in TESTED_RELEASES)
    return (f"pyspark {pyspark.__version__} is not a Spark line starscan supports ({lines}): "
            f"install the pyspark of your cluster's line, e.g. pip install 'pyspark==3.5.*'")

#: Whether ``spark.read.format("starscan")`` can be registered (docs/readers.md).
HAS_PYTHON_DATA_SOURCE = SPARK_4
#: Whether Spark pushes filters into a Python data source (4.1 on); before, it evaluates them all.
HAS_DATA_SOURCE_FILTERS = PYSPARK_LINE >= (4, 1)


def arrow_schema(schema: T.StructType, time_zone: str) -> pa.Schema:
    """Spark's Arrow types of ``schema`` as its JVM writes them: timestamps in the session's
    ``time_zone``, no large string or binary types."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if SPARK_4_2:
        return to_arrow_schema(schema, timezone=time_zone, prefers_large_types=False)
    in_utc = to_arrow_schema(schema, prefers_large_types=False) if SPARK_4 else to_arrow_schema(schema)
    return pa.schema([field.with_type(_in_zone(field.type, time_zone)) for field in in_utc])


def _in_zone(arrow_type: pa.DataType, time_zone: str) -> pa.DataType:
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None:
        return pa.timestamp(arrow_type.unit, tz=time_zone)
    if pa.types.is_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(_in_zone(arrow_type.value_type, time_zone)))
    if pa.types.is_map(arrow_type):
        return pa.map_(arrow_type.key_field.with_type(_in_zone(arrow_type.key_type, time_zone)),
                       arrow_type.item_field.with_type(_in_zone(arrow_type.item_type, time_zone)))
    if pa.types.is_struct(arrow_type):
        return pa.struct([field.with_type(_in_zone(field.type, time_zone)) for field in arrow_type])
    return arrow_type


def struct_type(spark: Any, ddl: str) -> T.StructType:
    """A StructType from its DDL (``a INT, b STRING``)."""
    if SPARK_4:
        return T.StructType.fromDDL(ddl)  # type: ignore[return-value]  # a struct's DDL gives a StructType
    schema: T.StructType = spark.createDataFrame([], ddl).schema
    return schema


@contextmanager
def dates_written_as_they_are(spark: Any) -> Iterator[None]:
    """Parquet writes of the session keep dates and timestamps before 1582 as they are
    (proleptic Gregorian: CORRECTED, Spark 4's default) while the block runs. Spark 3.5's
    default (EXCEPTION) fails such a write, and a session may be configured otherwise; the
    keys are set back (or unset) after."""
    keys = ("spark.sql.parquet.datetimeRebaseModeInWrite", "spark.sql.parquet.int96RebaseModeInWrite")
    saved = {k: spark.conf.get(k, None) for k in keys}  # None: not set, the line's default applies
    changed = [k for k in keys if str(spark.conf.get(k)).upper() != "CORRECTED"]
    try:
        for k in changed:
            spark.conf.set(k, "CORRECTED")
        yield
    finally:
        for k in changed:
            value = saved[k]
            if value is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, value)
