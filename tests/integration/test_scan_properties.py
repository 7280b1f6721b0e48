"""Property: for random projections, WHERE predicates and batch sizes, starscan returns exactly
the multiset of rows ``spark.sql`` returns for the same SQL text over the table's files.

The SQL is built once as a template; the StarRocks request names the table `db`.`table`,
Spark's names parquet.`<table path>`. Spark's dates and timestamps are turned into the
StarRocks text forms before comparing (docs/protocol.md 5.2).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from decimal import Decimal
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

# Strategies over the sampled data values have long reprs; Hypothesis warns about that.
pytestmark = [pytest.mark.filterwarnings("ignore:Generating overly large repr"), pytest.mark.usefixtures("engine")]

PROPERTY_SETTINGS = settings(
    max_examples=25, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
# Queries over the 60k-row lineitem cost ~0.9 s each (Spark's answer and ours): fewer of them.
LINEITEM_SETTINGS = settings(PROPERTY_SETTINGS, max_examples=15)
MAX_BATCH = 65536

# Literal kinds of the scalar columns a predicate may use.
INTEGRAL = {T.ByteType: (-(2**7), 2**7 - 1), T.ShortType: (-(2**15), 2**15 - 1),
            T.IntegerType: (-(2**31), 2**31 - 1), T.LongType: (-(2**63), 2**63 - 1)}
SAFE_TEXT = "abcdefxyzAZ09 -éü日本🎉"


# ---- canonical values ---------------------------------------------------------------------
def _float(value: float):
    return ("float", "nan" if math.isnan(value) else repr(value))


def canon_spark(value, data_type, zone: str):
    if value is None:
        return None
    if isinstance(data_type, T.DateType):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if isinstance(data_type, T.TimestampType):  # naive local datetime of an instant
        return value.astimezone(ZoneInfo(zone)).replace(tzinfo=None).isoformat(sep=" ")
    if isinstance(data_type, T.TimestampNTZType):
        return value.isoformat(sep=" ")
    if isinstance(data_type, (T.FloatType, T.DoubleType)):
        return _float(value)
    if isinstance(data_type, T.BinaryType):
        return bytes(value)
    if isinstance(data_type, T.ArrayType):
        return tuple(canon_spark(v, data_type.elementType, zone) for v in value)
    if isinstance(data_type, T.MapType):
        return tuple(sorted((canon_spark(k, data_type.keyType, zone), canon_spark(v, data_type.valueType, zone))
                            for k, v in value.items()))
    if isinstance(data_type, T.StructType):
        return tuple(canon_spark(value[i], f.dataType, zone) for i, f in enumerate(data_type.fields))
    return value


def canon_arrow(value, arrow_type: pa.DataType):
    if value is None:
        return None
    if pa.types.is_floating(arrow_type):
        return _float(value)
    if pa.types.is_map(arrow_type):
        return tuple(sorted((canon_arrow(k, arrow_type.key_type), canon_arrow(v, arrow_type.item_type))
                            for k, v in value))
    if pa.types.is_list(arrow_type):
        return tuple(canon_arrow(v, arrow_type.value_type) for v in value)
    if pa.types.is_struct(arrow_type):
        return tuple(canon_arrow(value[f.name], f.type) for f in arrow_type)
    return value


# ---- literals -------------------------------------------------------------------------------
def sql_string(text: str) -> str:
    assert "'" not in text and "\\" not in text
    return f"'{text}'"


def safe_text(text) -> bool:
    return isinstance(text, str) and "'" not in text and "\\" not in text and all(ch >= " " for ch in text)


def render_date(value: dt.date) -> str:
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"


def render(data_type, value) -> str:
    """The SQL literal of a Python value of the column's type (same text for both parsers)."""
    if isinstance(data_type, T.DecimalType):
        return format(value, "f")
    if isinstance(data_type, (T.FloatType, T.DoubleType)):
        if math.isnan(value):
            return "CAST('NaN' AS DOUBLE)"
        if math.isinf(value):
            return "CAST('Infinity' AS DOUBLE)" if value > 0 else "CAST('-Infinity' AS DOUBLE)"
        return repr(float(value)).upper()  # 1.5E+38: a double literal; 1.5: a decimal one
    if isinstance(data_type, T.DateType):
        # Both spellings: a DATE literal, or a string Spark casts for the comparison.
        return f"DATE '{render_date(value)}'" if value.day % 2 else sql_string(render_date(value))
    if isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(data_type, T.StringType):
        return sql_string(value)
    if isinstance(data_type, T.BooleanType):
        return "true" if value else "FALSE"
    return str(value)  # integral


