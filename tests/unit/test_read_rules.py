"""Spark's read rules written once in the kernel: the calendar rule (starscan.arrow.rebase) and the
hidden-file rule (starscan.storage.files). The integration tests compare every path with Spark SQL
on real files; these pin the rules themselves, the day arithmetic against Spark's own
switch table for UTC (read from the installed Spark's jar, an independent source)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from starscan.arrow.rebase import (
    CORRECTED,
    EXCEPTION,
    LEGACY,
    CalendarRules,
    RebaseError,
    _spark_tables,
    file_calendar,
    julian_to_gregorian_days,
    julian_to_gregorian_micros,
    read_column,
)
from starscan.storage.files import is_hidden, is_hidden_folder

EPOCH = dt.date(1970, 1, 1)


def day_number(value: dt.date) -> int:
    return (value - EPOCH).days


@pytest.mark.parametrize(("stored", "spark_reads"), [
    (dt.date(1, 1, 1), dt.date(1, 1, 3)),
    (dt.date(1000, 1, 1), dt.date(999, 12, 27)),
    (dt.date(1582, 10, 4), dt.date(1582, 9, 24)),
    (dt.date(1582, 10, 15), dt.date(1582, 10, 15)),
    (dt.date(1969, 12, 31), dt.date(1969, 12, 31)),
    (dt.date(2024, 2, 29), dt.date(2024, 2, 29)),
])
def test_hybrid_day_numbers_as_spark_reads_them(stored, spark_reads):
    got = julian_to_gregorian_days(np.array([day_number(stored)]))[0]
    assert EPOCH + dt.timedelta(days=int(got)) == spark_reads


def julian_day_number(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a Julian calendar date (the textbook JDN formula)."""
    a = (14 - month) // 12
    y, m = year + 4800 - a, month + 12 * a - 3
    return day + (153 * m + 2) // 5 + 365 * y + y // 4 - 32083 - 2440588


def test_a_julian_leap_day_gregorian_lacks_becomes_the_first_of_march():
    """1000-02-29 exists in the Julian calendar only: Spark reads it as 1000-03-01 (the
    first of February plus 28 days), as it reads Julian 1000-03-01."""
    stored = [julian_day_number(1000, 2, 28), julian_day_number(1000, 2, 29), julian_day_number(1000, 3, 1)]
    got = [EPOCH + dt.timedelta(days=int(d)) for d in julian_to_gregorian_days(np.array(stored))]
    assert got == [dt.date(1000, 2, 28), dt.date(1000, 3, 1), dt.date(1000, 3, 1)]


def test_utc_day_arithmetic_equals_sparks_own_switch_table():
    """Instants about 9 days apart (an odd number of seconds, so every time of day comes up)
    from year 1 to 1582-10-15, and the switch points themselves and the µs before them: the
    day arithmetic gives what Spark's table for UTC gives."""
    switches, diffs = _spark_tables()["UTC"]
    samples = np.concatenate([np.arange(switches[0], switches[-1], 768_143 * 1_000_000, dtype=np.int64), switches, switches - 1])
    samples = samples[(samples >= switches[0]) & (samples < switches[-1] + 1)]
    spark = samples + diffs[np.searchsorted(switches, samples, side="right") - 1]
    assert (julian_to_gregorian_micros(samples, "UTC") == spark).all()


def test_other_zones_use_sparks_table_with_its_local_mean_time_corrections():
    stamp = int(dt.datetime(1000, 1, 1, 12, tzinfo=dt.timezone.utc).timestamp()) * 1_000_000
    la = julian_to_gregorian_micros(np.array([stamp]), "America/Los_Angeles")[0]
    utc = julian_to_gregorian_micros(np.array([stamp]), "UTC")[0]
    assert la != utc and abs(la - utc) < 3600 * 1_000_000  # the same days, LMT's minutes apart
    modern = int(dt.datetime(2001, 1, 1, tzinfo=dt.timezone.utc).timestamp()) * 1_000_000
    assert julian_to_gregorian_micros(np.array([modern]), "America/Los_Angeles")[0] == modern
    with pytest.raises(RebaseError, match="no time zone Mars/Olympus"):
        julian_to_gregorian_micros(np.array([stamp]), "Mars/Olympus")


