"""Spark's calendar rule for the dates and timestamps of a Parquet file, written once for
every reader that is not Spark itself (the arrow engine's tasks, the client's direct reads).

Spark 3.0 moved from the hybrid Julian/Gregorian calendar (Julian before 1582-10-15) to
the proleptic Gregorian one. A file keeps the numbers its writer computed, so Spark decides
per file how to read them (its ``DataSourceUtils`` rebase spec):

* A file whose footer names the Spark version that wrote it (``org.apache.spark.version``)
  was written in the hybrid calendar (``LEGACY``) when that version is older than 3.0.0
  (dates and INT64 timestamps) or 3.1.0 (INT96 timestamps), or when it carries the key a
  later Spark writes in its LEGACY write mode (``org.apache.spark.legacyDateTime``,
  ``org.apache.spark.legacyINT96``); otherwise its numbers are proleptic (``CORRECTED``).
* A file that names no Spark version (pyarrow, Hive, Impala, ...) is read as the session's
  ``spark.sql.parquet.datetimeRebaseModeInRead`` / ``int96RebaseModeInRead`` say:
  ``CORRECTED`` (Spark 4's default), ``LEGACY``, or ``EXCEPTION`` (a value from before the
  calendars agree fails the read).
* LEGACY timestamps are rebased in the writer's time zone (the footer's
  ``org.apache.spark.timeZone``) or, without one, the JVM's default zone.

Rebasing takes a value's local date (and time) in the hybrid calendar and gives the number
the same local date has in the proleptic one. Dates: 1000-01-01 is stored as the hybrid
calendar's day number, read by Spark as 1000-01-06. Dates on or after 1582-10-15 are the
same in both. Timestamps in UTC follow the same day arithmetic; in other zones Spark also
corrects the zones' offsets before their standard time began (local mean time), with tables
it ships in its own jar (``julian-gregorian-rebase-micros.json``): those are read from the
installed Spark, so the numbers are Spark's own.

TIMESTAMP_NTZ columns are never rebased (no legacy writer had them), as in Spark.
"""

from __future__ import annotations

import functools
import json
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

VERSION_KEY = b"org.apache.spark.version"
LEGACY_DATETIME_KEY = b"org.apache.spark.legacyDateTime"
LEGACY_INT96_KEY = b"org.apache.spark.legacyINT96"
TIME_ZONE_KEY = b"org.apache.spark.timeZone"

LEGACY, CORRECTED, EXCEPTION = "LEGACY", "CORRECTED", "EXCEPTION"
MODES = (LEGACY, CORRECTED, EXCEPTION)

#: The session settings, with the names of Spark 2.x-3.x that still work as fallbacks.
DATETIME_MODE_KEYS = ("spark.sql.parquet.datetimeRebaseModeInRead", "spark.sql.legacy.parquet.datetimeRebaseModeInRead")
INT96_MODE_KEYS = ("spark.sql.parquet.int96RebaseModeInRead", "spark.sql.legacy.parquet.int96RebaseModeInRead")
INT96_CONVERSION_KEY = "spark.sql.parquet.int96TimestampConversion"

#: 1582-10-15, the first Gregorian day of the hybrid calendar, in days since 1970-01-01:
#: earlier day numbers differ between the two calendars.
FIRST_GREGORIAN_DAY = -141427
#: 1900-01-01T00:00Z: from here on no zone's timestamps differ between the calendars (the
#: last of Spark's switch points); Spark's EXCEPTION mode fails on earlier timestamps.
LAST_TIMESTAMP_SWITCH_US = -2208988800 * 1_000_000
#: 1582-10-15T00:00Z: earlier UTC timestamps differ between the calendars.
FIRST_GREGORIAN_US = FIRST_GREGORIAN_DAY * 86_400 * 1_000_000
#: Zone ids whose offset is zero at every instant: their rebasing is day arithmetic alone.
UTC_ZONES = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "UCT", "Etc/UCT", "Universal", "Etc/Universal",
                       "Zulu", "Etc/Zulu", "GMT0", "Etc/GMT0", "Etc/GMT+0", "Etc/GMT-0", "Greenwich", "Etc/Greenwich",
                       "+00:00", "-00:00"})

