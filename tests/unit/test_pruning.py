"""Tablet pruning on partition values (planner/pruning.py): pure Python, no Spark.

Each case parses a StarRocks WHERE clause with ``planner.sql.parse`` and checks which tablets
``prune`` keeps. A tablet is dropped only when its partition values make the predicate never
TRUE; anything undecided (an unknown time zone, a value that does not parse, a function) keeps
the tablet, so pruning can never lose rows.
"""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from starscan import expr as E
from starscan.planner import pruning
from starscan.planner.pruning import prune
from starscan.planner.sql import parse
from starscan.tables.catalog import DataFile, Tablet


def where(pred: str) -> E.Expr | None:
    return parse(f"select * from db1.t1 where {pred}", "db1", "t1").predicate


def tablet(tid: int, **partition) -> Tablet:
    parts = tuple(partition.items())
    path = "/".join(f"{k}={v}" for k, v in parts) + f"/part-{tid}.parquet"
    return Tablet(tid, (DataFile(path, 100, 1, parts),))


def kept(pred: str | None, tablets, types, **kw) -> list[int]:
    return [t.tablet_id for t in prune(where(pred) if pred else None, tablets, types, **kw)]


DATE_TABLETS = [tablet(1, dt="2020-01-01"), tablet(2, dt="2020-01-02"), tablet(3, dt="2020-01-03"),
                tablet(4, dt=None), tablet(5, dt="not-a-date")]
DATE_TYPES = {"dt": T.DateType()}


@pytest.mark.parametrize("pred, expected", [
    (None, [1, 2, 3, 4, 5]),
    ("dt = '2020-01-01'", [1, 5]),
    ("dt = date '2020-01-01'", [1, 5]),
    ("dt = cast('2020-01-02' as date)", [2, 5]),
    ("dt >= '2020-01-02'", [2, 3, 5]),
    ("dt > '2020-01-01' and dt < '2020-01-03'", [2, 5]),
    ("dt between '2020-01-01' and '2020-01-02'", [1, 2, 5]),
    ("dt not between '2020-01-01' and '2020-01-02'", [3, 5]),
    ("dt in ('2020-01-01', '2020-01-03')", [1, 3, 5]),
    ("dt not in ('2020-01-01', '2020-01-03')", [2, 5]),
    ("dt is null", [4, 5]),
    ("dt is not null", [1, 2, 3, 5]),
    ("dt <=> null", [4, 5]),
    ("not (dt <=> '2020-01-01')", [2, 3, 4, 5]),
    ("dt = '2020-1-1'", [1, 2, 3, 5]),                 # not strictly YYYY-MM-DD: Spark may still match
    ("dt = '2020-01-01 10:00:00'", [1, 2, 3, 5]),      # Spark casts this to 2020-01-01: keep
    ("dt = 20200101", [1, 2, 3, 5]),                   # date vs number: not evaluated (NULL = x is NULL)
    ("dt > timestamp '2020-01-02 00:00:00'", [1, 3, 5]),  # LTZ, unknown zone: 1 day apart is not decided
    ("dt = '2020-01-01' and c_int = 5", [1, 5]),
    ("dt = '2020-01-01' or c_int = 5", [1, 2, 3, 4, 5]),
    ("not (dt = '2020-01-01' or c_int = 5)", [2, 3, 5]),  # NULL partition: NOT(NULL OR x) is never TRUE
    ("not (dt = '2020-01-01' and c_int = 5)", [1, 2, 3, 4, 5]),
    ("1 = 0", []),
    ("1 = 1", [1, 2, 3, 4, 5]),
    ("null", []),
    ("DT = '2020-01-03'", [3, 5]),
    ("year(dt) = 2020", [1, 2, 3, 4, 5]),
    ("dt like '2020%'", [1, 2, 3, 4, 5]),
])
def test_prune_date_partitions(pred, expected):
    assert kept(pred, DATE_TABLETS, DATE_TYPES) == expected


INT_TABLETS = [tablet(1, p="1"), tablet(2, p="2"), tablet(3, p="3"), tablet(4, p=None), tablet(5, p="007")]
INT_TYPES = {"p": T.IntegerType()}


