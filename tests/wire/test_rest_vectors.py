"""The FE over real HTTP: docs/protocol.md section 7 REST vectors 1-10, the error ladder of 2.4,
authentication (2.1), `_query_plan` success bodies (2.2), `_schema` (2.3), pruning, health and docs.

Every request goes through a real socket to the session server (`server` fixture) with httpx.
"""

from __future__ import annotations

import base64
import json
import uuid

import httpx
import pytest
from support.servers import new_user

ROOT_AUTH = "Basic cm9vdDo="  # base64("root:"), exactly as in docs/protocol.md section 7
JSON_CT = "application/json; charset=UTF-8"
VECTOR1_SQL = "select `k1`,`v1` from `db1`.`t1` where (`k1` > 0)"
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


@pytest.fixture(scope="module")
def http(fe_url):
    with httpx.Client(base_url=fe_url, timeout=180.0) as c:
        yield c


def plan_request(http, db, table, body, *, auth=ROOT_AUTH, method="POST", headers=None):
    hdrs = {"Content-Type": JSON_CT}
    if auth is not None:
        hdrs["Authorization"] = auth
    hdrs.update(headers or {})
    content = body.encode("utf-8") if isinstance(body, str) else body
    return http.request(method, f"/api/{db}/{table}/_query_plan", content=content, headers=hdrs)


def plan_sql(http, db, table, sql, **kw):
    return plan_request(http, db, table, json.dumps({"sql": sql}), **kw)


