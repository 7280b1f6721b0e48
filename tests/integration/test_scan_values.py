"""Every value of demo.all_types read through starscan equals what Spark reads from the same
files, in the StarRocks encodings of docs/protocol.md section 5.

Spark's rows are turned into the StarRocks forms here, independently of the server's Arrow
conversion: DATE -> 'YYYY-MM-DD', DATETIME -> 'YYYY-MM-DD HH:MM:SS[.ffffff]' (fraction only
when the microseconds are not zero) as wall clock in the server time zone.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pyarrow as pa
import pytest
from support.values import arrow_value, same, spark_to_starrocks

from starscan.client import thrift_client
from starscan.core.thrift_defs import wire

SQL = "select * from `demo`.`all_types`"

# (Arrow type, nullable, TPrimitiveType) of each column, in table order (docs/protocol.md 5.2).
EXPECTED_COLUMNS = [
    ("id", pa.int32(), False, 5),
    ("c_bool", pa.bool_(), True, 2),
    ("c_tinyint", pa.int8(), True, 3),
    ("c_smallint", pa.int16(), True, 4),
    ("c_int", pa.int32(), True, 5),
    ("c_bigint", pa.int64(), True, 6),
    ("c_float", pa.float32(), True, 7),
    ("c_double", pa.float64(), True, 8),
    ("c_decimal32", pa.decimal128(9, 2), True, 21),
    ("c_decimal64", pa.decimal128(18, 4), True, 22),
    ("c_decimal128", pa.decimal128(38, 10), True, 23),
    ("c_date", pa.utf8(), True, 9),
    ("c_datetime", pa.utf8(), True, 10),
    ("c_datetime_ntz", pa.utf8(), True, 10),
    ("c_string", pa.utf8(), True, 15),
    ("c_char", pa.utf8(), True, 13),
    ("c_varchar", pa.utf8(), True, 15),
    ("c_binary", pa.binary(), True, 26),
    ("c_array", pa.list_(pa.field("element", pa.int32(), True)), True, 0),
    ("c_map", pa.map_(pa.utf8(), pa.field("value", pa.int32(), True)), True, 0),
    ("c_struct", pa.struct([pa.field("a", pa.int32(), True), pa.field("b", pa.utf8(), True)]), True, 0),
]
COLUMN_NAMES = [c[0] for c in EXPECTED_COLUMNS]
NESTED = {"c_array", "c_map", "c_struct"}
# The same without the nested columns: a plan the arrow engine runs (scan_engine = auto).
SCALAR_SQL = "select " + ", ".join(f"`{c}`" for c in COLUMN_NAMES if c not in NESTED) + " from `demo`.`all_types`"

# Every test here runs on both engines (conftest `engine`).
pytestmark = [pytest.mark.usefixtures("engine"), pytest.mark.spark_line]


# ---- Spark value -> StarRocks value ---------------------------------------------------------
# ---- fixtures ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def zone(server) -> str:
    assert server.settings.time_zone == server.spark.conf.get("spark.sql.session.timeZone")
    return server.settings.time_zone


@pytest.fixture(scope="module")
def scanned(client, engine) -> pa.Table:
    """Every column with scan_engine = sql; with auto, every column the arrow engine reads
    (the nested ones would send the whole plan to the sql engine)."""
    table = client.read("demo", "all_types", SQL if engine == "sql" else SCALAR_SQL, batch_size=3)
    assert table.num_rows > 0
    return table


@pytest.fixture(scope="module")
def spark_rows(spark, server):
    df = spark.read.parquet(str(server.warehouse.table_path("demo", "all_types")))
    rows = df.collect()
    assert rows
    return df.schema, {r["id"]: r for r in rows}


# ---- tests ---------------------------------------------------------------------------------
def test_schema_types_and_nullability(scanned):
    assert scanned.column_names == [c for c in COLUMN_NAMES if c in scanned.column_names]
    assert set(COLUMN_NAMES) - set(scanned.column_names) <= NESTED
    for name, arrow_type, nullable, _ in EXPECTED_COLUMNS:
        if name not in scanned.column_names:
            continue
        field = scanned.schema.field(name)
        assert field.type == arrow_type, f"{name}: {field.type} != {arrow_type}"
        assert field.nullable == nullable, f"{name}: nullable={field.nullable}"
    if "c_array" not in scanned.column_names:
        return
    # Nested children keep their own nullability (docs/protocol.md 5.1: flag = column nullability).
    assert scanned.schema.field("c_array").type.value_field.nullable is True
    map_type = scanned.schema.field("c_map").type
    assert map_type.key_field.nullable is False and map_type.item_field.nullable is True
    # Never the types Java readers refuse.
    for field in scanned.schema:
        for forbidden in (pa.types.is_large_string, pa.types.is_large_binary, pa.types.is_dictionary,
                          pa.types.is_date, pa.types.is_timestamp, pa.types.is_string_view):
            assert not forbidden(field.type), f"{field.name}: {field.type}"


def test_row_count_and_ids(scanned, spark_rows):
    _, by_id = spark_rows
    ids = scanned.column("id").to_pylist()
    assert len(ids) == len(set(ids)) == len(by_id) == 8
    assert set(ids) == set(by_id)


@pytest.mark.parametrize("column", COLUMN_NAMES[1:])
def test_column_values_equal_spark(scanned, spark_rows, zone, column):
    if column not in scanned.column_names:
        pytest.skip(f"{column} is read by the sql engine only (scan_engine=sql covers it)")
    schema, by_id = spark_rows
    data_type = schema[column].dataType
    arrow_type = scanned.schema.field(column).type
    ids = scanned.column("id").to_pylist()
    values = scanned.column(column).to_pylist()
    mismatches = []
    for row_id, raw in zip(ids, values):
        got = arrow_value(raw, arrow_type)
        want = spark_to_starrocks(by_id[row_id][column], data_type, zone)
        if not same(got, want):
            mismatches.append((row_id, got, want))
    assert not mismatches, f"{column}: (id, starscan, spark) {mismatches}"
    # The null pattern is Spark's, and there are nulls and non-nulls to compare.
    want_nulls = {i for i, r in by_id.items() if r[column] is None}
    assert {i for i, v in zip(ids, values) if v is None} == want_nulls
    assert 0 < len(want_nulls) < len(by_id)


def test_starrocks_text_encodings(scanned):
    """Spot checks of the text forms themselves (the Spark comparison covers the rest)."""
    rows = {r["id"]: r for r in scanned.to_pylist()}
    assert rows[1]["c_date"] == "0001-01-01"
    assert rows[2]["c_date"] == "9999-12-31"
    assert rows[6]["c_date"] == "1900-01-01"
    assert rows[1]["c_datetime_ntz"] == "0001-01-01 00:00:00"
    assert rows[2]["c_datetime"] == "9999-12-30 23:59:59.999999"
    assert rows[3]["c_datetime"] == "1970-01-01 00:00:00"
    assert rows[7]["c_datetime"] == "1969-12-31 23:59:59.999999"
    assert rows[8]["c_datetime"] == "2000-01-01 00:00:00.000001"
    assert rows[6]["c_datetime"] == "1969-07-20 20:17:40"
    for r in rows.values():
        for col in ("c_datetime", "c_datetime_ntz"):
            text = r[col]
            if text is not None:
                assert len(text) in (19, 26) and not text.endswith(".000000"), text
    assert rows[1]["c_char"] == "a" + " " * 9          # CHAR(10) padded as Spark returns it
    assert rows[5]["c_char"] == "日本" + " " * 8
    assert math.isnan(rows[6]["c_float"]) and rows[6]["c_double"] == -math.inf
    assert rows[7]["c_float"] == math.inf and math.copysign(1.0, rows[7]["c_double"]) == -1.0
    assert rows[6]["c_decimal128"] == Decimal("-0.0000000001")
    assert rows[6]["c_binary"] == bytes(range(256))
    if "c_array" not in scanned.column_names:
        return  # the arrow engine's read (scan_engine = auto) has no nested columns
    assert rows[6]["c_array"] == [None, 1, None]
    assert dict(rows[6]["c_map"]) == {"null": None, "one": 1}
    assert rows[8]["c_struct"] == {"a": None, "b": "b only"}
    assert rows[4]["c_struct"] is None


def test_batches_hold_at_most_batch_size_rows(client):
    sizes = [b.num_rows for b in client.batches("demo", "all_types", SQL, batch_size=3)]
    assert sum(sizes) == 8
    assert all(1 <= n <= 3 for n in sizes), sizes


def test_selected_columns_reported_by_open_scanner(client, be_addr):
    plan = client.plan("demo", "all_types", SQL)
    tablets = [int(t) for t in plan["partitions"]]
    assert tablets
    conn = thrift_client(*be_addr)
    try:
        opened = conn.open_scanner(wire.TScanOpenParams(
            cluster="default_cluster", database="demo", table="all_types", tablet_ids=tablets,
            opaqued_query_plan=plan["opaqued_query_plan"], batch_size=3, user="root", passwd="",
        ))
        try:
            assert opened.status.status_code == wire.TStatusCode.OK, opened.status
            assert [(c.name, c.type) for c in opened.selected_columns] == [(n, t) for n, _, _, t in EXPECTED_COLUMNS]
        finally:
            conn.close_scanner(wire.TScanCloseParams(context_id=opened.context_id))
    finally:
        conn.close()


def test_projection_keeps_select_order_and_types(client, spark_rows, zone):
    schema, by_id = spark_rows
    sql = "select c_struct, c_date, id, c_datetime, c_decimal128 from `demo`.`all_types`"
    table = client.read("demo", "all_types", sql, batch_size=2)
    assert table.column_names == ["c_struct", "c_date", "id", "c_datetime", "c_decimal128"]
    want_types = {n: t for n, t, _, _ in EXPECTED_COLUMNS}
    for field in table.schema:
        assert field.type == want_types[field.name]
    for row in table.to_pylist():
        src = by_id[row["id"]]
        for col in ("c_struct", "c_date", "c_datetime", "c_decimal128"):
            want = spark_to_starrocks(src[col], schema[col].dataType, zone)
            assert same(arrow_value(row[col], table.schema.field(col).type), want), (row["id"], col)


def test_nested_dates_and_timestamps_use_the_same_text_forms(spark, server, client, zone):
    """demo.all_types has no date or timestamp inside a nested column: a throw-away table
    that does, read in small batches, compared with Spark value by value."""
    import uuid

    from starscan.spark import compat

    utc = dt.timezone.utc
    schema = compat.struct_type(spark, "id int, a_dates array<date>, m_ts map<string,timestamp>, "
                                "s struct<d:date,t:timestamp_ntz,x:int>, a_structs array<struct<t:timestamp,n:int>>")
    rows = [
        (1, [dt.date(1, 1, 1), None, dt.date(2024, 2, 29)],
         {"a": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc), "b": None},
         (dt.date(1900, 1, 1), dt.datetime(1, 1, 1, 0, 0, 0), 1),
         [(dt.datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=utc), 1), None, (None, 2)]),
        (2, [], {}, (None, None, None), []),
        (3, None, None, None, None),
        (4, [dt.date(9999, 12, 31)], {"z": dt.datetime(1970, 1, 1, tzinfo=utc)},
         (dt.date(1970, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 500000), -1),
         [(dt.datetime(1900, 1, 1, 12, 0, 0, tzinfo=utc), None)]),
        (5, [None], {"only": dt.datetime(2024, 2, 29, 12, 34, 56, 789012, tzinfo=utc)},
         (dt.date(2000, 2, 29), None, 5), [(None, None)]),
    ]
    name = f"nested_{uuid.uuid4().hex[:8]}"
    path = server.warehouse.table_path("scratch", name)
    with compat.dates_written_as_they_are(spark):  # year 1: Spark 3.5 refuses it by default
        spark.createDataFrame(rows, schema).coalesce(1).write.parquet(str(path))
    server.warehouse.invalidate("scratch", name)

    table = client.read("scratch", name, f"select * from `scratch`.`{name}`", batch_size=2)
    assert table.schema.field("a_dates").type == pa.list_(pa.field("element", pa.utf8(), True))
    assert table.schema.field("m_ts").type == pa.map_(pa.utf8(), pa.field("value", pa.utf8(), True))
    assert table.schema.field("s").type == pa.struct(
        [pa.field("d", pa.utf8(), True), pa.field("t", pa.utf8(), True), pa.field("x", pa.int32(), True)])
    assert table.schema.field("a_structs").type == pa.list_(pa.field(
        "element", pa.struct([pa.field("t", pa.utf8(), True), pa.field("n", pa.int32(), True)]), True))

    df = spark.read.parquet(str(path))
    by_id = {r["id"]: r for r in df.collect()}
    got_rows = {r["id"]: r for r in table.to_pylist()}
    assert set(got_rows) == set(by_id) == {1, 2, 3, 4, 5}
    for column in ("a_dates", "m_ts", "s", "a_structs"):
        arrow_type = table.schema.field(column).type
        for row_id, src in by_id.items():
            got = arrow_value(got_rows[row_id][column], arrow_type)
            want = spark_to_starrocks(src[column], df.schema[column].dataType, zone)
            assert same(got, want), (column, row_id, got, want)
    # The forms themselves, independent of the conversion above.
    assert got_rows[1]["a_dates"] == ["0001-01-01", None, "2024-02-29"]
    assert dict(got_rows[1]["m_ts"]) == {"a": "1969-12-31 23:59:59.999999", "b": None}
    assert got_rows[1]["s"] == {"d": "1900-01-01", "t": "0001-01-01 00:00:00", "x": 1}
    assert got_rows[1]["a_structs"] == [{"t": "2000-01-01 00:00:00.000001", "n": 1}, None, {"t": None, "n": 2}]
    assert got_rows[4]["s"]["t"] == "9999-12-31 23:59:59.500000"
    assert dict(got_rows[4]["m_ts"]) == {"z": "1970-01-01 00:00:00"}
