"""Predicates: Expr -> Spark Column (starscan/spark/columns.py). Tablet pruning on partition
values (planner/pruning.py) is tested in tests/unit/test_pruning.py.

The Column tests run each StarRocks WHERE clause through ``planner.sql.parse`` and
``to_column`` and compare the rows with what ``spark.sql`` returns for the same predicate in
Spark SQL.
"""

from __future__ import annotations

import ast
import inspect

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import types as T

from starscan import expr as E
from starscan.core.errors import PlanInvalid, SqlInvalid
from starscan.planner.sql import parse


def where(pred: str) -> E.Expr | None:
    return parse(f"select * from db1.t1 where {pred}", "db1", "t1").predicate


# =====================================================================================
# starscan/spark/columns.py
# =====================================================================================
COLUMNS = ["c_int", "c_long", "c_dec", "c_dbl", "c_str", "c_d", "c_ts", "c_bool"]
_CANONICAL = {c.lower(): c for c in COLUMNS}


def resolve(name: str) -> str:
    try:
        return _CANONICAL[name.lower()]
    except KeyError:
        raise LookupError(f"no column {name}") from None


# (c_int, c_long, c_dec, c_dbl, c_str, c_d, c_ts, c_bool); dates and timestamps as text, cast
# by Spark (in the session time zone, as a SQL literal would be).
ROWS = [
    (1, 1, "1.50", 0.1 + 0.2, "abc", "2020-01-01", "2020-01-01 12:00:00", True),
    (3, 3000000001, "2.20", 1.5, "a%b", "2020-01-02", "2020-01-02 00:00:00", False),
    (None, None, None, None, None, None, None, None),
    (-2147483648, -9223372036854775808, "-2.20", -1500.0, "a_c", "2020-01-03", "2019-12-31 23:59:59", None),
    (2147483647, 9007199254740992, "0.00", 0.3, "it's", "2021-06-30", "2020-01-01 00:00:00.5", True),
    (2, 9223372036854775807, "99999999.99", float("nan"), "ABC", None, "2021-06-30 08:15:00", False),
    (12, 2, "0.01", 2.0, "a\\b", "1999-12-31", None, True),
    (0, -5, "1.00", 0.0, "", "2020-01-01", "2020-01-01 12:00:00", None),
    (-7, 3000000000, None, 1e-3, "Abc", "2020-01-02", "2020-01-01 11:59:59.999999", False),
]


@pytest.fixture(scope="module")
def sess(spark):
    return spark


@pytest.fixture(scope="module")
def table(sess):
    from pyspark.sql import functions as F

    schema = T.StructType([
        T.StructField("c_int", T.IntegerType()),
        T.StructField("c_long", T.LongType()),
        T.StructField("c_dec", T.StringType()),
        T.StructField("c_dbl", T.DoubleType()),
        T.StructField("c_str", T.StringType()),
        T.StructField("c_d", T.StringType()),
        T.StructField("c_ts", T.StringType()),
        T.StructField("c_bool", T.BooleanType()),
    ])
    df = sess.createDataFrame(ROWS, schema).select(
        "c_int", "c_long", F.col("c_dec").cast("decimal(10,2)").alias("c_dec"), "c_dbl", "c_str",
        F.col("c_d").cast("date").alias("c_d"), F.col("c_ts").cast("timestamp").alias("c_ts"), "c_bool",
    ).cache()
    df.createOrReplaceTempView("starscan_pred_v")
    yield df
    sess.catalog.dropTempView("starscan_pred_v")
    df.unpersist()


def _rows(df) -> list[str]:
    return sorted(repr(r) for r in df.collect())