def value_strategy(data_type, samples: list, zone: str):
    """Python values of the column's type: mostly values the data holds (so comparisons,
    IN lists and BETWEEN bounds hit rows), sometimes anything of the type."""
    kind = type(data_type)

    def mostly(seen: list, anything):
        seen = st.sampled_from(seen)
        return st.one_of(seen, seen, seen, anything)

    if kind in INTEGRAL:
        lo, hi = INTEGRAL[kind]
        near = sorted({v + d for v in samples for d in (-1, 0, 1) if lo <= v + d <= hi})
        return mostly(near, st.integers(lo, hi))
    if isinstance(data_type, T.DecimalType):
        p, s = data_type.precision, data_type.scale
        anything = st.builds(lambda i, places: Decimal(i).scaleb(-places), st.integers(-(10**p) + 1, 10**p - 1),
                             st.integers(0, s))
        return mostly(samples, anything)
    if isinstance(data_type, (T.FloatType, T.DoubleType)):
        width = 32 if isinstance(data_type, T.FloatType) else 64
        special = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5]
        return mostly(samples + special, st.floats(width=width, allow_nan=False, allow_infinity=False))
    if isinstance(data_type, T.DateType):
        return mostly(samples, st.dates())
    if isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):
        if isinstance(data_type, T.TimestampType):  # instants: as wall clock of the server zone
            samples = [v.astimezone(ZoneInfo(zone)).replace(tzinfo=None) for v in samples]
        return mostly(samples, st.datetimes(min_value=dt.datetime(1900, 1, 2), max_value=dt.datetime(9999, 12, 29)))
    if isinstance(data_type, T.StringType):
        return mostly([v for v in samples if safe_text(v)] or [""], st.text(alphabet=SAFE_TEXT, max_size=12))
    if isinstance(data_type, T.BooleanType):
        return st.booleans()
    raise AssertionError(f"no literals for {data_type}")


def ordered(a, b) -> tuple:
    try:
        if not (a != a or b != b):  # NaN has no place in an order
            return (a, b) if a <= b else (b, a)
    except TypeError:
        pass
    return a, b


@st.composite
def like_pattern(draw, samples: list):
    texts = [v for v in samples if safe_text(v) and v]
    base = draw(st.sampled_from(texts)) if texts and draw(st.booleans()) else draw(st.text(alphabet=SAFE_TEXT, max_size=8))
    form = draw(st.integers(0, 4))
    if form == 0 and base:
        i = draw(st.integers(0, len(base)))
        pattern = base[:i] + "%"
    elif form == 1 and base:
        i = draw(st.integers(0, len(base)))
        j = draw(st.integers(i, len(base)))
        pattern = "%" + base[i:j] + "%"
    elif form == 2 and base:
        i = draw(st.integers(0, len(base) - 1))
        pattern = base[:i] + "_" + base[i + 1:]
    elif form == 3:
        pattern = draw(st.text(alphabet=SAFE_TEXT + "%_", max_size=8))
    else:
        pattern = base
    return sql_string(pattern)


def quoted(name: str) -> str:
    return f"`{name}`"