_US_PER_DAY = 86_400 * 1_000_000


class RebaseError(Exception):
    """A file's values cannot be read as Spark would read them here (Spark's EXCEPTION mode
    found an ancient value, or a zone's calendar tables are not at hand)."""


@dataclass(frozen=True)
class CalendarRules:
    """The session settings Spark's Parquet reader rebases by, carried with the read
    instructions to wherever the files are read (a Spark worker, a client)."""

    datetime_mode: str = CORRECTED   # spark.sql.parquet.datetimeRebaseModeInRead
    int96_mode: str = CORRECTED      # spark.sql.parquet.int96RebaseModeInRead
    default_zone: str = "UTC"        # the JVM's default zone: legacy files without a zone key
    int96_conversion: bool = False   # spark.sql.parquet.int96TimestampConversion

    @classmethod
    def of_conf(cls, get: Any, default_zone: str) -> CalendarRules:
        """From a Spark configuration: ``get(key)`` gives a setting's value or None."""
        def mode(keys: tuple[str, ...]) -> str:
            for key in keys:
                value = get(key)
                if value:
                    value = str(value).strip().upper()
                    if value in MODES:
                        return value
            return CORRECTED

        return cls(mode(DATETIME_MODE_KEYS), mode(INT96_MODE_KEYS), default_zone or "UTC",
                   str(get(INT96_CONVERSION_KEY) or "false").strip().lower() == "true")

    @classmethod
    def of_settings(cls, spark_conf: Mapping[str, str]) -> CalendarRules:
        """From starscan's ``spark_conf`` setting, for a process that has no Spark session
        (the FE): the zone is the one the executors' JVMs default to (``-Duser.timezone`` in
        their Java options, else this machine's)."""
        zone = None
        for key in ("spark.executor.extraJavaOptions", "spark.driver.extraJavaOptions"):
            for word in str(spark_conf.get(key) or "").split():
                if word.startswith("-Duser.timezone="):
                    zone = word.split("=", 1)[1]
                    break
            if zone:
                break
        return cls.of_conf(spark_conf.get, zone or machine_zone())

    @classmethod
    def of_session(cls, spark: Any, jvm_zone: str | None) -> CalendarRules:
        """From a running SparkSession (the BE's driver): its settings and its JVM's default
        zone (starscan.spark.pyspark_internals.jvm_time_zone; None: this machine's)."""
        zone = jvm_zone or machine_zone()

        def get(key: str) -> str | None:
            try:
                value = spark.conf.get(key, None)
                return None if value is None else str(value)
            except Exception:  # noqa: BLE001 - an unknown key on an old Spark
                return None

        return cls.of_conf(get, zone)

    def to_json(self) -> dict[str, Any]:
        return {"datetimeRebaseMode": self.datetime_mode, "int96RebaseMode": self.int96_mode,
                "defaultTimeZone": self.default_zone, "int96TimestampConversion": self.int96_conversion}

    @classmethod
    def from_json(cls, doc: Any) -> CalendarRules:
        """A plan's rules; a plan of an FE that sent none reads as Spark 4's defaults."""
        if not isinstance(doc, dict):
            return cls()
        return cls.of_conf(lambda key: {DATETIME_MODE_KEYS[0]: doc.get("datetimeRebaseMode"),
                                        INT96_MODE_KEYS[0]: doc.get("int96RebaseMode"),
                                        INT96_CONVERSION_KEY: str(bool(doc.get("int96TimestampConversion")))}.get(key),
                           str(doc.get("defaultTimeZone") or "UTC"))