# (StarRocks predicate, Spark SQL predicate (None: same text), expected row count or None)
CASES = [
    # comparisons and literal typing
    ("c_int = 1", None, 1),
    ("c_int != 1", None, 7),
    ("c_int <> 1", "c_int != 1", 7),
    ("c_int <=> NULL", None, 1),
    ("NOT (c_int <=> 3)", None, 8),
    ("c_long > 3000000000", None, 3),          # bigint literal
    ("c_long = 3000000000", None, 1),
    ("c_long = 9007199254740993", None, 0),    # a double literal would match 9007199254740992
    ("c_long = -9223372036854775808", None, 1),
    ("c_int > -2147483648", None, 7),
    ("c_int = -2147483648", None, 1),
    ("c_int > - 5", None, 6),
    ("c_dec * 1.1 = 2.42", None, 1),           # decimal arithmetic; as doubles it would not be equal
    ("c_dec * 1.5 = 2.25", None, 1),
    ("c_dec = 1.50", None, 1),
    ("c_dec = 1.5", None, 1),
    ("c_dec > 0.001", None, 5),                # decimal(3,3)
    ("c_dec = 0012.50", None, 0),
    ("c_dec = 99999999.99", None, 1),
    ("c_dbl = 0.1 + 0.2", None, 1),            # decimal 0.3 -> double 0.3: only the 0.3 row
    ("c_dbl = 1e-3", None, 1),
    ("c_dbl = -1.5e3", None, 1),
    ("c_dbl > 1", None, 3),                    # NaN is larger than any double in Spark
    ("c_int / 2 = 1.5", None, 1),              # Divide, not integral division
    ("c_int div 2 = 1", None, 2),
    ("c_int % 5 = 2", None, 3),
    ("-c_dec = -2.20", None, 1),
    ("-(c_dbl) < 0", None, 5),
    ("cast(c_int as bigint) * 1000000000 > 2000000000", None, 3),
    ("c_int = 00012", None, 1),
    # logic and NULL semantics
    ("c_int = 1 and c_str = 'abc' or c_dbl > 1", None, 4),
    ("not (c_int = 1 or c_int is null)", None, 7),
    ("c_int is null", None, 1),
    ("c_int is not null", None, 8),
    ("c_int in (1, 2, null)", None, 2),
    ("c_int not in (1, null)", None, 0),
    ("c_int not in (1, 2)", None, 6),
    ("c_int in (1.0, 3.5)", None, 1),
    ("c_int between 1 and 3", None, 3),
    ("c_int not between 1 and 3", None, 5),
    ("c_dec between 1.5 and 2.2", None, 2),
    ("c_bool", None, 3),
    ("not c_bool", None, 3),
    ("c_bool is true", "c_bool <=> true", 3),
    ("c_bool is not false", "not (c_bool <=> false)", 6),
    ("c_bool = true", None, 3),
    ("(c_int = 1) is true", "(c_int = 1) <=> true", 1),
    ("c_int > null", None, 0),
    # strings, LIKE
    ("c_str = 'abc'", None, 1),
    ("c_str = \"abc\"", None, 1),
    ("c_str = 'it''s'", "c_str = \"it's\"", 1),
    ("c_str = 'a\\\\b'", None, 1),
    ("c_str = ''", None, 1),
    ("c_str in ('abc', 'ABC', 'x')", None, 2),
    ("c_str like 'a%'", None, 4),
    ("c_str not like 'a%'", None, 4),
    ("c_str like 'a!%%' escape '!'", None, 1),
    ("c_str like 'a\\\\_c'", None, 1),
    ("c_str like 'a_c'", None, 2),
    ("c_str ilike 'A%'", None, 6),
    ("c_str not ilike 'a%'", None, 2),
    ("c_str regexp '^a.c$'", "c_str rlike '^a.c$'", 2),
    ("c_str > 'a'", None, 5),
    # dates, timestamps, casts
    ("c_d = '2020-01-01'", None, 2),
    ("c_d = date '2020-01-01'", None, 2),
    ("c_d >= '2020-01-02' and c_d < '2021-01-01'", None, 3),
    ("c_d in ('2020-01-01', '2020-01-03')", None, 3),
    ("c_ts > timestamp '2020-01-01 12:00:00'", None, 2),
    ("c_ts >= cast('2020-01-02' as datetime)", "c_ts >= cast('2020-01-02' as timestamp)", 2),
    ("c_ts between '2020-01-01' and '2020-01-01 12:00:00'", None, 4),
    ("cast(c_ts as date) = '2020-01-01'", None, 4),
    ("cast(c_int as string) = '12'", None, 1),
    ("cast(c_int as varchar(10)) = '12'", "cast(c_int as string) = '12'", 1),
    ("cast(c_dbl as decimal(10, 2)) = 1.50", None, 1),
    ("cast(c_dec as int) = 2", None, 1),
    # functions and CASE
    ("coalesce(c_int, 0) = 0", None, 2),
    ("ifnull(c_int, -1) = -1", "coalesce(c_int, -1) = -1", 1),
    ("lower(c_str) = 'abc'", None, 3),
    ("upper(c_str) = 'ABC'", None, 3),
    ("length(c_str) = 3", None, 6),
    ("substring(c_str, 2, 2) = 'bc'", None, 2),
    ("concat(c_str, 'x') = 'abcx'", None, 1),
    ("abs(c_dec) = 2.2", None, 2),
    ("round(c_dbl, 1) = 0.3", None, 2),
    ("year(c_d) = 2020", None, 5),
    ("month(c_ts) = 6", None, 1),
    ("hour(c_ts) = 12", None, 2),
    ("if(c_int > 1, 'y', 'n') = 'y'", None, 4),
    ("greatest(c_int, 2) = 2", None, 6),
    ("nullif(c_int, 1) is null", None, 2),
    ("case when c_int > 2 then 'big' when c_int > 0 then 'small' else 'neg' end = 'small'", None, 2),
    ("case when c_int > 2 then 1 end is null", None, 6),
    ("case when c_bool then c_dec else 0 end > 1", None, 1),
]