@pytest.mark.parametrize("pred, expected", [
    ("p = 1", [1]),
    ("p = 7", [5]),
    ("p != 1", [2, 3, 5]),
    ("p > 1", [2, 3, 5]),
    ("p in (1, 3)", [1, 3]),
    ("p in (1, null)", [1]),
    ("p not in (1, null)", []),
    ("p not in (1, 3)", [2, 5]),
    ("p between 2 and 3", [2, 3]),
    ("p = 1.0", [1]),
    ("p = 1.5", []),
    ("p < 2.5", [1, 2]),
    ("p > 1e0", [2, 3, 5]),
    ("p in (2, 2.5, 3e0)", [2, 3]),
    ("p = '1'", [1, 2, 3, 5]),                       # int vs string: not evaluated (NULL still drops)
    ("p <=> null", [4]),
    ("p is null or p = 2", [2, 4]),
    ("p = 1.00000000000000000000000000000000001", [1, 2, 3, 5]),  # Spark rounds to decimal(38,28): 1 matches
    ("cast(p as string) = '7'", [5]),
    ("cast(p as bigint) = 3", [3]),
    ("cast(p as decimal(5, 1)) = 2.0", [2]),
    ("p + 1 = 2", [1, 2, 3, 4, 5]),
    ("P = 2", [2]),
    ("(p = 1) = true", [1]),
    ("(p = 1) is not true", [2, 3, 4, 5]),
])
def test_prune_int_partitions(pred, expected):
    assert kept(pred, INT_TABLETS, INT_TYPES) == expected


def test_prune_string_partitions():
    tablets = [tablet(1, s="a"), tablet(2, s="b"), tablet(3, s="é"), tablet(4, s="1"), tablet(5, s=None)]
    types = {"s": T.StringType()}
    assert kept("s = 'a'", tablets, types) == [1]
    assert kept("s > 'b'", tablets, types) == [3]              # UTF-8 byte order
    assert kept("s in ('a', 'é')", tablets, types) == [1, 3]
    assert kept("s = 1", tablets, types) == [1, 2, 3, 4]       # string vs number: not evaluated
    assert kept("s like 'a%'", tablets, types) == [1, 2, 3, 4, 5]
    assert kept("s in ('a', 1)", tablets, types) == [1, 2, 3, 4]
    assert kept("cast(s as int) = 1", tablets, types) == [1, 2, 3, 4]
    assert kept("s = 'a' and c_x > 0 or s = 'b'", tablets, types) == [1, 2]


def test_prune_multiple_partition_columns_case_insensitive():
    tablets = [tablet(1, Region="eu", Day="2024-01-01"), tablet(2, Region="eu", Day="2024-01-02"),
               tablet(3, Region="us", Day="2024-01-01"), tablet(4, Region="us")]
    types = {"region": T.StringType(), "DAY": T.DateType()}
    assert kept("region = 'eu' and day = '2024-01-02'", tablets, types) == [2]
    assert kept("REGION = 'us' and Day >= '2024-01-01'", tablets, types) == [3, 4]  # 4 has no day value
    assert kept("region = 'eu' or day = '2024-01-01'", tablets, types) == [1, 2, 3, 4]
    assert kept("region = 'apac'", tablets, types) == []


def test_prune_keeps_order_and_everything_without_partitions():
    tablets = [tablet(3, p="3"), tablet(1, p="1"), tablet(2, p="2")]
    assert kept("p >= 2", tablets, INT_TYPES) == [3, 2]
    assert kept("p >= 2", tablets, {}) == [3, 1, 2]
    assert kept("c_int = 1", tablets, INT_TYPES) == [3, 1, 2]
    unpartitioned = [Tablet(9, (DataFile("f.parquet", 1, 1, ()),))]
    assert kept("p = 1", unpartitioned, INT_TYPES) == [9]


def test_prune_long_partitions_in_list_uses_spark_common_type():
    tablets = [tablet(1, n="9007199254740992"), tablet(2, n="5")]
    types = {"n": T.LongType()}
    assert kept("n = 9007199254740993", tablets, types) == []
    # With a double in the list Spark compares in double: 9007199254740993 -> ...992.
    assert kept("n in (9007199254740993, 1e0)", tablets, types) == [1]
    assert kept("n = 9007199254740993e0", tablets, types) == [1]


def test_prune_decimal_and_double_partitions():
    dec = [tablet(1, m="1.50"), tablet(2, m="2.25"), tablet(3, m="1.234")]  # 3 does not fit decimal(5,2)
    assert kept("m = 1.5", dec, {"m": T.DecimalType(5, 2)}) == [1, 3]
    assert kept("m > 2", dec, {"m": T.DecimalType(5, 2)}) == [2, 3]
    dbl = [tablet(1, x="0.5"), tablet(2, x="0.1"), tablet(3, x="NaN"), tablet(4, x="1e3")]
    types = {"x": T.DoubleType()}
    assert kept("x = 0.5", dbl, types) == [1, 3]
    assert kept("x = 1000", dbl, types) == [3, 4]
    assert kept("x = 0.1", dbl, types) == [1, 2, 3, 4]  # 0.1 is no double: how the JVM rounds it is not assumed
    assert kept("x < 1e0", dbl, types) == [1, 2, 3]