@st.composite
def atom(draw, columns: dict, samples: dict, zone: str):
    form = draw(st.sampled_from(["cmp", "cmp", "in", "between", "like", "null"]))
    if form == "null":
        name = draw(st.sampled_from(sorted(columns)))
        return f"{quoted(name)} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if form == "like":
        name = draw(st.sampled_from(sorted(c for c, t in columns.items() if isinstance(t, T.StringType))))
        neg = draw(st.sampled_from(["", "NOT "]))
        return f"{quoted(name)} {neg}LIKE {draw(like_pattern(samples[name]))}"
    name = draw(st.sampled_from(sorted(c for c, t in columns.items() if not isinstance(t, T.BinaryType))))
    data_type, col = columns[name], quoted(name)
    values = value_strategy(data_type, samples[name], zone)
    lit = values.map(lambda v: render(data_type, v))
    if form == "cmp":
        op = draw(st.sampled_from(["=", "!=", "<>", "<", "<=", ">", ">=", "<=>"]))
        return f"{col} {op} {draw(lit)}"
    if form == "in":
        items = draw(st.lists(st.one_of(lit, lit, lit, st.just("NULL")), min_size=1, max_size=4))
        neg = draw(st.sampled_from(["", "NOT "]))
        return f"{col} {neg}IN ({', '.join(items)})"
    lo, hi = draw(values), draw(values)
    if draw(st.integers(0, 3)):  # mostly low <= high, so the range holds rows
        lo, hi = ordered(lo, hi)
    neg = draw(st.sampled_from(["", "NOT "]))
    return f"{col} {neg}BETWEEN {render(data_type, lo)} AND {render(data_type, hi)}"


def predicate(columns: dict, samples: dict, zone: str):
    leaves = atom(columns, samples, zone)
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda t: f"({t[0]}) AND ({t[1]})"),
            st.tuples(inner, inner).map(lambda t: f"({t[0]}) OR ({t[1]})"),
            inner.map(lambda p: f"NOT ({p})"),
        ),
        max_leaves=5,
    )


# ---- tables ---------------------------------------------------------------------------------
class TableInfo:
    """A table the properties query, and where Spark SQL's answer comes from: its folder read
    as plain Parquet, or (``oracle_view``) a temporary view of the rows an independent
    reader of the table format gives (a lakehouse table's files hold deleted rows)."""

    def __init__(self, spark, server, db: str, table: str, sample_fraction: float | None, pushdown: bool = True,
                 oracle_view: str | None = None):
        self.db, self.table = db, table
        # The session Spark SQL's answer comes from. Without filter pushdown for tables whose
        # row groups hold NaN: Spark's semantics order NaN above every number, but its Parquet
        # pushdown prunes by statistics that leave NaN out (starscan.spark.session.scan_session).
        self.reference = spark
        if not pushdown:
            self.reference = spark.newSession()
            self.reference.conf.set("spark.sql.parquet.filterPushdown", "false")
        self.zone = server.settings.time_zone
        self.path = str(server.warehouse.table_path(db, table))
        self.source = oracle_view or f"parquet.`{self.path}`"
        df = spark.table(oracle_view) if oracle_view else spark.read.parquet(self.path)
        self.schema = df.schema
        self.columns = [f.name for f in df.schema.fields]
        self.scalar = {f.name: f.dataType for f in df.schema.fields
                       if not isinstance(f.dataType, (T.ArrayType, T.MapType, T.StructType))}
        rows = (df.sample(fraction=sample_fraction, seed=7) if sample_fraction else df).collect()
        ordered = [c for c, t in self.scalar.items() if not isinstance(t, T.BinaryType)]
        extremes = df.selectExpr(*[f"min(`{c}`) as `min_{c}`" for c in ordered],
                                 *[f"max(`{c}`) as `max_{c}`" for c in ordered]).collect()[0]
        self.samples: dict[str, list] = {}
        for name in ordered:
            values = {r[name] for r in rows if r[name] is not None}
            values |= {v for v in (extremes[f"min_{name}"], extremes[f"max_{name}"]) if v is not None}
            self.samples[name] = sorted(values, key=repr)

    def sql(self, columns: list[str], where: str) -> str:
        return f"select {', '.join(quoted(c) for c in columns)} from {{table}} where {where}"