@pytest.mark.parametrize("starrocks, spark_sql, expected", CASES, ids=[c[0] for c in CASES])
def test_column_matches_spark_sql(sess, table, starrocks, spark_sql, expected):
    from starscan.spark.columns import to_column

    predicate = where(starrocks)
    ours = _rows(table.filter(to_column(predicate, resolve)))
    theirs = _rows(sess.sql(f"select * from starscan_pred_v where {spark_sql or starrocks}"))
    assert ours == theirs
    if expected is not None:
        assert len(ours) == expected


# Literal typing: the select item's type equals the type Spark's SQL parser gives it.
LITERALS = [
    "1", "0", "2147483647", "2147483648", "-2147483648", "-2147483649", "9223372036854775807",
    "-9223372036854775808", "9223372036854775808", "12345678901234567890", "1.50", "-1.50",
    "0.001", "0012.50", "1.", ".5", "0.00", "- 0.5", "1e3", "-1.5e3", "1.5E-3", "'x'", "true",
    "false", "12345678901234567890123456789012345678", "1234567890123456789012345678.9012345678",
]


@pytest.mark.parametrize("text", LITERALS)
def test_literal_types_match_spark_parser(sess, text):
    from starscan.spark.columns import to_column

    item = parse(f"select {text} as x from db1.t1", "db1", "t1").items[0]
    ours = sess.range(1).select(to_column(item.expr, resolve).alias("x"))
    theirs = sess.sql(f"select {text} as x")
    assert ours.schema["x"].dataType == theirs.schema["x"].dataType
    assert ours.collect() == theirs.collect()


def test_null_literal_is_void(sess):
    from starscan.spark.columns import to_column

    item = parse("select null as x from db1.t1", "db1", "t1").items[0]
    assert sess.range(1).select(to_column(item.expr, resolve).alias("x")).schema["x"].dataType == T.NullType()


def test_column_names_resolve_case_insensitively_and_quoted(sess):
    from starscan.spark.columns import to_column

    df = sess.createDataFrame([(1, 2), (3, 4)], "`a.b` int, `We ird` int")
    canon = {"a.b": "a.b", "we ird": "We ird"}
    pred = E.op("and", E.op(">", E.column("A.B"), E.literal("int", "0")),
                E.op("=", E.column("WE IRD"), E.literal("int", "4")))
    assert df.filter(to_column(pred, lambda n: canon[n.lower()])).collect() == [(3, 4)]


def test_resolve_errors_propagate(sess):
    from starscan.spark.columns import to_column

    with pytest.raises(LookupError):
        to_column(where("no_such = 1"), resolve)


def test_too_large_numeric_literals_are_invalid_sql(sess):
    from starscan.spark.columns import to_column

    for text in ("123456789012345678901234567890123456789", "1.23456789012345678901234567890123456789", "1e400"):
        with pytest.raises(SqlInvalid):
            to_column(where(f"c_dbl = {text}"), resolve)
        with pytest.raises(PySparkException):
            sess.sql(f"select * from starscan_pred_v where c_dbl = {text}").collect()


