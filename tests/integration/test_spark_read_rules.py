"""Spark's read rules on every path: the files a long-lived Spark lake holds give Spark SQL's
rows through both forced engines, ``scan_engine = auto``, direct reads and the MySQL port.

The files are made the way their writers make them: pyarrow with the footer keys Spark 2.4
writes (``org.apache.spark.version`` and nothing else), Spark itself in its LEGACY rebase
mode with INT96 timestamps, an upload still named ``._COPYING_``, unsigned columns from
pyarrow, files with and without a column, NaN behind row-group statistics. The answer every
path must give is Spark SQL's over the same folder (``spark.read.parquet``).
"""

from __future__ import annotations

import ast
import datetime as dt
import math
import shutil
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pymysql
import pytest
from support.readers import engine_counts

from starscan.arrow.dictionary_reads import dictionary_columns
from starscan.client import ReadError, connect

DB = "rulesdb"
READER = "rules_reader"
UTC = dt.timezone.utc


# ---- helpers ----------------------------------------------------------------------------
def canon(value):
    """One text form for a value from Spark, the wire, pyarrow or the MySQL port."""
    if value is None:
        return None
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value + 0.0)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value.quantize(Decimal(1))) if value == value.to_integral_value() else str(value)
    if isinstance(value, str) and len(value) >= 10 and value[4] == "-" and value[7] == "-":
        try:
            return (dt.date.fromisoformat(value) if len(value) == 10 else dt.datetime.fromisoformat(value)).isoformat(
                **({} if len(value) == 10 else {"sep": " "}))
        except ValueError:
            return value
    return str(value)


def bag(rows) -> list:
    return sorted((tuple(canon(v) for v in row) for row in rows), key=repr)


def table_rows(table: pa.Table) -> list:
    return bag(zip(*(c.to_pylist() for c in table.columns))) if table.num_columns else []


def spark_answer(spark, folder, columns: str, where: str | None, pushdown: bool = True) -> list:
    """Spark SQL's rows over the folder, as ``spark.read.parquet`` reads it (timestamps as
    their text in the session's zone, UTC here)."""
    session = spark.newSession()
    session.conf.set("spark.sql.session.timeZone", "UTC")
    session.conf.set("spark.sql.parquet.filterPushdown", str(pushdown).lower())
    session.read.parquet(str(folder)).createOrReplaceTempView("rules_v")
    df = session.sql(f"select {columns} from rules_v" + (f" where {where}" if where else ""))
    texts = []
    for f in df.schema.fields:  # timestamps as Spark's own text: years before 1900 in Python's local time are not
        name = f"`{f.name}`"
        texts.append(f"cast({name} as string) as {name}" if f.dataType.typeName() == "timestamp" else name)
    return bag(tuple(r) for r in df.selectExpr(*texts).collect())


def write(folder, files: dict[str, pa.Table], **options) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for rel, table in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, str(folder / rel), **options)


@pytest.fixture(scope="module")
def paths(server, fe_url):
    """The ways a reader reads a table: through the BE on each engine, directly from the
    files, and through the MySQL port."""
    saved = server.service.settings.scan_engine
    if not server.users.exists(READER):
        server.users.set_password(READER, "pw", create=True)
    server.users.grant(READER, f"{DB}.*")
    server.users.grant(READER, f"direct_read:{DB}.*")
    conn = connect(fe_url, READER, "pw", max_workers=2)
    direct_reads: list[int] = []  # tablets read directly, per direct read

    def through(way: str, table: str, columns: str, where: str | None) -> list:
        sql_where = f" where {where}" if where else ""
        if way in ("auto", "arrow", "sql", "sql_reader"):
            reader = "starscan" if way == "sql_reader" else "auto"
            way = "sql" if way == "sql_reader" else way
            server.ops.update_config({"scan_engine": way, "sql_engine_reader": reader})
            before = engine_counts(server)
            try:
                got = conn.read_arrow(f"{DB}.{table}", [c.strip() for c in columns.split(",")], where, direct=False)
            except ReadError as exc:
                # A forced engine may refuse a plan it cannot read exactly (the arrow engine's
                # predicate subset), clearly and before any row; never other rows.
                assert way == "arrow" and "scan_engine = arrow cannot run this scan" in str(exc), exc
                return None
            finally:
                server.ops.update_config({"sql_engine_reader": "auto"})
            after = engine_counts(server)
            if way != "auto":
                assert after.get(way, 0) > before.get(way, 0), f"the scan did not run on the {way} engine"
            return table_rows(got)
        if way == "direct":
            # Every tablet the plan names files for is read from them in this process; a plan
            # whose predicate has no exact pyarrow reading goes through the BE (counted apart).
            server.ops.update_config({"scan_engine": "auto"})
            before = conn.direct_tablets
            got = table_rows(conn.read_arrow(f"{DB}.{table}", [c.strip() for c in columns.split(",")], where,
                                             direct="auto"))
            direct_reads.append(conn.direct_tablets - before)
            return got
        assert way == "mysql"
        mysql = pymysql.connect(host="127.0.0.1", port=server.query_port, user="root", password="",
                                connect_timeout=20, read_timeout=120)
        try:
            with mysql.cursor() as cur:
                cur.execute(f"select {columns} from {DB}.{table}{sql_where}")
                return bag(cur.fetchall())
        finally:
            mysql.close()

    yield through
    server.ops.update_config({"scan_engine": saved})
    assert sum(1 for n in direct_reads if n > 0) >= len(direct_reads) // 2, direct_reads