V = b"org.apache.spark.version"


@pytest.mark.parametrize(("footer", "session", "expected"), [
    ({}, CORRECTED, (CORRECTED, CORRECTED)),                       # pyarrow: the session decides
    ({}, LEGACY, (LEGACY, LEGACY)),
    ({}, EXCEPTION, (EXCEPTION, EXCEPTION)),
    ({V: b"2.4.8"}, EXCEPTION, (LEGACY, LEGACY)),                  # Spark 2.4: hybrid calendar
    ({V: b"3.0.1"}, CORRECTED, (CORRECTED, LEGACY)),               # INT96 rebased by Spark < 3.1
    ({V: b"3.5.0"}, LEGACY, (CORRECTED, CORRECTED)),               # Spark 3.1+: its own keys say
    ({V: b"3.5.0", b"org.apache.spark.legacyDateTime": b""}, CORRECTED, (LEGACY, CORRECTED)),
    ({V: b"3.5.0", b"org.apache.spark.legacyINT96": b""}, CORRECTED, (CORRECTED, LEGACY)),
])
def test_which_files_are_rebased(footer, session, expected):
    rules = CalendarRules(session, session, "UTC")
    calendar = file_calendar(footer, rules)
    assert (calendar.datetime_mode, calendar.int96_mode) == expected


def test_legacy_timestamps_are_rebased_in_the_writers_zone_else_the_jvms():
    rules = CalendarRules(default_zone="Europe/Berlin")
    assert file_calendar({V: b"2.4.8"}, rules).zone == "Europe/Berlin"
    assert file_calendar({V: b"3.3.0", b"org.apache.spark.legacyDateTime": b"",
                          b"org.apache.spark.timeZone": b"Asia/Tokyo"}, rules).zone == "Asia/Tokyo"


def test_rules_from_a_spark_configuration_and_through_a_plan():
    conf = {"spark.sql.legacy.parquet.datetimeRebaseModeInRead": "legacy",
            "spark.sql.parquet.int96RebaseModeInRead": "EXCEPTION",
            "spark.executor.extraJavaOptions": "-Xss4m -Duser.timezone=America/New_York"}
    rules = CalendarRules.of_settings(conf)
    assert rules == CalendarRules(LEGACY, EXCEPTION, "America/New_York", False)
    assert CalendarRules.from_json(rules.to_json()) == rules
    assert CalendarRules.from_json(None) == CalendarRules()  # a plan of an older FE: Spark 4's defaults
    assert CalendarRules.of_settings({"spark.sql.parquet.datetimeRebaseModeInRead": "nonsense"}).datetime_mode == CORRECTED


def test_exception_mode_fails_on_ancient_values_and_names_the_setting():
    dates = pa.array([dt.date(2000, 1, 1), None, dt.date(1500, 1, 1)])
    with pytest.raises(RebaseError, match="spark.sql.parquet.datetimeRebaseModeInRead"):
        read_column(dates, "date", EXCEPTION, "UTC")
    stamps = pa.array([dt.datetime(1899, 12, 31, 23, 59)], pa.timestamp("us", tz="UTC"))
    with pytest.raises(RebaseError, match="int96RebaseModeInRead"):
        read_column(stamps, "int96", EXCEPTION, "UTC")
    modern = pa.array([dt.date(1582, 10, 15), None])
    assert read_column(modern, "date", EXCEPTION, "UTC") is modern


def test_legacy_columns_keep_nulls_and_any_timestamp_unit():
    millis = pa.array([dt.datetime(1000, 1, 1, 12), None], pa.timestamp("ms", tz="UTC"))
    got = read_column(millis, "timestamp", LEGACY, "UTC")
    assert got.type == pa.timestamp("us", tz="UTC")
    assert got.to_pylist() == [dt.datetime(999, 12, 27, 12, tzinfo=dt.timezone.utc), None]
    dates = pa.chunked_array([[dt.date(1000, 1, 1)], [None]])
    assert read_column(dates, "date", LEGACY, "UTC").to_pylist() == [dt.date(999, 12, 27), None]