@pytest.mark.parametrize("name", [
    "reflect", "java_method", "try_reflect", "REFLECT", "input_file_name", "input_file_block_start",
    "input_file_block_length", "my_reflect_fn", "no_such_function", "default.lower", "`lower`", "",
])
def test_disallowed_functions_raise_sql_invalid(sess, name):
    from starscan.spark.columns import to_column

    node = E.Expr("func", name=name, children=(E.literal("string", "java.lang.System"), E.literal("string", "exit")))
    with pytest.raises(SqlInvalid):
        to_column(node, resolve)


def test_sql_rejects_reflect_before_planning():
    with pytest.raises(SqlInvalid):
        where("reflect('java.lang.Math', 'abs', c_int) = 1")


@pytest.mark.parametrize("node", [
    lambda: E.Expr("lambda", children=(E.column("c_int"),)),
    lambda: E.op("^", E.column("c_int"), E.literal("int", "1")),
    lambda: E.op("=", E.column("c_int")),
    lambda: E.op("not"),
    lambda: E.literal("int128", "1"),
    lambda: E.literal("int", "abc"),
    lambda: E.literal("int", "3000000000"),
    lambda: E.literal("boolean", "yes"),
    lambda: E.Expr("like", name="similar", children=(E.column("c_str"), E.literal("string", "a"))),
    lambda: E.Expr("in", children=(E.column("c_int"),)),
    lambda: E.Expr("case", children=(E.literal("boolean", "true"),)),
    lambda: E.Expr("case", name="else", children=()),
    lambda: E.Expr("cast", children=(E.column("c_int"),)),
])
def test_malformed_nodes_raise_plan_invalid(sess, node):
    """Refused where the node is built (its kind, operator, literal type or operands) or,
    for a value the literal's type cannot hold, where Spark's column is built."""
    from starscan.spark.columns import to_column

    with pytest.raises(PlanInvalid):
        to_column(node(), resolve)


def test_unknown_cast_type_is_invalid_sql(sess):
    from starscan.spark.columns import to_column

    with pytest.raises(SqlInvalid):
        to_column(where("cast(c_str as largeint) = 1"), resolve)


def test_flattened_plan_round_trip_filters_the_same(sess, table):
    from starscan.spark.columns import to_column

    pred = where("c_int not in (1, 2) and c_str like 'a!%%' escape '!' or c_d = date '2020-01-01'")
    again = E.unflatten(E.flatten(pred))
    assert _rows(table.filter(to_column(again, resolve))) == _rows(table.filter(to_column(pred, resolve)))


def test_no_sql_text_reaches_spark():
    from starscan.spark import columns as spark_expr

    tree = ast.parse(inspect.getsource(spark_expr))
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not used & {"expr", "selectExpr", "sql", "filter", "where"}


# ---- functions whose StarRocks spelling differs from Spark's (planner/sql.py special cases)
@pytest.mark.parametrize(
    "starrocks, spark_sql",
    [
        ("ltrim(s) = 'ab  '", "ltrim(s) = 'ab  '"),
        ("rtrim(s) = '  ab'", "rtrim(s) = '  ab'"),
        ("trim(both 'x' from t) = 'ab'", "trim(BOTH 'x' FROM t) = 'ab'"),
        ("trim(leading 'x' from t) = 'abxx'", "trim(LEADING 'x' FROM t) = 'abxx'"),
        ("log10(n) = 3", "log10(n) = 3"),
        ("log2(n) = 10", "log2(n) = 10"),
        ("initcap(t) = 'Xxabxx'", "initcap(t) = 'Xxabxx'"),
    ],
)
def test_renamed_functions_filter_like_spark(spark, starrocks, spark_sql):
    from pyspark.sql import Row

    from starscan.planner.sql import parse
    from starscan.spark.columns import to_column

    df = spark.createDataFrame([Row(s="  ab  ", t="xxabxx", n=1000), Row(s="ab", t="ab", n=1024), Row(s=None, t=None, n=None)])
    df.createOrReplaceTempView("renamed_funcs")
    pred = parse(f"select * from db1.t1 where {starrocks}", "db1", "t1").predicate
    got = sorted(map(tuple, df.filter(to_column(pred, lambda n: n)).collect()), key=repr)
    want = sorted(map(tuple, spark.sql(f"select * from renamed_funcs where {spark_sql}").collect()), key=repr)
    assert got == want and 1 <= len(want) < 3  # some rows match, not all


@pytest.mark.parametrize("literal", ["1e400", "-1e400", "1" * 39, "0." + "1" * 39])
def test_out_of_range_literals_are_invalid_sql(literal):
    from starscan.core.errors import SqlInvalid
    from starscan.planner.sql import parse

    with pytest.raises(SqlInvalid):
        parse(f"select * from db1.t1 where a = {literal}", "db1", "t1")