def run_both(spark, client, info: TableInfo, template: str, batch_size: int):
    sr_sql = template.format(table=f"`{info.db}`.`{info.table}`")
    spark_sql = template.format(table=info.source)
    df = info.reference.sql(spark_sql)
    want = Counter(tuple(canon_spark(v, f.dataType, info.zone) for v, f in zip(r, df.schema.fields))
                   for r in df.collect())
    batches = list(client.batches(info.db, info.table, sr_sql, batch_size=batch_size))
    got: Counter = Counter()
    for b in batches:
        assert 1 <= b.num_rows <= batch_size, (b.num_rows, batch_size)
        assert b.schema.names == df.columns
        types = [f.type for f in b.schema]
        for row in zip(*(col.to_pylist() for col in b.columns)):
            got[tuple(canon_arrow(v, t) for v, t in zip(row, types))] += 1
    return got, want, sr_sql


def columns_strategy(names: list[str]):
    return st.permutations(names).flatmap(lambda perm: st.integers(1, len(perm)).map(lambda k: list(perm[:k])))


@pytest.fixture(scope="module")
def all_types(spark, server) -> TableInfo:
    return TableInfo(spark, server, "demo", "all_types", None)


@pytest.fixture(scope="module")
def lineitem(spark, server) -> TableInfo:
    return TableInfo(spark, server, "demo", "lineitem", 0.01)


FLOAT_SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, None, 1.5, -1.5, 3.4028234663852886e38, 5e-324]


@pytest.fixture(scope="module")
def floats(spark, server) -> TableInfo:
    """props.floats: FLOAT and DOUBLE columns holding NaN, infinities, -0.0 and NULLs among
    ordinary values, written by pyarrow in row groups of 8 rows, so that the row groups'
    statistics (which leave NaN out) prune: every path must still give Spark's semantics."""
    import random

    import pyarrow.parquet as pq

    rng = random.Random(35)
    values = [rng.choice(FLOAT_SPECIALS) if rng.random() < 0.3 else round(rng.uniform(-1000, 1000), rng.choice([0, 2]))
              for _ in range(400)]
    location = server.warehouse.table_path("props", "floats")
    location.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "id": pa.array(range(len(values)), pa.int32()),
        "x": pa.array(values, pa.float64()),
        "f": pa.array(values, pa.float32()),
        "k": pa.array([i % 5 for i in range(len(values))], pa.int64()),
        "s": pa.array([f"v{i % 7}" if i % 11 else None for i in range(len(values))], pa.string()),
    }), location / "part-0.parquet", row_group_size=8)
    server.warehouse.invalidate("props", "floats")
    return TableInfo(spark, server, "props", "floats", None, pushdown=False)


