"""starscan.spark.compat: the answers for pyspark's older line give what 4.x gives itself."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from starscan.spark import compat

pytestmark = pytest.mark.spark_line  # the Spark-version tier (docs/scaling.md)

SCHEMA = T.StructType([
    T.StructField("ts", T.TimestampType()),
    T.StructField("ntz", T.TimestampNTZType()),
    T.StructField("d", T.DateType()),
    T.StructField("s", T.StringType()),
    T.StructField("tags", T.ArrayType(T.TimestampType())),
    T.StructField("m", T.MapType(T.StringType(), T.TimestampType())),
    T.StructField("inner", T.StructType([T.StructField("at", T.TimestampType()), T.StructField("n", T.LongType())])),
])


def test_every_timestamp_of_the_arrow_schema_is_in_the_sessions_zone():
    """Whichever line runs, compat's schema has the session's zone in every zoned timestamp,
    nested ones too, as Spark's JVM writes them (4.2's own ``timezone=``; older lines give
    UTC and compat puts the zone in)."""
    zone = "America/Los_Angeles"
    native = compat.arrow_schema(SCHEMA, zone)
    assert native.field("ts").type == pa.timestamp("us", tz=zone)
    assert native.field("ntz").type == pa.timestamp("us")
    assert native.field("tags").type.value_type == pa.timestamp("us", tz=zone)
    assert native.field("inner").type.field("at").type == pa.timestamp("us", tz=zone)
    assert native.field("m").type.item_type == pa.timestamp("us", tz=zone)
    assert native.field("s").type == pa.string()  # no large types on any line


@pytest.mark.skipif(not compat.SPARK_4_2, reason="imitates the older lines with 4.2's function")
@pytest.mark.parametrize("line", [(3, 5), (4, 0), (4, 1)])
def test_the_older_lines_arrow_schema_is_the_newer_ones(monkeypatch, line):
    """Before 4.2 ``to_arrow_schema`` takes no time zone and gives UTC (3.5 takes no
    ``prefers_large_types`` either); compat's answer there equals 4.2's own."""
    zone = "America/Los_Angeles"
    native = compat.arrow_schema(SCHEMA, zone)
    from pyspark.sql.pandas import types as pandas_types

    newer = pandas_types.to_arrow_schema
    if line == (3, 5):
        def older_function(schema):
            return newer(schema, timezone="UTC")
    else:
        def older_function(schema, prefers_large_types=False):
            return newer(schema, timezone="UTC", prefers_large_types=prefers_large_types)
    monkeypatch.setattr(pandas_types, "to_arrow_schema", older_function)
    monkeypatch.setattr(compat, "SPARK_4", line >= (4, 0))
    monkeypatch.setattr(compat, "SPARK_4_2", False)
    assert compat.arrow_schema(SCHEMA, zone) == native


def test_the_line_is_read_from_the_installed_pyspark():
    import pyspark

    assert compat.PYSPARK_LINE == tuple(int(p) for p in pyspark.__version__.split(".")[:2])
    assert compat.HAS_PYTHON_DATA_SOURCE == (compat.PYSPARK_LINE >= (4, 0))


def test_the_server_extra_admits_the_tested_lines_and_no_other():
    """pyproject's pyspark range and compat.TESTED_RELEASES say the same: every tested release
    installs, the lines before 3.5 and after 4.3 do not (pip refuses them next to starscan)."""
    from pathlib import Path

    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    [spec] = [Requirement(r).specifier for r in project["optional-dependencies"]["server"]
              if Requirement(r).name == "pyspark"]
    assert all(release in spec for release in compat.TESTED_RELEASES.values()), (spec, compat.TESTED_RELEASES)
    assert [v for v in ("3.4.4", "3.5.0", "4.4.0", "5.0.0") if v in spec] == []
    assert all(line in compat.TESTED_RELEASES for line in
               {(int(v.split(".")[0]), int(v.split(".")[1])) for v in ("3.5.9", "4.0.0", "4.1.0", "4.2.9", "4.3.7")
                if v in spec})


def test_the_installed_line_is_supported_and_another_is_named_with_what_to_install(monkeypatch):
    assert compat.unsupported_line() is None
    monkeypatch.setattr(compat, "PYSPARK_LINE", (3, 4))
    why = compat.unsupported_line()
    assert why is not None and "3.5, 4.0, 4.1, 4.2, 4.3" in why and "pip install 'pyspark==3.5.*'" in why


def test_ci_runs_the_tier_on_the_oldest_line_at_its_tested_release():
    from pathlib import Path

    ci = (Path(__file__).parents[2] / ".ci" / "run").read_text()
    assert f"./quickstart.sh test-spark-line {compat.TESTED_RELEASES[min(compat.TESTED_RELEASES)]} " in ci