def assert_error(resp, status: int, message: str) -> None:
    """The `{"status": N, "exception": "..."}` shape with HTTP status == JSON status."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    assert resp.json() == {"status": status, "exception": message}


def assert_unauthorized(resp, message: str | None = None) -> None:
    """The 2.1 auth shape: 401, `WWW-Authenticate: Basic realm=""`, status/code/msg/message."""
    assert resp.status_code == 401, resp.text
    assert resp.headers["www-authenticate"] == 'Basic realm=""'
    body = resp.json()
    assert set(body) == {"status", "code", "msg", "message"}
    assert body["status"] == "FAILED"
    assert body["code"] == "1"
    assert isinstance(body["msg"], str) and body["msg"]
    assert body["msg"] == body["message"]
    if message is not None:
        assert body["msg"] == message
    assert "exception" not in body


def tablet_ids(server, db, table, where=lambda t: True) -> set[str]:
    return {str(t.tablet_id) for t in server.warehouse.snapshot(db, table).tablets if where(t)}


def assert_plan_body(server, body: dict, db: str, table: str) -> None:
    """A 2.2 success body: exact top-level keys, sane tablet ids and per-tablet entries."""
    assert set(body) == {"status", "opaqued_query_plan", "partitions"}
    assert body["status"] == 200 and type(body["status"]) is int
    plan = body["opaqued_query_plan"]
    assert isinstance(plan, str) and plan and len(plan) % 4 == 0
    assert base64.b64encode(base64.b64decode(plan, validate=True)).decode("ascii") == plan
    snap = server.warehouse.snapshot(db, table)
    hashes = set()
    for key, entry in body["partitions"].items():
        assert isinstance(key, str) and key.isdigit() and key == str(int(key))
        assert 0 < int(key) <= INT64_MAX
        assert set(entry) <= {"routings", "version", "schemaHash", "versionHash"}
        assert entry.get("versionHash", 0) == 0
        assert entry["routings"] == [f"127.0.0.1:{server.be_port}"]
        assert type(entry["version"]) is int and 0 <= entry["version"] <= INT32_MAX
        assert entry["version"] == snap.version
        assert type(entry["schemaHash"]) is int and -(2**31) <= entry["schemaHash"] <= INT32_MAX
        hashes.add(entry["schemaHash"])
    assert len(hashes) <= 1  # one table, one schema


# =====================================================================================
# Section 7, REST vectors 1-10
# =====================================================================================
def test_vector1_query_plan(http, server):
    body = '{"sql": "' + VECTOR1_SQL + '"}'
    resp = plan_request(http, "db1", "t1", body)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    doc = resp.json()
    assert_plan_body(server, doc, "db1", "t1")
    # db1.t1 is two files: two tablets, both planned ((k1 > 0) does not prune: k1 is no partition column).
    assert set(doc["partitions"]) == tablet_ids(server, "db1", "t1")
    assert len(doc["partitions"]) == 2


def test_vector2_no_authorization(http):
    resp = plan_request(http, "db1", "t1", json.dumps({"sql": VECTOR1_SQL}), auth=None)
    assert_unauthorized(resp, "Need auth information.")


def test_vector3_empty_body(http):
    assert_error(plan_request(http, "db1", "t1", b""), 400, "POST body must contains [sql] root object")


def test_vector4_unescaped_json(http):
    body = '{"sql": "select "x" from t"}'
    assert_error(plan_request(http, "db1", "t1", body), 400, f"malformed json [ {body} ]")


def test_vector5_aggregation(http):
    sql = "select count(*) from `db1`.`t1`"
    assert_error(plan_sql(http, "db1", "t1", sql), 400, f"only support single table filter-prune-scan, but found [ {sql}]")


def test_vector6_inconsistent_table(http):
    resp = plan_sql(http, "db1", "t1", "select `k1` from `db1`.`t2`")
    assert_error(resp, 400, "requested database and table must consistent with sql: request [ db1.t1]and sql [db1.t2]")


def test_vector7_unknown_database(http):
    assert_error(plan_sql(http, "nodb", "t1", "select k1 from nodb.t1"), 404, "Database [nodb] does not exists")


def test_vector8_syntax_error(http):
    # StarRocks' text first (clients match it), then the reason.
    assert_error(plan_sql(http, "db1", "t1", "selec k1 from"), 500,
                 "The Sql is invalid: syntax error at line 1, column 13 near 'from'")


def test_vector9_pruned_to_nothing(http):
    resp = plan_sql(http, "db1", "sales", "select `id`, `amount` from `db1`.`sales` where (`region` = 'nowhere')")
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"partitions": {}, "opaqued_query_plan": "", "status": 200}


def test_vector10_schema_decimal(http):
    resp = http.get("/api/db1/t1/_schema?withExtendedInfo=true", headers={"Authorization": ROOT_AUTH})
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert doc["status"] == 200
    props = {p["name"]: p for p in doc["properties"]}
    m = props["m"]
    assert (m["type"], m["precision"], m["scale"]) == ("DECIMAL64", "10", "2")


# =====================================================================================
# _query_plan: more of 2.2 and 2.4
# =====================================================================================
def test_get_query_plan_works_like_post(http, server):
    body = json.dumps({"sql": VECTOR1_SQL})
    resp = plan_request(http, "db1", "t1", body, method="GET")
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert_plan_body(server, doc, "db1", "t1")
    assert set(doc["partitions"]) == tablet_ids(server, "db1", "t1")
    assert_error(plan_request(http, "db1", "t1", b"", method="GET"), 400, "POST body must contains [sql] root object")


def test_plan_is_stable_across_calls(http, server):
    a = plan_sql(http, "db1", "t1", VECTOR1_SQL).json()
    b = plan_sql(http, "db1", "t1", VECTOR1_SQL).json()
    assert a["partitions"] == b["partitions"]
    assert list(a["partitions"]) == list(b["partitions"])  # same JSON order, too


def test_other_body_keys_are_ignored(http, server):
    resp = plan_request(http, "db1", "t1", json.dumps({"sql": VECTOR1_SQL, "extra": [1, 2], "warehouse": "x"}),
                        headers={"warehouse": "default_warehouse"})
    assert resp.status_code == 200, resp.text
    assert set(resp.json()["partitions"]) == tablet_ids(server, "db1", "t1")


@pytest.mark.parametrize("body", ["{}", '{"sql": ""}', '{"other": "select k1 from db1.t1"}', '{"sql": null}'])
def test_sql_missing(http, body):
    assert_error(plan_request(http, "db1", "t1", body), 400, "POST body must contains [sql] root object")


@pytest.mark.parametrize("body", ["not json", '{"sql": "select k1 from db1.t1"', "{'sql': 'x'}"])
def test_malformed_json(http, body):
    assert_error(plan_request(http, "db1", "t1", body), 400, f"malformed json [ {body} ]")


def test_unknown_table(http):
    assert_error(plan_sql(http, "db1", "x", "select k1 from db1.x"), 404, "Table [x] does not exists")


def test_unknown_database_is_checked_before_the_sql(http):
    # Step 6 (404) comes before step 8 (500).
    assert_error(plan_sql(http, "nodb", "t1", "selec k1 from"), 404, "Database [nodb] does not exists")


@pytest.mark.parametrize("sql", [
    "insert into `db1`.`t1` values (1, 'a', null, null, null)",
    "delete from `db1`.`t1` where k1 = 1",
])
def test_not_a_select(http, sql):
    assert_error(plan_sql(http, "db1", "t1", sql), 400, f"Select statement needed, but found [{sql} ]")


@pytest.mark.parametrize("sql", [
    "select k1 from db1.t1 order by k1",
    "select k1 from db1.t1 limit 1",
    "select k1 from db1.t1 limit 1 offset 1",
    "select k1, row_number() over (order by k1) from db1.t1",
    "select k1, sum(k1) over (partition by v1) from db1.t1",
    "select k1 from db1.t1 group by k1",
    "select max(k1) from db1.t1",
    "select distinct k1 from db1.t1",
])
def test_scan_only(http, sql):
    assert_error(plan_sql(http, "db1", "t1", sql), 400, f"only support single table filter-prune-scan, but found [ {sql}]")


@pytest.mark.parametrize("sql", [
    "select a.k1 from db1.t1 a join db1.t1 b on a.k1 = b.k1",
    "select a.k1 from db1.t1 a left join db1.t1 b on a.k1 = b.k1",
    "select a.k1 from db1.t1 a, db1.t1 b",
])
def test_join(http, sql):
    assert_error(plan_sql(http, "db1", "t1", sql), 400, "Select statement must have only one table")


@pytest.mark.parametrize("sql", [
    "select k1 from (select k1 from db1.t1) t",
    "select t.k1 from (select * from `db1`.`t1`) as t where t.k1 > 0",
])
def test_subquery_in_from(http, sql):
    assert_error(plan_sql(http, "db1", "t1", sql), 400, "Select statement must not embed another statement")


@pytest.mark.parametrize("sql,reason", [
    ("select nosuch from db1.t1", "unknown column 'nosuch' in db1.t1"),
    ("select k1 from db1.t1 where nosuch > 1", "unknown column 'nosuch' in db1.t1"),
    ("select k1 from t1", "table name must be qualified as db.table"),
    ("select `k1` from `t1` where k1 > 0", "table name must be qualified as db.table"),
    ("select k1 from db1.t1 where", "syntax error at line 1, column 27 near 'where'"),
    ("select from db1.t1", "empty select list"),
    ("select k1 from db1.t1 where k1 >> 1", "unsupported expression 'k1 >> 1'"),
    ("select k1 from db1.t1 where no_such_fn(k1) = 1", "unknown or disallowed function no_such_fn"),
    ("select 'abc from db1.t1", "syntax error: a string, quoted name or comment is not closed, or a character is not SQL"),
])
def test_sql_invalid(http, sql, reason):
    """StarRocks answers only "The Sql is invalid"; starscan keeps that text first and adds
    the reason, so a reader can fix the filter without the server log."""
    assert_error(plan_sql(http, "db1", "t1", sql), 500, f"The Sql is invalid: {reason}")


def test_consistency_is_case_sensitive(http):
    assert_error(plan_sql(http, "db1", "t1", "select k1 from DB1.t1"), 400,
                 "requested database and table must consistent with sql: request [ db1.t1]and sql [DB1.t1]")
    assert_error(plan_sql(http, "db1", "t1", "select k1 from db1.T1"), 400,
                 "requested database and table must consistent with sql: request [ db1.t1]and sql [db1.T1]")
    assert_error(plan_sql(http, "db1", "sales", "select id from db1.t1"), 400,
                 "requested database and table must consistent with sql: request [ db1.sales]and sql [db1.t1]")


def test_empty_db_or_table_in_path(http):
    assert_error(plan_sql(http, "", "t1", VECTOR1_SQL), 400, "/t1 must be selected")
    assert_error(plan_sql(http, "db1", "", VECTOR1_SQL), 400, "db1/ must be selected")
    # Step 1 comes before the body checks (2-4).
    assert_error(plan_request(http, "", "t1", b""), 400, "/t1 must be selected")
    assert_error(plan_request(http, "", "t1", "garbage"), 400, "/t1 must be selected")


# =====================================================================================
# Pruning on db1.sales (region string, day date)
# =====================================================================================
@pytest.mark.parametrize("pred", [
    "`region` = 'nowhere'",
    "region in ('x', 'y')",
    "day > '2030-01-01'",
    "day < '2024-01-01' and id > 3",
    "region = 'eu' and region = 'us'",
    "region is null",
])
def test_prune_everything(http, pred):
    resp = plan_sql(http, "db1", "sales", f"select `id` from `db1`.`sales` where {pred}")
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"partitions": {}, "opaqued_query_plan": "", "status": 200}


@pytest.mark.parametrize("pred, keep", [
    ("region = 'eu'", lambda p: p["region"] == "eu"),
    ("`region` in ('eu', 'us')", lambda p: p["region"] in ("eu", "us")),
    ("region != 'eu'", lambda p: p["region"] != "eu"),
    ("day = '2024-01-03'", lambda p: p["day"] == "2024-01-03"),
    ("day >= '2024-01-04' and region = 'apac'", lambda p: p["day"] >= "2024-01-04" and p["region"] == "apac"),
    ("(region = 'eu' and day = '2024-01-01') or (region = 'latam' and day = '2024-01-05')",
     lambda p: (p["region"], p["day"]) in {("eu", "2024-01-01"), ("latam", "2024-01-05")}),
    ("region = 'eu' or id > 5", lambda p: True),          # id is no partition column: nothing certain
    ("id > 1000", lambda p: True),
    ("not (region = 'eu')", lambda p: p["region"] != "eu"),
    ("day between '2024-01-02' and '2024-01-03'", lambda p: "2024-01-02" <= p["day"] <= "2024-01-03"),
])
def test_partial_pruning(http, server, pred, keep):
    resp = plan_sql(http, "db1", "sales", f"select `id`, `amount` from `db1`.`sales` where {pred}")
    assert resp.status_code == 200, resp.text
    doc = resp.json()
    assert_plan_body(server, doc, "db1", "sales")
    snap = server.warehouse.snapshot("db1", "sales")
    assert all(set(t.partition) == {"region", "day"} for t in snap.tablets)
    expected = tablet_ids(server, "db1", "sales", lambda t: keep(t.partition))
    assert expected and len(expected) <= len(snap.tablets)
    assert set(doc["partitions"]) == expected


def test_sales_has_several_partitions(server):
    # Guards the pruning tests above: they need 4 regions x 5 days.
    snap = server.warehouse.snapshot("db1", "sales")
    parts = {(t.partition["region"], t.partition["day"]) for t in snap.tablets}
    assert {r for r, _ in parts} == {"eu", "us", "apac", "latam"}
    assert {d for _, d in parts} == {f"2024-01-0{i}" for i in range(1, 6)}


# =====================================================================================
# Authentication and grants (2.1, step 5)
# =====================================================================================
def _new_user(server, password: str, *grants: str) -> str:
    return new_user(server, password, *grants, prefix="u")


def test_wrong_password(http):
    assert_unauthorized(plan_sql(http, "db1", "t1", VECTOR1_SQL, auth=basic("root", "wrong")))


def test_unknown_user(http):
    assert_unauthorized(plan_sql(http, "db1", "t1", VECTOR1_SQL, auth=basic(f"nobody_{uuid.uuid4().hex[:8]}", "")))


@pytest.mark.parametrize("auth", [
    "Basic",
    "Bearer cm9vdDo=",
    "Basic !!!not-base64!!!",
    "Basic " + base64.b64encode(b"rootwithoutcolon").decode(),
    "Basic cm9vdDo= extra",
])
def test_unparsable_authorization(http, auth):
    assert_unauthorized(plan_sql(http, "db1", "t1", VECTOR1_SQL, auth=auth))


def test_user_without_grant(http, server):
    user = _new_user(server, "s3cret", "db1.sales")
    auth = basic(user, "s3cret")
    ok = plan_sql(http, "db1", "sales", "select id from db1.sales", auth=auth)
    assert ok.status_code == 200, ok.text
    assert_plan_body(server, ok.json(), "db1", "sales")
    assert_unauthorized(plan_sql(http, "db1", "t1", VECTOR1_SQL, auth=auth))
    assert_unauthorized(plan_sql(http, "demo", "lineitem", "select l_orderkey from demo.lineitem", auth=auth))
    # The grant is checked before the table is looked up (step 5 before step 6).
    assert_unauthorized(plan_sql(http, "nodb", "t1", "select k1 from nodb.t1", auth=auth))
    # ... but after the body checks (steps 2-4).
    assert_error(plan_request(http, "db1", "t1", b"", auth=auth), 400, "POST body must contains [sql] root object")
    assert_error(plan_request(http, "db1", "t1", "nope", auth=auth), 400, "malformed json [ nope ]")
    # _schema needs the grant too.
    assert_unauthorized(http.get("/api/db1/t1/_schema", headers={"Authorization": auth}))
    assert http.get("/api/db1/sales/_schema", headers={"Authorization": auth}).status_code == 200
    # The right user with a wrong password is refused, whatever the grants.
    assert_unauthorized(plan_sql(http, "db1", "sales", "select id from db1.sales", auth=basic(user, "S3cret")))


def test_database_wildcard_grant(http, server):
    user = _new_user(server, "pw-db", "db1.*")
    auth = basic(user, "pw-db")
    for table, sql in (("t1", VECTOR1_SQL), ("sales", "select id from db1.sales")):
        resp = plan_sql(http, "db1", table, sql, auth=auth)
        assert resp.status_code == 200, resp.text
    assert_unauthorized(plan_sql(http, "demo", "lineitem", "select l_orderkey from demo.lineitem", auth=auth))
    # Unknown table in the granted database: 404, not 401.
    assert_error(plan_sql(http, "db1", "x", "select k1 from db1.x", auth=auth), 404, "Table [x] does not exists")


def test_global_grant(http, server):
    user = _new_user(server, "", "*.*")
    auth = basic(user, "")
    for db, table, sql in (("db1", "t1", VECTOR1_SQL), ("demo", "lineitem", "select l_orderkey from demo.lineitem")):
        resp = plan_sql(http, db, table, sql, auth=auth)
        assert resp.status_code == 200, resp.text
        assert set(resp.json()["partitions"]) == tablet_ids(server, db, table)
    assert_error(plan_sql(http, "nodb", "t1", "select k1 from nodb.t1", auth=auth), 404, "Database [nodb] does not exists")


def test_utf8_credentials(http, server):
    user = _new_user(server, "pässwörd✓", "db1.t1")
    resp = plan_sql(http, "db1", "t1", VECTOR1_SQL, auth=basic(user, "pässwörd✓"))
    assert resp.status_code == 200, resp.text
    # A password containing ':' (only the first ':' separates user and password).
    user2 = _new_user(server, "a:b:c", "db1.t1")
    assert plan_sql(http, "db1", "t1", VECTOR1_SQL, auth=basic(user2, "a:b:c")).status_code == 200
    assert_unauthorized(plan_sql(http, "db1", "t1", VECTOR1_SQL, auth=basic(user2, "a:b")))


# =====================================================================================
# _schema (2.3)
# =====================================================================================
# demo.all_types, in table order: (name, type, precision, scale); see starscan/app/demo.py ALL_TYPES_DDL.
ALL_TYPES_SCHEMA = [
    ("id", "INT", None, None),
    ("c_bool", "BOOLEAN", None, None),
    ("c_tinyint", "TINYINT", None, None),
    ("c_smallint", "SMALLINT", None, None),
    ("c_int", "INT", None, None),
    ("c_bigint", "BIGINT", None, None),
    ("c_float", "FLOAT", None, None),
    ("c_double", "DOUBLE", None, None),
    ("c_decimal32", "DECIMAL32", "9", "2"),
    ("c_decimal64", "DECIMAL64", "18", "4"),
    ("c_decimal128", "DECIMAL128", "38", "10"),
    ("c_date", "DATE", None, None),
    ("c_datetime", "DATETIME", None, None),
    ("c_datetime_ntz", "DATETIME", None, None),
    ("c_string", "VARCHAR", None, None),
    ("c_char", "CHAR", None, None),
    ("c_varchar", "VARCHAR", None, None),
    ("c_binary", "VARBINARY", None, None),
    ("c_array", "INVALID_TYPE", None, None),
    ("c_map", "INVALID_TYPE", None, None),
    ("c_struct", "INVALID_TYPE", None, None),
]

T1_SCHEMA = [
    ("k1", "INT", None, None),
    ("v1", "VARCHAR", None, None),
    ("d", "DATE", None, None),
    ("dt", "DATETIME", None, None),
    ("m", "DECIMAL64", "10", "2"),
]

EXTENDED_PROPERTY_KEYS = {"isKey", "columnSize"}  # 2.3: extended keys some FE builds emit


def assert_schema_body(doc: dict, expected: list[tuple]) -> None:
    assert doc["status"] == 200 and type(doc["status"]) is int
    assert set(doc) <= {"status", "properties", "tableId", "etlTable"}
    props = doc["properties"]
    assert [p["name"] for p in props] == [e[0] for e in expected]
    for prop, (name, typ, precision, scale) in zip(props, expected):
        assert list(prop)[:3] == ["name", "type", "comment"], prop
        want = {"name": name, "type": typ, "comment": ""}
        if precision is not None:
            want.update(precision=precision, scale=scale)
        assert {k: v for k, v in prop.items() if k not in EXTENDED_PROPERTY_KEYS} == want, prop
        for k, v in prop.items():
            if k != "columnSize":
                assert isinstance(v, str), (k, v)


@pytest.mark.parametrize("query", ["", "?withExtendedInfo=true"])
def test_schema_all_types(http, query):
    resp = http.get(f"/api/demo/all_types/_schema{query}", headers={"Authorization": ROOT_AUTH})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    assert_schema_body(resp.json(), ALL_TYPES_SCHEMA)


def test_schema_matches_type_mapping(http, server, spark):
    """`_schema` and starscan.spark.types.starrocks_type agree on every column."""
    from starscan.spark.schemas import SchemaResolver
    from starscan.spark.types import starrocks_type

    schema = SchemaResolver(spark).schema(server.warehouse.snapshot("demo", "all_types"))
    props = http.get("/api/demo/all_types/_schema", headers={"Authorization": ROOT_AUTH}).json()["properties"]
    assert len(props) == len(schema.fields)
    for prop, field in zip(props, schema.fields):
        srt = starrocks_type(field)
        assert prop["name"] == field.name
        assert prop["type"] == srt.name
        if srt.is_decimal:
            assert (prop["precision"], prop["scale"]) == (str(srt.precision), str(srt.scale))
        else:
            assert "precision" not in prop and "scale" not in prop


@pytest.mark.parametrize("query", ["", "?withExtendedInfo=true"])
def test_schema_t1(http, query):
    resp = http.get(f"/api/db1/t1/_schema{query}", headers={"Authorization": ROOT_AUTH})
    assert resp.status_code == 200, resp.text
    assert_schema_body(resp.json(), T1_SCHEMA)


def test_schema_partitioned_table_lists_partition_columns_last(http):
    resp = http.get("/api/db1/sales/_schema", headers={"Authorization": ROOT_AUTH})
    assert resp.status_code == 200, resp.text
    assert_schema_body(resp.json(), [
        ("id", "INT", None, None), ("amount", "DECIMAL64", "12", "2"),
        ("region", "VARCHAR", None, None), ("day", "DATE", None, None),
    ])


def test_schema_errors(http):
    h = {"Authorization": ROOT_AUTH}
    assert_error(http.get("/api/nodb/t1/_schema", headers=h), 404, "Database [nodb] does not exists")
    assert_error(http.get("/api/db1/nosuch/_schema", headers=h), 404, "Table [nosuch] does not exists")
    assert_error(http.get("/api/db1/nosuch/_schema?withExtendedInfo=true", headers=h), 404, "Table [nosuch] does not exists")
    assert_error(http.get("/api//t1/_schema", headers=h), 400, "No database or table selected.")
    assert_unauthorized(http.get("/api/db1/t1/_schema"), "Need auth information.")
    assert_unauthorized(http.get("/api/db1/t1/_schema", headers={"Authorization": basic("root", "x")}))


# =====================================================================================
# Health and docs
# =====================================================================================
def test_health(http):
    resp = http.get("/api/health")
    assert resp.status_code == 200
    assert resp.json()["status"] == "OK"


def test_docs(http):
    resp = http.get("/docs")
    assert resp.status_code == 200
    assert "text/html" in resp.headers["content-type"]
    spec = http.get("/openapi.json")
    assert spec.status_code == 200
    paths = spec.json()["paths"]
    plan_path = next(path for path in paths if path.endswith("/_query_plan"))
    assert {"get", "post"} <= set(paths[plan_path])
    # OpenAPI requires unique operation ids (generated clients and the docs page rely on them).
    op_ids = [op["operationId"] for item in paths.values() for op in item.values() if isinstance(op, dict) and "operationId" in op]
    assert len(op_ids) == len(set(op_ids)), op_ids


def test_an_error_names_its_kind_in_a_header_and_the_body_stays_starrocks(http):
    """X-Starscan-Error carries the error's kind (what starscan's client classifies by);
    the body is StarRocks' own, unchanged."""
    missing = plan_sql(http, "db1", "x", "select k1 from db1.x")
    assert missing.headers["X-Starscan-Error"] == "TableNotFound"
    assert_error(missing, 404, "Table [x] does not exists")
    refused = http.post("/api/db1/t1/_query_plan", json={"sql": "select k1 from db1.t1"})  # no credentials
    assert refused.status_code == 401 and refused.headers["X-Starscan-Error"] == "Unauthorized"