@pytest.fixture(scope="module")
def lake_delta(spark, server) -> TableInfo:
    """props.lake_delta: a Delta table with column mapping, partitioned (so its partition
    values are only in the log), some rows of each file deleted by deletion vectors (inline
    and in a file). Spark SQL's answer is over delta-rs' rows of it."""
    from deltalake import DeltaTable, QueryBuilder, write_deltalake
    from support.delta_log import add_table_features, commit_deletion_vectors, inline_vector, stored_vector

    location = server.warehouse.table_path("props", "lake_delta")
    location.parent.mkdir(parents=True, exist_ok=True)

    def rows(first: int, n: int) -> pa.Table:
        ids = list(range(first, first + n))
        return pa.table({
            "id": pa.array(ids, pa.int64()), "qty": pa.array([i % 17 - 8 for i in ids], pa.int32()),
            "price": pa.array([None if i % 23 == 0 else round(i * 0.37, 2) for i in ids], pa.float64()),
            "name": pa.array([None if i % 19 == 0 else f"n{i % 40}" for i in ids], pa.string()),
            "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i % 45) for i in ids], pa.date32()),
            "p": pa.array([None if i % 29 == 0 else ["north", "south", "a%20b"][i % 3] for i in ids], pa.string())})

    write_deltalake(str(location), rows(0, 300), partition_by=["p"], configuration={"delta.columnMapping.mode": "name"})
    write_deltalake(str(location), rows(1000, 300), partition_by=["p"], mode="append")
    add_table_features(location, ["deletionVectors"])  # delta-rs' own upgrade fails with mapped partitions
    adds = pa.table(DeltaTable(str(location)).get_add_actions(flatten=False)).to_pylist()
    vectors = {}
    for n, add in enumerate(sorted(adds, key=lambda a: a["path"])[:4]):
        positions = list(range(n % 3, add["num_records"], 4))
        vectors[add["path"]] = inline_vector(positions) if n % 2 else stored_vector(location, positions, "u")
    commit_deletion_vectors(location, vectors, {a["path"]: a["num_records"] for a in adds})
    oracle = pa.table(QueryBuilder().register("t", DeltaTable(str(location)))
                      .execute("select id, qty, price, name, day, p from t").read_all())
    assert 500 < oracle.num_rows < 600
    spark.createDataFrame(oracle.to_pylist(), "id long, qty int, price double, name string, day date, p string") \
        .createOrReplaceTempView("props_lake_delta_oracle")
    server.warehouse.invalidate("props", "lake_delta")
    snap = server.warehouse.snapshot("props", "lake_delta")
    assert snap.file_columns and snap.partitions_recorded  # mapped names, values from the log
    return TableInfo(spark, server, "props", "lake_delta", None, oracle_view="props_lake_delta_oracle")


def check(spark, client, info: TableInfo, columns, where, batch_size):
    template = info.sql(columns, where)
    got, want, sr_sql = run_both(spark, client, info, template, batch_size)
    missing, extra = want - got, got - want
    assert not missing and not extra, (
        f"{sr_sql} (batch_size={batch_size}): {sum(missing.values())} rows missing, e.g. {list(missing)[:3]}; "
        f"{sum(extra.values())} extra, e.g. {list(extra)[:3]}")


# ---- properties -----------------------------------------------------------------------------
@PROPERTY_SETTINGS
@given(data=st.data())
def test_all_types_random_queries_match_spark(spark, client, all_types, data):
    info = all_types
    columns = data.draw(columns_strategy(info.columns), label="columns")
    where = data.draw(predicate(info.scalar, info.samples, info.zone), label="where")
    batch_size = data.draw(st.one_of(st.integers(1, 10), st.integers(1, 70000).map(lambda n: min(n, MAX_BATCH))),
                           label="batch_size")
    check(spark, client, info, columns, where, batch_size)


@LINEITEM_SETTINGS
@given(data=st.data())
def test_lineitem_random_queries_match_spark(spark, client, lineitem, data):
    info = lineitem
    columns = data.draw(columns_strategy(info.columns), label="columns")
    where = data.draw(predicate(info.scalar, info.samples, info.zone), label="where")
    batch_size = data.draw(st.one_of(st.integers(500, 8192), st.integers(500, 70000).map(lambda n: min(n, MAX_BATCH))),
                           label="batch_size")
    check(spark, client, info, columns, where, batch_size)


@PROPERTY_SETTINGS
@given(data=st.data())
def test_float_random_queries_match_spark_across_pruned_row_groups(spark, client, floats, data):
    info = floats
    columns = data.draw(columns_strategy(info.columns), label="columns")
    where = data.draw(predicate(info.scalar, info.samples, info.zone), label="where")
    batch_size = data.draw(st.integers(1, 500), label="batch_size")
    check(spark, client, info, columns, where, batch_size)