def machine_zone() -> str:
    """The zone a JVM started here defaults to: ``TZ``, else the zone /etc/localtime names."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz:
        return tz
    try:
        target = os.readlink("/etc/localtime")
    except OSError:
        return "UTC"
    marker = "zoneinfo/"
    return target.split(marker, 1)[1] if marker in target else "UTC"


@dataclass(frozen=True)
class FileCalendar:
    """How one file's dates/timestamps are read: a mode for dates and INT64 timestamps, one
    for INT96 timestamps, and the zone LEGACY timestamps are rebased in."""

    datetime_mode: str
    int96_mode: str
    zone: str

    @property
    def plain(self) -> bool:
        """Nothing to change or check: every value is read as stored."""
        return self.datetime_mode == CORRECTED and self.int96_mode == CORRECTED


def file_calendar(footer: Mapping[bytes, bytes] | None, rules: CalendarRules) -> FileCalendar:
    """Spark's rule for one file, from its footer's key-value metadata."""
    meta = footer or {}
    version = meta.get(VERSION_KEY)

    def mode(min_version: str, legacy_key: bytes, by_config: str) -> str:
        if version is None:
            return by_config
        # Spark compares the version strings as text, and so does this.
        if version.decode("utf-8", "replace") < min_version or legacy_key in meta:
            return LEGACY
        return CORRECTED

    zone = meta.get(TIME_ZONE_KEY)
    return FileCalendar(mode("3.0.0", LEGACY_DATETIME_KEY, rules.datetime_mode),
                        mode("3.1.0", LEGACY_INT96_KEY, rules.int96_mode),
                        zone.decode("utf-8", "replace") if zone else rules.default_zone)


def julian_to_gregorian_days(days: Any) -> Any:
    """Hybrid-calendar day numbers as proleptic Gregorian ones (Spark's
    ``rebaseJulianToGregorianDays``): the same local date, a Julian date before 1582-10-15.
    A Julian 29 February of a year Gregorian has none (1000-02-29) becomes 1 March."""
    days = np.asarray(days, dtype=np.int64)
    out = days.copy()
    old = days < FIRST_GREGORIAN_DAY
    if not old.any():
        return out
    # The Julian calendar's date of each day (astronomical years: 0 is 1 BC), from its
    # Julian day number (1970-01-01 is JDN 2440588).
    c = days[old] + 2440588 + 32082
    d = (4 * c + 3) // 1461
    e = c - (1461 * d) // 4
    m = (5 * e + 2) // 153
    day = e - (153 * m + 2) // 5 + 1
    month = m + 3 - 12 * (m // 10)
    year = d - 4800 + m // 10
    out[old] = _gregorian_day_number(year, month) + (day - 1)
    return out


def _gregorian_day_number(year: Any, month: Any) -> Any:
    """Days since 1970-01-01 of the first of each month, proleptic Gregorian."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    mp = (month + 9) % 12
    doy = (153 * mp + 2) // 5
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def julian_to_gregorian_micros(micros: Any, zone: str) -> Any:
    """Hybrid-calendar timestamps (µs since the epoch) as proleptic ones, in ``zone``
    (Spark's ``rebaseJulianToGregorianMicros``)."""
    micros = np.asarray(micros, dtype=np.int64)
    out = micros.copy()
    if is_utc(zone):
        old = micros < FIRST_GREGORIAN_US
        if old.any():
            day = micros[old] // _US_PER_DAY
            out[old] = julian_to_gregorian_days(day) * _US_PER_DAY + (micros[old] - day * _US_PER_DAY)
        return out
    old = micros < LAST_TIMESTAMP_SWITCH_US
    if not old.any():
        return out
    switches, diffs = _zone_table(zone)
    values = micros[old]
    if (values < switches[0]).any():
        raise RebaseError(f"a timestamp before year 1 in time zone {zone} cannot be rebased exactly outside Spark")
    index = np.searchsorted(switches, values, side="right") - 1
    out[old] = values + diffs[index]
    return out


def is_utc(zone: str) -> bool:
    """Whether ``zone`` is UTC under any of its names (its offset is zero at every instant)."""
    if zone in UTC_ZONES:
        return True
    text = zone.upper().replace("UTC", "").replace("GMT", "")
    return text in ("+0", "-0", "+00", "-00", "+00:00", "-00:00", "+0000", "-0000")