WAYS = ["auto", "arrow", "sql", "sql_reader", "direct", "mysql"]  # sql_reader: sql_engine_reader = starscan


def check_every_way(server, spark, paths, table: str, columns: str, where: str | None, pushdown: bool = True,
                    ways=WAYS) -> list:
    server.warehouse.invalidate(DB, table)
    want = spark_answer(spark, server.warehouse.table_path(DB, table), columns, where, pushdown)
    for way in ways:
        got = paths(way, table, columns, where)
        if got is None:
            continue  # refused clearly on a forced engine
        assert got == want, f"{way}: select {columns} where {where}: {got} != Spark's {want}"
    return want


# ---- 1. the calendar rule ---------------------------------------------------------------------
ANCIENT = [
    (0, dt.date(1, 1, 1), dt.datetime(1, 1, 1, 12, tzinfo=UTC)),
    (1, dt.date(1582, 10, 4), dt.datetime(1582, 10, 4, 23, 59, 59, 5, tzinfo=UTC)),
    (2, dt.date(1000, 1, 1), dt.datetime(1000, 1, 1, 12, tzinfo=UTC)),
    (3, dt.date(1000, 2, 28), dt.datetime(1500, 3, 1, tzinfo=UTC)),
    (4, dt.date(1582, 10, 15), dt.datetime(1582, 10, 15, tzinfo=UTC)),
    (5, dt.date(2024, 2, 29), dt.datetime(2024, 2, 29, 8, 30, tzinfo=UTC)),
    (6, None, None),
]


def ancient_table(metadata: dict[bytes, bytes]) -> pa.Table:
    ids, dates, stamps = zip(*ANCIENT)
    return pa.table({"id": pa.array(ids, pa.int32()), "d": pa.array(dates, pa.date32()),
                     "ts": pa.array(stamps, pa.timestamp("us", tz="UTC"))}).replace_schema_metadata(metadata)


@pytest.mark.parametrize("int96", [False, True], ids=["int64", "int96"])
def test_spark_2_4_files_are_rebased_from_the_hybrid_calendar(server, spark, paths, int96):
    """Spark 2.4.6-2.4.8 write ``org.apache.spark.version`` and no legacy key: Spark reads
    such a file in the hybrid calendar (0001-01-01 as stored is 0001-01-03)."""
    folder = server.warehouse.table_path(DB, "spark24")
    write(folder, {"part-0.parquet": ancient_table({b"org.apache.spark.version": b"2.4.8"})},
          use_deprecated_int96_timestamps=int96)
    want = check_every_way(server, spark, paths, "spark24", "id, d, ts", None)
    assert ("0", "0001-01-03", "0001-01-03 12:00:00") in want  # Spark's own answer, as the issue measured it
    assert ("1", "1582-09-24", "1582-09-24 23:59:59.000005") in want
    assert ("2", "0999-12-27", "0999-12-27 12:00:00") in want
    check_every_way(server, spark, paths, "spark24", "id", "d = '1582-10-04'")
    check_every_way(server, spark, paths, "spark24", "id, d", "d = '1582-09-24'")
    check_every_way(server, spark, paths, "spark24", "id, ts", "ts < '1000-01-01 00:00:00'")
    check_every_way(server, spark, paths, "spark24", "id", "d between '0999-12-01' and '1582-10-10'")


