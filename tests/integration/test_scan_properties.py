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

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T
from support.random_queries import (
    MAX_BATCH,
    TableInfo,
    arrow_counts,
    columns_strategy,
    differ,
    predicate,
    run_both,
    spark_counts,
)

# Strategies over the sampled data values have long reprs; Hypothesis warns about that.
pytestmark = [pytest.mark.filterwarnings("ignore:Generating overly large repr"), pytest.mark.usefixtures("engine")]

PROPERTY_SETTINGS = settings(
    max_examples=25, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
# Queries over the 60k-row lineitem cost ~0.9 s each (Spark's answer and ours): fewer of them.
LINEITEM_SETTINGS = settings(PROPERTY_SETTINGS, max_examples=15)

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
    diff = differ(want, got)
    missing, extra = diff or (Counter(), Counter())
    assert diff is None, (
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
    # Lineitem's batches of at least 500 rows, as in its own property: thousands of get_next
    # calls of a few rows each cost a minute and test nothing all_types' small batches do not.
    low = 500 if info is lineitem else 1
    batch_size = data.draw(st.integers(low, 70000).map(lambda n: min(n, MAX_BATCH)), label="batch_size")
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
    want = spark_counts(df.collect(), df.schema.fields, info.zone)
    got_table = direct_conn.read_arrow(f"{info.db}.{info.table}", columns, template.split(" where ", 1)[1],
                                       direct="auto")
    assert got_table.schema.names == df.columns
    got = arrow_counts(got_table.to_batches(), [f.type for f in got_table.schema])
    diff = differ(want, got)
    assert diff is None, (template, list(diff[0])[:3], list(diff[1])[:3])