@pytest.mark.parametrize(("name", "hidden"), [
    ("part-0.parquet", False),
    ("part-0.parquet._COPYING_", True),     # an upload still in progress
    ("_x=1.parquet", False),                # '_' with '=': data
    ("_SUCCESS", True), ("_metadata", True), ("_common_metadata", True), ("_temporary", True),
    (".part-0.parquet.crc", True), ("_starscan", True),
])
def test_sparks_hidden_file_rule(name, hidden):
    assert is_hidden(name) is hidden


@pytest.mark.parametrize(("name", "hidden"), [
    ("p=1", False), ("_p=1", False), ("_temporary", True), (".hive-staging", True),
    ("_metadata", False), ("_common_metadata", False),  # Spark's listing enters these
    ("x._COPYING_", True),
])
def test_sparks_hidden_folder_rule(name, hidden):
    assert is_hidden_folder(name) is hidden


def test_a_reader_without_spark_finds_files_it_cannot_rebase_before_reading(tmp_path, monkeypatch):
    """A direct reader without Spark's zone tables: a legacy file whose timestamps were
    written in Tokyo is found before the first row (its tablet then goes to the BE); one
    written in UTC, or holding dates only, is read here."""
    import pyarrow.parquet as pq

    import starscan.arrow.opening as arrow_opening
    from starscan.arrow.opening import check_calendar
    from starscan.arrow.read import read_split
    from starscan.arrow.scan import Fields, plan_read
    from starscan.arrow.split_plan import ArrowSplit, FilePart, SplitReadError
    from starscan.core.sql_types import parse_schema

    monkeypatch.setattr(arrow_opening, "zone_tables_available", lambda: False)
    fields = Fields(parse_schema({"type": "struct", "fields": [
        {"name": "id", "type": "integer", "nullable": True, "metadata": {}},
        {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}}]}))
    read = plan_read("db.t", 1, fields, [("id", "id"), ("ts", "ts")], None, "UTC", "parquet", set())

    def part(name: str, zone: bytes) -> FilePart:
        path = tmp_path / name
        table = pa.table({"id": pa.array([1], pa.int32()),
                          "ts": pa.array([dt.datetime(1000, 1, 1, 12)], pa.timestamp("us", tz="UTC"))})
        pq.write_table(table.replace_schema_metadata({V: b"3.3.0", b"org.apache.spark.legacyDateTime": b"",
                                                      b"org.apache.spark.timeZone": zone}), path)
        st = path.stat()
        return FilePart(str(path), name, st.st_size, st.st_mtime_ns, None)

    tokyo, utc = part("tokyo.parquet", b"Asia/Tokyo"), part("utc.parquet", b"UTC")
    with pytest.raises(SplitReadError, match="Asia/Tokyo"):
        check_calendar(read, tokyo)
    check_calendar(read, utc)
    rows = pa.Table.from_batches(list(read_split(read, ArrowSplit((utc,))))).to_pylist()
    assert rows == [{"id": 1, "ts": dt.datetime(999, 12, 27, 12, tzinfo=dt.timezone.utc)}]


def test_int96_timestamp_conversion_sends_timestamp_scans_to_spark_sql():
    """spark.sql.parquet.int96TimestampConversion moves INT96 values of files not written by
    parquet-mr into the session's zone: the arrow engine does not do that, so it refuses the
    plan and auto runs it on Spark SQL; dates alone are still its own."""
    from starscan.arrow.filter import NotArrowable
    from starscan.arrow.scan import Fields, plan_read
    from starscan.core.sql_types import parse_schema

    fields = Fields(parse_schema({"type": "struct", "fields": [
        {"name": "d", "type": "date", "nullable": True, "metadata": {}},
        {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}}]}))
    rules = CalendarRules.of_settings({"spark.sql.parquet.int96TimestampConversion": "true"})
    with pytest.raises(NotArrowable, match="int96TimestampConversion"):
        plan_read("db.t", 1, fields, [("ts", "ts")], None, "UTC", "parquet", set(), calendar=rules)
    assert plan_read("db.t", 1, fields, [("d", "d")], None, "UTC", "parquet", set(), calendar=rules).dates == ("d",)
