"""The kernel's reader (plan_read + read_split, what the arrow engine, Spark tasks and direct
reads run) keeps NaN rows wherever Spark SQL keeps them, also in row groups its statistics
would skip. Spark's own answers for these predicates are checked against Spark in
tests/integration/test_float_predicates.py; here the rule is written out by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from starscan.arrow.read import read_split
from starscan.arrow.scan import Fields, _file_conjuncts, plan_read
from starscan.arrow.split_plan import ArrowSplit, FilePart
from starscan.core.sql_types import Field, SqlType
from starscan.planner.sql import parse

FIELDS = Fields([Field("id", SqlType("long")), Field("x", SqlType("double")), Field("f", SqlType("float")),
                 Field("k", SqlType("long"))])


def _predicate(where: str):
    parsed = parse(f"select id from d.t where {where}", "d", "t")
    assert parsed.predicate is not None
    return parsed.predicate


@pytest.fixture
def reported(tmp_path: Path) -> ArrowSplit:
    """10,000 rows in row groups of 100: x is NaN where id % 997 = 0, id % 500 otherwise."""
    ids = list(range(10_000))
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({
        "id": pa.array(ids, pa.int64()),
        "x": pa.array([math.nan if i % 997 == 0 else float(i % 500) for i in ids], pa.float64()),
        "f": pa.array([math.nan if i % 997 == 0 else float(i % 500) for i in ids], pa.float32()),
        "k": pa.array(ids, pa.int64()),
    }), path, row_group_size=100)
    stat = path.stat()
    return ArrowSplit((FilePart(str(path), "t.parquet", stat.st_size, stat.st_mtime_ns, None),))


def _ids(split: ArrowSplit, where: str) -> list[int]:
    read = plan_read("d.t", 1, FIELDS, [("id", "id")], _predicate(where), "UTC", "parquet", set())
    return sorted(i for batch in read_split(read, split, batch_rows=4096) for i in batch.column(0).to_pylist())


NAN_IDS = [i for i in range(10_000) if i % 997 == 0]
AT_499 = [i for i in range(10_000) if i % 500 == 499 and i % 997]


@pytest.mark.parametrize("column", ["x", "f"])
@pytest.mark.parametrize("where", ["{c} > 498", "{c} >= 499", "not ({c} < 499)", "not ({c} <= 498)",
                                   "not (not (not ({c} < 499)))", "499 <= {c}", "{c} not between -1 and 498"])
def test_nan_rows_meet_every_form_of_above_498(reported, column, where):
    """NaN is above every number in Spark: all seven forms hold for the NaN rows."""
    assert _ids(reported, where.format(c=column)) == sorted(NAN_IDS + AT_499)


@pytest.mark.parametrize("column", ["x", "f"])
@pytest.mark.parametrize("where", ["{c} < 1", "not ({c} >= 1)", "{c} in (0, 0.5)", "{c} = -0.0"])
def test_nan_rows_fail_every_form_of_below_one(reported, column, where):
    want = [i for i in range(10_000) if i % 500 == 0 and i % 997]
    assert _ids(reported, where.format(c=column)) == want


def test_nan_equals_nan_between_columns(reported):
    assert _ids(reported, "x = f") == list(range(10_000))
    assert _ids(reported, "x < f") == []
    assert _ids(reported, "not (x <= f)") == []


def test_not_in_with_a_null_item_keeps_no_row_and_in_keeps_the_matches(reported):
    assert _ids(reported, "x not in (3, null)") == []
    assert _ids(reported, "x in (3, null)") == [i for i in range(10_000) if i % 500 == 3 and i % 997]


@pytest.mark.parametrize(("where", "pushed"), [
    ("x < 499", True),            # a NaN row fails it: statistics may skip groups
    ("x = 3", True),
    ("not (x > 498)", True),
    ("x > 498", False),           # NaN meets it
    ("not (x < 499)", False),
    ("x != 3", False),
    ("x < 3 or k = 5", False),    # a NaN row with k = 5 meets it
    ("x < f", False),
    ("k < 3", True),
])
def test_statistics_skip_row_groups_only_by_conditions_a_nan_row_fails(where, pushed):
    assert (_file_conjuncts(_predicate(where), FIELDS, set()) is not None) is pushed


def test_a_float_column_against_an_integer_literal_compares_as_float(tmp_path: Path):
    """16777217 is no float: Spark rounds it to 16777216 against a FLOAT column, not against a
    DOUBLE one; in an IN list with a decimal item everything compares as DOUBLE."""
    path = tmp_path / "r.parquet"
    pq.write_table(pa.table({"id": [1], "x": pa.array([16777216.0]), "f": pa.array([16777216.0], pa.float32()),
                             "k": [0]}), path)
    stat = path.stat()
    split = ArrowSplit((FilePart(str(path), "r.parquet", stat.st_size, stat.st_mtime_ns, None),))
    assert _ids(split, "f = 16777217") == [1]
    assert _ids(split, "x = 16777217") == []
    assert _ids(split, "f in (16777217, 2)") == [1]
    assert _ids(split, "f in (16777217, 0.5)") == []