def test_prune_timestamps_depend_on_known_time_zone():
    tablets = [tablet(1, ts="2024-03-10 01:00:00"), tablet(2, ts="2024-03-10 03:00:00"),
               tablet(3, ts="2024-03-20 00:00:00"), tablet(4, ts="2024-03-10 03:00:00.5")]
    types = {"ts": T.TimestampType()}
    pred = "ts >= '2024-03-10 02:30:00'"
    # Unknown (possibly DST) zone: values within 48 hours of the bound are kept.
    assert kept(pred, tablets, types) == [1, 2, 3, 4]
    assert kept("ts > '2024-03-15 00:00:00'", tablets, types) == [3]
    assert kept("ts = '2024-03-10 03:00:00'", tablets, types) == [1, 2, 4]
    # Fixed-offset zone: exact.
    assert kept(pred, tablets, types, time_zone="UTC") == [2, 3, 4]
    assert kept("ts = timestamp '2024-03-10 03:00:00'", tablets, types, time_zone="+02:00") == [2]
    assert kept("cast(ts as date) = '2024-03-10'", tablets, types, time_zone="UTC") == [1, 2, 4]
    # TIMESTAMP_NTZ has no zone at all.
    ntz = {"ts": T.TimestampNTZType()}
    assert kept("ts >= cast('2024-03-10 02:30:00' as timestamp_ntz)", tablets, ntz) == [2, 3, 4]


def test_prune_unparseable_partition_values_are_kept():
    tablets = [tablet(1, p="x"), tablet(2, p=""), tablet(3, p="99999999999"), tablet(4, p="2")]
    assert kept("p = 2", tablets, INT_TYPES) == [1, 2, 3, 4]


def test_pruning_truth_sets():
    T_, F_, N_ = pruning.ALWAYS_TRUE, pruning.ALWAYS_FALSE, pruning.ALWAYS_NULL
    U = pruning.UNKNOWN
    assert pruning.t_and(F_, U) == F_
    assert pruning.t_or(T_, U) == T_
    assert pruning.t_and(N_, U) == frozenset({"N", "F"})
    assert pruning.t_not(pruning.t_and(N_, U)) == frozenset({"N", "T"})
    assert pruning.t_or(N_, F_) == N_


def test_fixed_offset_zones():
    for tz in ("UTC", "Etc/UTC", "GMT", "+02:00", "-05:30", "UTC+8", "GMT-03:00", "Z"):
        assert pruning.is_fixed_offset_zone(tz), tz
    for tz in (None, "", "Europe/Berlin", "America/New_York", "Asia/Shanghai"):
        assert not pruning.is_fixed_offset_zone(tz), tz


def test_a_snapshot_keeps_its_pruning_answers_per_predicate_types_and_zone():
    """The planner keeps prune's answer for a snapshot's own tablets with the snapshot
    (QueryPlanner._pruned): the same answer as prune, one per predicate, partition types and
    time zone, and never for other candidates (the tablets of an incremental plan)."""
    from starscan.planner.query_plan import PRUNED_MAX, QueryPlanner
    from starscan.tables.catalog import TableSnapshot

    snap = TableSnapshot("db1", "t1", "/nowhere", 1, tuple(DATE_TABLETS), ("dt",))
    ids = lambda tablets: [t.tablet_id for t in tablets]  # noqa: E731

    def pruned(pred, types=DATE_TYPES, zone=None, candidates=None):
        return ids(QueryPlanner._pruned(snap, snap.tablets if candidates is None else candidates, where(pred),
                                        types, zone))

    assert pruned("dt = '2020-01-01'") == [1, 5] == pruned("dt = '2020-01-01'")
    assert pruned("dt >= '2020-01-02'") == [2, 3, 5]
    assert pruned("dt = '2020-01-01'", {"dt": T.StringType()}) == [1]  # as text, "not-a-date" is a value
    assert len(snap.memo) == 3
    ts = {"dt": T.TimestampType()}
    assert pruned("dt > timestamp '2020-01-02 00:00:00'", ts) == kept("dt > timestamp '2020-01-02 00:00:00'",
                                                                      DATE_TABLETS, ts)
    assert pruned("dt > timestamp '2020-01-02 00:00:00'", ts, "UTC") == \
        kept("dt > timestamp '2020-01-02 00:00:00'", DATE_TABLETS, ts, time_zone="UTC")
    assert len(snap.memo) == 5
    assert pruned("dt = '2020-01-02'", candidates=tuple(DATE_TABLETS[:1])) == []  # not the snapshot's own: not kept
    assert len(snap.memo) == 5
    for day in range(PRUNED_MAX):
        pruned(f"dt = '2020-02-{day % 28 + 1:02d}' or dt = '{day}'")
    assert len(snap.memo) <= PRUNED_MAX
