"""Demo tables created in an empty warehouse, so a fresh server has something to serve.

``demo.lineitem`` is a TPC-H-like ``lineitem`` generated entirely inside Spark
(``spark.range`` plus deterministic ``hash``/``pmod`` expressions of the row's keys: no
Python UDFs, nothing collected to the driver), so the same scale always gives the same rows.
The value rules follow the TPC-H specification (section 4.2.3) closely enough to make the
usual queries meaningful: sparse order keys, 1-7 lines per order, part/supplier keys,
retail-price based extended prices, date relations and the return flag/line status rules.

``demo.all_types`` has one column per Spark type starscan serves, with nulls, minimum and
maximum values, dates and timestamps before 1970 and non-ASCII text: a table to check a
client's type handling against.
"""

from __future__ import annotations

import math
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import TYPE_CHECKING

from starscan.spark import compat
from starscan.tables.catalog import Warehouse

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEMO_DB = "demo"
LINEITEM = "lineitem"
ALL_TYPES = "all_types"

# Parquet (snappy) bytes per lineitem row, used to pick the number of files. Measured with
# Spark 4.3: ~29.5 B/row at scale 0.01 and ~31.5 at 0.25 in one file (~40 in 70 KB files);
# the 60 of a first guess made files half the target size.
LINEITEM_BYTES_PER_ROW = 32
# TPC-H: 1,500,000 orders per scale unit with 1-7 (on average 4) lines each: ~6,000,000 lines.
ORDERS_PER_SCALE = 1_500_000

# TPC-H constants (spec 4.2.3): STARTDATE, CURRENTDATE, ENDDATE.
_START_DATE = "1992-01-01"
_CURRENT_DATE = "1995-06-17"
_ORDER_DATE_DAYS = 2405  # 1992-01-01 .. 1998-08-02 (ENDDATE 1998-12-31 minus 151 days)

SHIP_INSTRUCT = ["DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"]
SHIP_MODE = ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"]
COMMENT_WORDS = [
    "furiously", "carefully", "quickly", "slyly", "blithely", "final", "regular", "express",
    "pending", "special", "ironic", "bold", "even", "silent", "unusual", "deposits",
    "requests", "packages", "accounts", "instructions", "foxes", "theodolites", "pinto beans",
    "ideas", "dependencies", "platelets", "sleep", "wake", "nag", "haggle", "cajole", "use",
    "about", "above", "across", "among", "the", "along",
]


def warehouse_is_empty(warehouse: Warehouse) -> bool:
    """True when no database of the warehouse holds a table."""
    return not any(warehouse.tables(db) for db in warehouse.databases())


def create_demo(spark: SparkSession, warehouse: Warehouse, scale: float, tablet_target_bytes: int) -> list[str]:
    """Create ``demo.lineitem`` and ``demo.all_types`` when the warehouse has no tables at all.

    Returns the qualified names of the tables created (empty when the warehouse already had
    tables, when ``scale`` is 0 or less, which means "no demo", or when the warehouse is in
    object storage: the demo is for a first local try; `starscan load` fills a bucket).
    """
    if scale <= 0 or not warehouse.storage.is_local or not warehouse_is_empty(warehouse):
        return []
    db_path = warehouse.database_path(DEMO_DB)
    db_path.mkdir(parents=True, exist_ok=True)
    created = []
    write_lineitem(spark, str(warehouse.table_path(DEMO_DB, LINEITEM)), scale, tablet_target_bytes)
    warehouse.invalidate(DEMO_DB, LINEITEM)
    created.append(f"{DEMO_DB}.{LINEITEM}")
    write_all_types(spark, str(warehouse.table_path(DEMO_DB, ALL_TYPES)))
    warehouse.invalidate(DEMO_DB, ALL_TYPES)
    created.append(f"{DEMO_DB}.{ALL_TYPES}")
    return created


# ---- lineitem -----------------------------------------------------------------------------

def lineitem_orders(scale: float) -> int:
    return max(1, int(round(ORDERS_PER_SCALE * scale)))