def test_dates_inside_structs_and_arrays_of_spark_2_4_files_are_rebased(server, spark, paths):
    """The calendar rule holds inside nested columns too: a struct's date and timestamp
    fields and an array's dates of a Spark 2.4 file read as Spark reads them, also through
    starscan's reader (sql_engine_reader = starscan)."""
    ids, dates, stamps = zip(*ANCIENT)
    nested = pa.table({
        "id": pa.array(ids, pa.int32()),
        "s": pa.StructArray.from_arrays([pa.array(dates, pa.date32()), pa.array(stamps, pa.timestamp("us", tz="UTC"))],
                                        names=["d", "ts"]),
        "l": pa.array([[d, d] if d is not None else None for d in dates], pa.list_(pa.date32())),
    }).replace_schema_metadata({b"org.apache.spark.version": b"2.4.8"})
    folder = server.warehouse.table_path(DB, "spark24_nested")
    write(folder, {"part-0.parquet": nested})
    server.warehouse.invalidate(DB, "spark24_nested")
    session = spark.newSession()
    session.conf.set("spark.sql.session.timeZone", "UTC")
    session.read.parquet(str(folder)).createOrReplaceTempView("rules_nested")
    want = list((r[0], r[1], r[2], tuple(r[3]) if r[3] is not None else None) for r in session.sql(
        "select id, cast(s.d as string), cast(s.ts as string), transform(l, x -> cast(x as string)) "
        "from rules_nested").collect())
    assert (0, "0001-01-03", "0001-01-03 12:00:00", ("0001-01-03", "0001-01-03")) in want  # rebased by Spark
    for way in ("auto", "sql", "sql_reader", "direct"):
        got = []
        for r in paths(way, "spark24_nested", "id, s, l", None):  # values as the ways' text (canon)
            struct, dates = ast.literal_eval(r[1]), ast.literal_eval(r[2]) if r[2] is not None else None
            got.append((int(r[0]), struct["d"], struct["ts"], tuple(dates) if dates is not None else None))
        got.sort(key=repr)
        want.sort(key=repr)
        assert got == want, f"{way}: {got} != Spark's {want}"


def test_files_without_a_spark_version_follow_the_session_mode(server, spark, paths):
    """pyarrow's own files name no Spark version: read as stored (CORRECTED, Spark 4's default)."""
    folder = server.warehouse.table_path(DB, "plain_dates")
    write(folder, {"part-0.parquet": ancient_table({})})
    want = check_every_way(server, spark, paths, "plain_dates", "id, d, ts", "id < 3")
    assert ("0", "0001-01-01", "0001-01-01 12:00:00") in want


def test_files_spark_wrote_in_its_legacy_mode_are_rebased(server, spark, paths):
    """Spark 3+ with datetimeRebaseModeInWrite = LEGACY and INT96 timestamps writes the
    legacy keys; every path reads them (the arrow engine refused them before), also for
    ``select *`` and predicates on the rebased columns."""
    folder = server.warehouse.table_path(DB, "legacy_written")
    shutil.rmtree(folder, ignore_errors=True)
    writer = spark.newSession()
    writer.conf.set("spark.sql.session.timeZone", "UTC")
    writer.conf.set("spark.sql.parquet.datetimeRebaseModeInWrite", "LEGACY")
    writer.conf.set("spark.sql.parquet.int96RebaseModeInWrite", "LEGACY")
    writer.conf.set("spark.sql.parquet.outputTimestampType", "INT96")
    rows = [(i, d, ts) for i, d, ts in ANCIENT]
    writer.createDataFrame(rows, "id int, d date, ts timestamp").coalesce(1).write.parquet(str(folder))
    footer = pq.read_schema(next(folder.glob("*.parquet"))).metadata
    assert b"org.apache.spark.legacyDateTime" in footer and b"org.apache.spark.legacyINT96" in footer
    want = check_every_way(server, spark, paths, "legacy_written", "id, d, ts", None)
    assert ("2", "1000-01-01", "1000-01-01 12:00:00") in want  # written and read back by Spark: the same
    check_every_way(server, spark, paths, "legacy_written", "id", "d < '1582-10-15'")
    check_every_way(server, spark, paths, "legacy_written", "id, ts", "ts >= '1500-03-01 00:00:00'")


# ---- 2. hidden files ----------------------------------------------------------------------------
def test_listings_follow_sparks_hidden_file_rule(server, spark, paths):
    """An upload still named ``._COPYING_`` is not read, ``_x=1.parquet`` is; ``.``-files,
    ``_SUCCESS`` and ``_metadata``-like files are not."""
    one = pa.table({"id": pa.array([1], pa.int64())})
    files = {name: pa.table({"id": pa.array([i], pa.int64())}) for i, name in enumerate(
        ["part-0.parquet", "part-1.parquet._COPYING_", "_x=1.parquet", ".part-2.parquet", "_metadata_x.parquet",
         "_SUCCESS"], start=10)}
    write(server.warehouse.table_path(DB, "hidden"), {**files, "part-0.parquet": one})
    want = check_every_way(server, spark, paths, "hidden", "id", None)
    assert want == [("1",), ("12",)]


def test_partition_folders_starting_with_underscore_are_read(server, spark, paths):
    write(server.warehouse.table_path(DB, "underscored"), {
        "_p=1/a.parquet": pa.table({"id": pa.array([1], pa.int64())}),
        "_p=2/a.parquet": pa.table({"id": pa.array([2], pa.int64())}),
    })
    assert len(check_every_way(server, spark, paths, "underscored", "id, _p", None)) == 2
    check_every_way(server, spark, paths, "underscored", "id", "_p = 2")


