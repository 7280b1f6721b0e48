"""Fuzz the SQL validator and planner: whatever the `sql`, `_query_plan`'s planning either
returns a plan or raises one of our errors (a clear 4xx/5xx), never anything else."""

from __future__ import annotations

import pytest
from fuzzing import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from starscan.core.errors import StarscanError

TOKENS = [
    "select", "from", "where", "and", "or", "not", "in", "between", "like", "is", "null", "true", "false",
    "case", "when", "then", "else", "end", "cast", "as", "int", "date", "string", "decimal(10,2)", "limit",
    "union", "join", "on", "group by", "order by", "distinct", "exists", "*", ",", "(", ")", "=", "!=", "<>",
    "<", "<=", ">", ">=", "<=>", "+", "-", "/", "%", "div", "'a'", "'2024-01-02'", "''", "'\\''", "1", "-1",
    "1.5", "1e308", "99999999999999999999999", "0x10", "k1", "v1", "d", "dt", "m", "`k1`", "db1.t1", "`db1`.`t1`",
    "t1", "db1", "x", ";", "--", "/*", "*/", "lower(v1)", "coalesce(k1, 0)", "reflect('a','b')",
    "input_file_name()", "count(*)", "sum(k1)", "?", "@x", "$1", "\\", "\"", "ü", "\x00",
]


@st.composite
def sqlish(draw):
    head = draw(st.sampled_from(["select k1 from db1.t1 where ", "select * from db1.t1 ", "select ", ""]))
    words = draw(st.lists(st.sampled_from(TOKENS), max_size=25))
    return head + " ".join(words)


@pytest.fixture(scope="module")
def planner(server):
    return server.planner


def test_fuzz_sql(planner):
    @fuzz_settings
    @given(st.one_of(sqlish(), st.text(max_size=200)))
    def check(sql):
        try:
            planner.query_plan_json("db1", "t1", sql, "root")
        except StarscanError as exc:
            assert exc.http_status in (400, 403, 404, 413, 500) and exc.message

    check()


def test_deep_nesting_is_refused_not_crashing(planner):
    for depth in (100, 2000, 20000):
        sql = "select k1 from db1.t1 where " + "(" * depth + "k1 = 1" + ")" * depth
        try:
            planner.query_plan_json("db1", "t1", sql, "root")
        except StarscanError as exc:
            assert exc.message
        sql = "select k1 from db1.t1 where " + " and ".join(["not"] * depth) + " k1 = 1"
        try:
            planner.query_plan_json("db1", "t1", sql, "root")
        except StarscanError as exc:
            assert exc.message