# ---- every function the FE accepts runs on Spark and filters as spark.sql does
FUNCTION_CALLS = [
    "ltrim(s)", "rtrim(s)", "trim(s)", "lpad(s, 6, 'x')", "rpad(s, 6, 'x')", "repeat(s, 2)", "ascii(s)",
    "char_length(s)", "character_length(s)", "length(s)", "lower(s)", "upper(s)", "reverse(s)",
    "substring(s, 2, 2)", "concat(s, 'x')", "left(s, 2)", "right(s, 2)", "instr(s, 'b')", "locate('b', s)",
    "startswith(s, 'a')", "endswith(s, 'b')", "contains(s, 'b')", "isnull(s)", "isnotnull(s)",
    "nvl(s, 'z')", "ifnull(s, 'z')", "nvl2(s, 1, 2)", "coalesce(s, 'z')", "nullif(s, 'ab')", "if(n > 1, 1, 2)",
    "hex(s)", "md5(s)", "sha1(s)", "sha2(s, 256)", "crc32(s)", "bit_length(s)", "octet_length(s)",
    "regexp_replace(s, 'b', 'c')", "split_part(s, 'b', 1)", "initcap(s)",
    "abs(n)", "sign(n)", "floor(n)", "ceil(n)", "round(n)", "sqrt(n)", "ln(n)", "exp(n)", "pow(n, 2)",
    "mod(n, 2)", "pmod(n, 2)", "positive(n)", "negative(n)", "greatest(n, 2)", "least(n, 2)",
    "log10(n)", "log2(n)", "log(3, n)", "strleft(s, 1)", "strright(s, 1)", "unhex(s)",
    "year(d)", "month(d)", "day(d)", "dayofmonth(d)", "dayofyear(d)", "dayofweek(d)", "weekofyear(d)",
    "quarter(d)", "last_day(d)", "datediff(d, d)", "to_date(ts)", "hour(ts)", "minute(ts)", "second(ts)",
    "unix_timestamp(ts)", "from_unixtime(n)", "weekday(d)",
    "size(a)", "cardinality(a)", "element_at(a, 1)", "array_contains(a, 1)", "array_max(a)", "array_min(a)",
    "map_keys(m)", "map_values(m)",
]


@pytest.fixture(scope="module")
def function_table(spark):
    import datetime as dt

    from pyspark.sql import Row

    rows = [
        Row(s="ab", n=4, d=dt.date(2024, 2, 10), ts=dt.datetime(2024, 2, 10, 1, 2, 3), a=[1, 2], m={"k": 1}),
        Row(s="xbz", n=1, d=dt.date(1969, 12, 31), ts=dt.datetime(1969, 12, 31, 23, 0, 0), a=[3], m={"j": 2}),
        Row(s=None, n=None, d=None, ts=None, a=None, m=None),
    ]
    df = spark.createDataFrame(rows, "s string, n int, d date, ts timestamp, a array<int>, m map<string,int>")
    df.createOrReplaceTempView("function_rows")
    return df


@pytest.mark.parametrize("call", FUNCTION_CALLS)
def test_every_accepted_function_filters_like_spark(spark, function_table, call):
    from starscan.planner.sql import parse
    from starscan.spark.columns import to_column

    pred = parse(f"select * from db1.t1 where ({call}) is not null", "db1", "t1").predicate
    got = sorted(map(repr, function_table.filter(to_column(pred, lambda n: n)).collect()))
    spark_call = call.replace("strleft(", "left(").replace("strright(", "right(")  # StarRocks-only spellings
    want = sorted(map(repr, spark.sql(f"select * from function_rows where ({spark_call}) is not null").collect()))
    assert got == want


def test_function_whitelist_is_covered():
    """Every function name the FE can emit is exercised above (or by a special case)."""
    from starscan.expr.functions import SPARK_FUNCTIONS

    text = " ".join(FUNCTION_CALLS)
    special = {"rlike", "ilike", "like", "div", "instr", "to_date", "length", "coalesce"}
    missing = {f for f in SPARK_FUNCTIONS if f + "(" not in text and f not in special}
    assert not missing, f"functions without a Spark check: {sorted(missing)}"