def zone_tables_available() -> bool:
    """Whether Spark's zone tables can be read here (an installed Spark)."""
    try:
        _spark_tables()
    except RebaseError:
        return False
    return True


@functools.cache
def _zone_table(zone: str) -> tuple[Any, Any]:
    """Spark's switch points and differences (µs) of ``zone``, read from the installed
    Spark's jar."""
    tables = _spark_tables()
    found = tables.get(zone)
    if found is None:
        raise RebaseError(f"Spark's calendar tables have no time zone {zone}: timestamps written with Spark's legacy "
                          "calendar in that zone cannot be read exactly outside Spark")
    return found


@functools.cache
def _spark_tables() -> dict[str, tuple[Any, Any]]:
    for jar in _spark_jars():
        try:
            with zipfile.ZipFile(jar) as archive:
                if "julian-gregorian-rebase-micros.json" not in archive.namelist():
                    continue
                records = json.loads(archive.read("julian-gregorian-rebase-micros.json"))
        except (OSError, zipfile.BadZipFile, ValueError):
            continue
        return {r["tz"]: (np.array(r["switches"], dtype=np.int64) * 1_000_000,
                          np.array(r["diffs"], dtype=np.int64) * 1_000_000) for r in records}
    raise RebaseError("no Spark installation was found for its calendar tables (pip install pyspark, or set "
                      "SPARK_HOME): timestamps written with Spark's legacy calendar outside UTC need them")


def _spark_jars() -> list[Path]:
    folders = []
    if os.environ.get("SPARK_HOME"):
        folders.append(Path(os.environ["SPARK_HOME"]) / "jars")
    try:
        import importlib.util

        spec = importlib.util.find_spec("pyspark")
        if spec is not None and spec.origin:
            folders.append(Path(spec.origin).parent / "jars")
    except (ImportError, ValueError):
        pass
    jars: list[Path] = []
    for folder in folders:
        if folder.is_dir():
            jars.extend(sorted(folder.glob("spark-sql-api*.jar")) + sorted(folder.glob("spark-catalyst*.jar")))
    return jars


def read_column(array: pa.Array | pa.ChunkedArray, kind: str, mode: str, zone: str) -> pa.Array:
    """A date or timestamp column of a file as Spark reads it under ``mode``: rebased
    (LEGACY), checked (EXCEPTION: an ancient value fails, naming the setting) or as it is.
    ``kind``: "date", "timestamp" or "int96" (the setting named in an error)."""
    if mode == CORRECTED or len(array) == 0:
        return array
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    is_date = pa.types.is_date32(array.type)
    if not is_date and not pa.types.is_timestamp(array.type):
        return array
    unit_type = array.type if is_date else pa.timestamp("us", tz=array.type.tz)
    as_us = array if is_date else array.cast(unit_type, safe=False)
    numbers = as_us.view(pa.int32() if is_date else pa.int64())
    valid = numbers.is_valid()
    values = numbers.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if mode == EXCEPTION:
        limit = FIRST_GREGORIAN_DAY if is_date else LAST_TIMESTAMP_SWITCH_US
        if bool((values[valid.to_numpy(zero_copy_only=False)] < limit).any()):
            key = INT96_MODE_KEYS[0] if kind == "int96" else DATETIME_MODE_KEYS[0]
            raise RebaseError(f"it holds {'dates before 1582-10-15' if is_date else 'timestamps before 1900-01-01'}, "
                              f"which may mean other values in Spark 2.x and 3.x (Spark's "
                              f"INCONSISTENT_BEHAVIOR_CROSS_VERSION.READ_ANCIENT_DATETIME); set {key} to LEGACY or "
                              "CORRECTED in spark_conf to read it")
        return array
    rebased = julian_to_gregorian_days(values) if is_date else julian_to_gregorian_micros(values, zone)
    numbers_out = pa.array(rebased.astype(np.int32 if is_date else np.int64), mask=~valid.to_numpy(zero_copy_only=False))
    return numbers_out.view(pa.date32() if is_date else unit_type)