@LINEITEM_SETTINGS
@given(data=st.data())
def test_lakehouse_table_random_queries_match_spark(spark, client, lake_delta, data):
    """Deletion vectors, column mapping and partition values from the log under random
    projections and predicates: the same rows as Spark SQL over delta-rs' rows."""
    info = lake_delta
    columns = data.draw(columns_strategy(info.columns), label="columns")
    where = data.draw(predicate(info.scalar, info.samples, info.zone), label="where")
    batch_size = data.draw(st.integers(1, 700), label="batch_size")
    check(spark, client, info, columns, where, batch_size)


def test_generators_cover_the_interesting_cases(all_types, lineitem):
    """The samples the literals come from include the edge values of the data."""
    assert Decimal("-9999999999999999999999999999.9999999999") in all_types.samples["c_decimal128"]
    assert any(isinstance(v, float) and math.isnan(v) for v in all_types.samples["c_float"])
    assert dt.date(1, 1, 1) in all_types.samples["c_date"]
    assert "R" in lineitem.samples["l_returnflag"] and len(lineitem.samples["l_orderkey"]) > 20


# Column types whose predicates the arrow engine translates (starscan/arrow/filter.py); on
# scan_engine = auto these queries mostly run there, and must still equal Spark SQL.
ARROW_FILTERED = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.DecimalType, T.StringType, T.DateType,
                  T.BooleanType)


@LINEITEM_SETTINGS
@given(data=st.data())
def test_arrow_filtered_random_queries_match_spark(spark, client, all_types, lineitem, data):
    info = data.draw(st.sampled_from([all_types, lineitem]), label="table")
    columns = data.draw(columns_strategy([c for c, t in info.scalar.items()]), label="columns")
    filtered = {c: t for c, t in info.scalar.items() if isinstance(t, ARROW_FILTERED) and c != "c_char"}
    where = data.draw(predicate(filtered, info.samples, info.zone), label="where")
    batch_size = data.draw(st.integers(1, 70000).map(lambda n: min(n, MAX_BATCH)), label="batch_size")
    check(spark, client, info, columns, where, batch_size)


@pytest.fixture(scope="module")
def direct_conn(server, fe_url):
    """A reader holding DIRECT_READ on demo.*: ``direct="auto"`` reads the tablets a plan
    names files for from those files, in this process (starscan.client.direct)."""
    from starscan.client import connect

    name = "property_direct"
    if not server.users.exists(name):
        server.users.set_password(name, "pw", create=True)
    server.users.grant(name, "demo.*")
    server.users.grant(name, "direct_read:demo.*")
    server.users.grant(name, "props.*")
    server.users.grant(name, "direct_read:props.*")
    conn = connect(fe_url, name, "pw", max_workers=2)
    yield conn
    assert conn.direct_tablets > 0, "no tablet was read directly"


@LINEITEM_SETTINGS
@given(data=st.data())
def test_direct_reads_of_random_queries_match_spark(spark, direct_conn, all_types, lineitem, floats, lake_delta, data):
    """The client's direct reads (the kernel's pyarrow reader in the reader's process) give
    Spark SQL's rows, in the wire's types, for predicates of every scalar type: those with no
    exact pyarrow translation are read through the BE."""
    info = data.draw(st.sampled_from([all_types, lineitem, floats, lake_delta]), label="table")
    columns = data.draw(columns_strategy(list(info.scalar)), label="columns")
    where = data.draw(predicate(info.scalar, info.samples, info.zone), label="where")
    template = info.sql(columns, where)
    df = info.reference.sql(template.format(table=info.source))
    want = Counter(tuple(canon_spark(v, f.dataType, info.zone) for v, f in zip(r, df.schema.fields))
                   for r in df.collect())
    got_table = direct_conn.read_arrow(f"{info.db}.{info.table}", columns, template.split(" where ", 1)[1],
                                       direct="auto")
    assert got_table.schema.names == df.columns
    types = [f.type for f in got_table.schema]
    got = Counter(tuple(canon_arrow(v, t) for v, t in zip(row, types))
                  for row in zip(*(col.to_pylist() for col in got_table.columns)))
    missing, extra = want - got, got - want
    assert not missing and not extra, (template, list(missing)[:3], list(extra)[:3])