def lineitem_files(scale: float, tablet_target_bytes: int) -> int:
    """Number of Parquet files for ``scale``: ~32 bytes a row, at least one."""
    rows = 4 * lineitem_orders(scale)
    return max(1, math.ceil(rows * LINEITEM_BYTES_PER_ROW / max(1, tablet_target_bytes)))


def lineitem_frame(spark: SparkSession, scale: float, num_partitions: int = 1) -> DataFrame:
    """The lineitem DataFrame for ``scale``; ``num_partitions`` contiguous order ranges."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    orders = lineitem_orders(scale)
    parts = max(1, int(round(200_000 * scale)))     # P: part keys 1..P
    supps = max(1, int(round(10_000 * scale)))      # S: supplier keys 1..S

    def rnd(key: Column, salt: int, low: int, high: int) -> Column:
        """A deterministic 'random' integer in [low, high] from a key column."""
        return F.pmod(F.hash(key, F.lit(salt)), F.lit(high - low + 1)) + F.lit(low)

    def pick(words: list[str], index: Column) -> Column:
        return F.element_at(F.array(*[F.lit(w) for w in words]), index.cast("int") + 1)

    def dec(cents: Column) -> Column:
        return (cents.cast("decimal(18,0)") / F.lit(100)).cast("decimal(15,2)")

    # Orders: index 0..N-1 -> sparse TPC-H order key (8 used keys out of every 32).
    o = F.col("id")
    order = spark.range(0, orders, 1, num_partitions).select(
        ((F.floor(o / 8) * 32) + F.pmod(o, F.lit(8)) + 1).cast("bigint").alias("l_orderkey"),
        rnd(o, 11, 1, 7).alias("n_lines"),
        F.date_add(F.lit(_START_DATE).cast("date"), rnd(o, 13, 0, _ORDER_DATE_DAYS - 1).cast("int")).alias("o_orderdate"),
    )
    lines = order.select(
        "l_orderkey", "o_orderdate",
        F.explode(F.sequence(F.lit(1), F.col("n_lines").cast("int"))).alias("l_linenumber"),
    )
    key = F.hash(F.col("l_orderkey"), F.col("l_linenumber"))
    partkey = rnd(key, 101, 1, parts).cast("bigint")
    supp_i = rnd(key, 103, 0, 3)
    quantity = rnd(key, 107, 1, 50)
    ship_offset = rnd(key, 109, 1, 121).cast("int")
    commit_offset = rnd(key, 113, 30, 90).cast("int")
    receipt_offset = rnd(key, 127, 1, 30).cast("int")
    current = F.lit(_CURRENT_DATE).cast("date")

    df = lines.select(
        "l_orderkey", "o_orderdate", "l_linenumber", key.alias("k"),
        partkey.alias("l_partkey"),
        supp_i.alias("supp_i"),
        quantity.alias("q"),
        F.date_add("o_orderdate", ship_offset).alias("l_shipdate"),
        F.date_add("o_orderdate", commit_offset).alias("l_commitdate"),
    ).withColumn("l_receiptdate", F.date_add("l_shipdate", receipt_offset))

    pk = F.col("l_partkey")
    # TPC-H: supplier i of a part, and the part's retail price in cents.
    suppkey = F.pmod(pk + F.col("supp_i") * (F.lit(supps // 4) + F.floor((pk - 1) / supps)), F.lit(supps)) + 1
    retail_cents = F.lit(90000) + F.pmod(F.floor(pk / 10), F.lit(20001)) + F.lit(100) * F.pmod(pk, F.lit(1000))
    k = F.col("k")
    n_words = rnd(k, 131, 2, 6).cast("int")
    words = F.array(*[pick(COMMENT_WORDS, rnd(k, 137 + i, 0, len(COMMENT_WORDS) - 1)) for i in range(6)])

    return df.select(
        F.col("l_orderkey"),
        pk.alias("l_partkey"),
        suppkey.cast("bigint").alias("l_suppkey"),
        F.col("l_linenumber").cast("int").alias("l_linenumber"),
        dec(F.col("q") * 100).alias("l_quantity"),
        dec(F.col("q") * retail_cents).alias("l_extendedprice"),
        dec(rnd(k, 149, 0, 10)).alias("l_discount"),
        dec(rnd(k, 151, 0, 8)).alias("l_tax"),
        F.when(F.col("l_receiptdate") <= current, F.when(rnd(k, 157, 0, 1) == 0, F.lit("R")).otherwise(F.lit("A")))
        .otherwise(F.lit("N")).alias("l_returnflag"),
        F.when(F.col("l_shipdate") > current, F.lit("O")).otherwise(F.lit("F")).alias("l_linestatus"),
        F.col("l_shipdate"),
        F.col("l_commitdate"),
        F.col("l_receiptdate"),
        pick(SHIP_INSTRUCT, rnd(k, 163, 0, len(SHIP_INSTRUCT) - 1)).alias("l_shipinstruct"),
        pick(SHIP_MODE, rnd(k, 167, 0, len(SHIP_MODE) - 1)).alias("l_shipmode"),
        F.array_join(F.slice(words, 1, n_words), " ").alias("l_comment"),
    )


def write_lineitem(spark: SparkSession, path: str, scale: float, tablet_target_bytes: int) -> None:
    # One range partition per output file: each file holds a contiguous run of order keys
    # (good min/max statistics), and no shuffle is needed.
    files = lineitem_files(scale, tablet_target_bytes)
    lineitem_frame(spark, scale, files).write.mode("overwrite").parquet(path)


# ---- all_types ----------------------------------------------------------------------------

ALL_TYPES_DDL = (
    "id int not null, c_bool boolean, c_tinyint tinyint, c_smallint smallint, c_int int, "
    "c_bigint bigint, c_float float, c_double double, c_decimal32 decimal(9,2), "
    "c_decimal64 decimal(18,4), c_decimal128 decimal(38,10), c_date date, c_datetime timestamp, "
    "c_datetime_ntz timestamp_ntz, c_string string, c_char string, c_varchar string, "
    "c_binary binary, c_array array<int>, c_map map<string,int>, c_struct struct<a:int,b:string>"
)
# Declared char/varchar types. Spark 4 refuses CharType/VarcharType in a DataFrame's schema
# (unless spark.sql.preserveCharVarcharTypeInfo is set); a table column declared CHAR(n) is
# a string column carrying this metadata, which `write.parquet` keeps in the footer's Spark
# schema, and `spark.read.parquet` returns it (and then pads CHAR values on read).
CHAR_VARCHAR = {"c_char": "char(10)", "c_varchar": "varchar(20)"}
CHAR_VARCHAR_KEY = "__CHAR_VARCHAR_TYPE_STRING"

_UTC = timezone.utc
# Literals, not arithmetic: Python's default decimal context rounds results to 28 digits.
_D38_MAX = Decimal("9999999999999999999999999999.9999999999")
_D38_MIN = Decimal("-9999999999999999999999999999.9999999999")


def all_types_rows() -> list[tuple[object, ...]]:
    """Eight rows: minimums, maximums, zeros/empties, all nulls, typical and odd values.

    ``c_datetime`` (an instant) stays within 1900-01-01 .. 9999-12-30 UTC: it must render
    inside years 1..9999 in every session time zone, and PySpark's ``collect`` cannot turn
    instants near 0001-01-01 into Python datetimes. ``c_datetime_ntz`` and ``c_date`` use
    the full 0001-01-01 .. 9999-12-31 range.
    """
    return [
        # 1: minimum values
        (1, False, -128, -32768, -2147483648, -9223372036854775808, -3.4028234663852886e38,
         -1.7976931348623157e308, Decimal("-9999999.99"), Decimal("-99999999999999.9999"), _D38_MIN,
         date(1, 1, 1), datetime(1900, 1, 1, 0, 0, 0, tzinfo=_UTC), datetime(1, 1, 1, 0, 0, 0),
         "a", "a", "a", b"\x00", [-2147483648], {"min": -2147483648}, (-2147483648, "min")),
        # 2: maximum values
        (2, True, 127, 32767, 2147483647, 9223372036854775807, 3.4028234663852886e38,
         1.7976931348623157e308, Decimal("9999999.99"), Decimal("99999999999999.9999"), _D38_MAX,
         date(9999, 12, 31), datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=_UTC),
         datetime(9999, 12, 31, 23, 59, 59, 999999),
         "zzzzzzzzzzzzzzzzzzzz", "zzzzzzzzzz", "zzzzzzzzzzzzzzzzzzzz", b"\xff" * 16,
         [2147483647], {"max": 2147483647}, (2147483647, "max")),
        # 3: zeros and empties
        (3, False, 0, 0, 0, 0, 0.0, 0.0, Decimal("0.00"), Decimal("0.0000"), Decimal("0E-10"),
         date(1970, 1, 1), datetime(1970, 1, 1, 0, 0, 0, tzinfo=_UTC), datetime(1970, 1, 1, 0, 0, 0),
         "", "", "", b"", [], {}, (0, "")),
        # 4: all nulls
        (4, None, None, None, None, None, None, None, None, None, None, None, None, None,
         None, None, None, None, None, None, None),
        # 5: typical values, non-ASCII text
        (5, True, 1, 1, 1, 1, 1.5, 3.141592653589793, Decimal("1234.56"), Decimal("12345678.9012"),
         Decimal("-1234567890123456789.0123456789"), date(2024, 2, 29),
         datetime(2024, 2, 29, 12, 34, 56, 789012, tzinfo=_UTC), datetime(2024, 2, 29, 12, 34, 56, 789012),
         "héllo wörld ✓ 日本", "日本", "héllo wörld ✓", "héllo".encode(),
         [1, 2, 3], {"a": 1, "b": 2}, (1, "x")),
        # 6: before 1970, special floats, null elements and fields
        (6, False, -1, -1, -1, -1, float("nan"), float("-inf"), Decimal("-0.01"), Decimal("-0.0001"),
         Decimal("-0.0000000001"), date(1900, 1, 1), datetime(1969, 7, 20, 20, 17, 40, tzinfo=_UTC),
         datetime(1969, 12, 31, 23, 59, 59, 999999), "tab\tnewline\nquote'\"", "x", "",
         bytes(range(256)), [None, 1, None], {"null": None, "one": 1}, (None, None)),
        # 7: more edges: -0.0, infinity, microseconds before 1970
        (7, True, 100, 1000, 100000, 10000000000, float("inf"), -0.0, Decimal("0.01"), Decimal("0.0001"),
         Decimal("0.0000000001"), date(1969, 12, 31), datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=_UTC),
         datetime(1900, 1, 1, 0, 0, 0), "emoji 🎉", "🎉", "Ünïcödé", b"\x00\x01\x02\xfe\xff",
         [None], {"k": 7}, (7, None)),
        # 8: some nulls, others ordinary
        (8, None, 42, None, 42, None, -1.25, None, Decimal("42.00"), None, Decimal("42.4200000000"),
         None, datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=_UTC), None, None, "padded", None,
         None, None, None, (None, "b only")),
    ]


def all_types_frame(spark: SparkSession) -> DataFrame:
    from pyspark.sql import functions as F

    schema = compat.struct_type(spark, ALL_TYPES_DDL)
    df = spark.createDataFrame(all_types_rows(), schema=schema)
    cols = []
    for field in schema.fields:
        col = F.col(field.name)
        declared = CHAR_VARCHAR.get(field.name)
        if declared is None:
            cols.append(col)
            continue
        if declared.startswith("char"):
            # CHAR(n) values are stored padded, as Spark's own table writes do.
            length = int(declared[5:-1])
            col = F.rpad(col, length, " ")
        cols.append(col.alias(field.name, metadata={CHAR_VARCHAR_KEY: declared}))
    return df.select(*cols)


def write_all_types(spark: SparkSession, path: str) -> None:
    df = all_types_frame(spark).coalesce(1)
    with compat.dates_written_as_they_are(spark):
        df.write.mode("overwrite").parquet(path)