# ---- 3. what auto used to refuse ------------------------------------------------------------
def test_unsigned_columns_read_as_spark_types_them(server, spark, paths):
    write(server.warehouse.table_path(DB, "unsigned"), {"part-0.parquet": pa.table({
        "id": pa.array([0, 1, 2], pa.int32()),
        "u8": pa.array([0, 255, None], pa.uint8()),
        "u16": pa.array([0, 65535, 7], pa.uint16()),
        "u32": pa.array([0, 4294967295, 7], pa.uint32()),
        "u64": pa.array([0, 18446744073709551615, None], pa.uint64()),
    })})
    want = check_every_way(server, spark, paths, "unsigned", "id, u8, u16, u32, u64", None)
    assert ("1", "255", "65535", "4294967295", "18446744073709551615") in want
    check_every_way(server, spark, paths, "unsigned", "id", "u32 > 4000000000")
    check_every_way(server, spark, paths, "unsigned", "id, u8", "u8 >= 200 or u16 = 7")


def test_a_predicate_on_a_column_some_files_lack_reads_it_as_null(server, spark, paths):
    """Schema evolution: the first file has the column (Spark takes the schema from it), the
    other does not; Spark reads it there as NULL, in the filter too."""
    write(server.warehouse.table_path(DB, "evolved"), {
        "a.parquet": pa.table({"id": pa.array([1, 2], pa.int64()), "extra": pa.array([5, None], pa.int64())}),
        "b.parquet": pa.table({"id": pa.array([3, 4], pa.int64())}),
    })
    check_every_way(server, spark, paths, "evolved", "id, extra", None)
    assert check_every_way(server, spark, paths, "evolved", "id", "extra > 1") == [("1",)]
    assert len(check_every_way(server, spark, paths, "evolved", "id", "extra is null")) == 3


# ---- 4. NaN behind row-group statistics ---------------------------------------------------------
def test_nan_rows_are_not_lost_to_row_group_statistics(server, spark, paths):
    """pyarrow's statistics leave NaN out (max 99 for a group holding NaN); Spark's semantics
    order NaN above every number, so ``x > 498`` matches the NaN row on every path (Spark SQL
    itself only with its Parquet filter pushdown off)."""
    values = [float(v) for v in range(100)] + [math.nan, math.inf, -math.inf, -0.0]
    write(server.warehouse.table_path(DB, "nan_groups"), {"part-0.parquet": pa.table({
        "id": pa.array(range(len(values)), pa.int32()),
        "x": pa.array(values, pa.float64()),
        "f": pa.array(values, pa.float32()),
    })}, row_group_size=10)
    for where in ("x > 498", "f > 498", "not (x <= 99)", "x >= 99 and x < 1e300", "x = 0", "x <= -1e300"):
        got = check_every_way(server, spark, paths, "nan_groups", "id", where, pushdown=False)
        if where in ("x > 498", "f > 498"):
            assert ("100",) in got and ("101",) in got


# ---- 5. text stored as dictionary codes ---------------------------------------------------------
def test_text_spark_stored_as_dictionary_codes_reads_as_spark_reads_it(server, spark, paths):
    """Spark's writer stores a text column of few values as dictionary codes throughout, and
    one of many values as codes until the dictionary outgrows its page, then as plain values.
    The kernel reads the first kind as codes (starscan.arrow.dictionary_reads); every path
    gives Spark's rows, NULLs and predicates on such a column included."""
    folder = server.warehouse.table_path(DB, "coded_text")
    shutil.rmtree(folder, ignore_errors=True)
    spark.range(0, 40_000, numPartitions=1).selectExpr(
        "id",
        "case when id % 7 = 0 then null else element_at(array('A', 'N', 'R'), cast(id % 3 + 1 as int)) end as flag",
        "concat('unique comment ', cast(id as string), repeat('z', cast(id % 50 as int))) as note",
    ).write.parquet(str(folder))
    data = next(folder.glob("*.parquet"))
    footer = pq.ParquetFile(data)
    assert dictionary_columns(footer.metadata, footer.schema_arrow, ["id", "flag", "note"],
                              list(range(footer.num_row_groups))) == ("flag",)  # the note chunk fell back
    check_every_way(server, spark, paths, "coded_text", "id, flag, note", None)  # every way, MySQL's too: 40,000 rows
    assert len(check_every_way(server, spark, paths, "coded_text", "id, note", "flag = 'N'")) > 10_000
    check_every_way(server, spark, paths, "coded_text", "flag, id", "id < 3000 and (flag is null or flag in ('A', 'X'))")
