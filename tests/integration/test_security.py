"""Security on a server of its own (own warehouse, users file, plan secret, audit log):
the BE's own identity and grant checks, login lockout, bearer tokens, plan-secret rotation,
unguessable context ids, the audit trail, and secrets kept out of logs."""

from __future__ import annotations

import gc
import json
import logging
import os
import time
import uuid
import weakref

import httpx
import jwt
import pytest
from support.servers import basic, own_warehouse, plan, running_server
from support.waits import wait_until

from starscan.client import StarscanClient, thrift_client
from starscan.core.thrift_defs import wire
from starscan.plans.secrets import PREVIOUS, RotatingPlanSigner, rotate_secret

OK = wire.TStatusCode.OK
NOT_AUTHORIZED = wire.TStatusCode.NOT_AUTHORIZED
NOT_FOUND = wire.TStatusCode.NOT_FOUND
T1_SQL = "select k1, v1 from db1.t1"
JWT_KEY = "jwt-test-key-" + "k" * 32
ISSUER = "https://idp.example"
ALICE_PW = "pässwörd✓ with spaces"
GRACE_S = 600  # the previous plan secret's grace period (the test ages the rotation past it)


@pytest.fixture(scope="module")
def secure(spark, base_settings, tmp_path_factory):
    path = own_warehouse(spark, tmp_path_factory.mktemp("secure-wh"))
    settings = base_settings.model_copy(update={
        "warehouse": path, "users_file": None, "audit_log": path / "audit.log",
        "login_max_failures": 3, "login_lockout_s": 600.0, "plan_secret_grace_s": GRACE_S,
        "jwt_key": __import__("pydantic").SecretStr(JWT_KEY), "jwt_issuer": ISSUER, "jwt_algorithms": ["HS256"],
    })
    with running_server(spark, settings) as srv:
        srv.users.set_password("alice", ALICE_PW, create=True)
        srv.users.grant("alice", "db1.*")
        srv.users.set_password("tokenonly", None, create=True)
        srv.users.grant("tokenonly", "db1.t1")
        yield srv


def fe(srv) -> str:
    return f"http://127.0.0.1:{srv.http_port}"


def open_params(body: dict, **kwargs) -> wire.TScanOpenParams:
    args = dict(cluster="default_cluster", database="db1", table="t1", tablet_ids=[int(t) for t in body["partitions"]],
                opaqued_query_plan=body["opaqued_query_plan"], batch_size=1024)
    args.update(kwargs)
    return wire.TScanOpenParams(**args)


def open_scanner(srv, body: dict, **kwargs):
    conn = thrift_client("127.0.0.1", srv.be_port)
    try:
        result = conn.open_scanner(open_params(body, **kwargs))
        if result.status.status_code == OK:
            conn.close_scanner(wire.TScanCloseParams(context_id=result.context_id))
        return result
    finally:
        conn.close()


def alice_plan(srv, table: str = "t1") -> dict:
    resp = plan(fe(srv), "db1", table, f"select k1, v1 from db1.{table}", basic("alice", ALICE_PW))
    assert resp.status_code == 200, resp.text
    return resp.json()


def message(result) -> str:
    return " ".join(result.status.error_msgs or [])


# ---- BE identity checks ----------------------------------------------------------------
def test_be_checks_the_sent_password_against_the_users_file(secure):
    body = alice_plan(secure)
    assert open_scanner(secure, body, user="alice", passwd=ALICE_PW).status.status_code == OK
    assert open_scanner(secure, body).status.status_code == OK  # nothing sent: the signed plan's identity
    wrong = open_scanner(secure, body, user="alice", passwd="guess")
    assert wrong.status.status_code == NOT_AUTHORIZED
    assert "passwd does not match" in message(wrong) and "guess" not in message(wrong)
    other = open_scanner(secure, body, user="root", passwd="")
    assert other.status.status_code == NOT_AUTHORIZED and "issued to 'alice'" in message(other)


def test_non_ascii_password_works_on_both_ports(secure):
    rows = StarscanClient(fe(secure), "alice", ALICE_PW).read("db1", "t1", T1_SQL)
    assert sorted(rows.column("k1").to_pylist()) == [1, 2, 3]


def test_revoked_grant_takes_effect_at_open_without_restart(secure):
    secure.users.set_password("bob", "bob-pw", create=True)
    secure.users.grant("bob", "db2.t2")
    resp = plan(fe(secure), "db2", "t2", "select k1 from db2.t2", basic("bob", "bob-pw"))
    assert resp.status_code == 200, resp.text
    body = resp.json()
    params = dict(database="db2", table="t2", user="bob", passwd="bob-pw")
    assert open_scanner(secure, body, **params).status.status_code == OK
    secure.users.grant("bob", "db2.t2", revoke=True)
    refused = open_scanner(secure, body, **params)
    assert refused.status.status_code == NOT_AUTHORIZED
    assert "no longer has the SELECT privilege on db2.t2" in message(refused)
    # ... and the FE refuses new plans.
    assert plan(fe(secure), "db2", "t2", "select k1 from db2.t2", basic("bob", "bob-pw")).status_code == 401
    secure.users.grant("bob", "db2.t2")
    assert open_scanner(secure, body, **params).status.status_code == OK


def test_context_ids_are_random_and_name_only_their_own_scan(secure):
    body = alice_plan(secure)
    conn = thrift_client("127.0.0.1", secure.be_port)
    try:
        ids = []
        for _ in range(20):
            opened = conn.open_scanner(open_params(body, batch_size=1))
            assert opened.status.status_code == OK
            ids.append(opened.context_id)
        assert len(set(ids)) == 20
        for cid in ids:
            parsed = uuid.UUID(cid)
            assert parsed.version == 4 and str(parsed) == cid
        # Neighbouring ids share no guessable structure: a changed character is unknown.
        probe = ids[0][:-1] + ("0" if ids[0][-1] != "0" else "1")
        res = conn.get_next(wire.TScanNextBatchParams(context_id=probe, offset=0))
        assert res.status.status_code == NOT_FOUND
        # Closing one context leaves the others readable.
        conn.close_scanner(wire.TScanCloseParams(context_id=ids[0]))
        res = conn.get_next(wire.TScanNextBatchParams(context_id=ids[1], offset=0))
        assert res.status.status_code == OK and res.rows
        for cid in ids[1:]:
            conn.close_scanner(wire.TScanCloseParams(context_id=cid))
    finally:
        conn.close()


# ---- login lockout ------------------------------------------------------------------------
def test_failed_logins_are_rate_limited_per_user_and_address(secure):
    secure.users.set_password("carol", "carol-pw", create=True)
    secure.users.grant("carol", "db1.t1")
    for _ in range(3):
        assert plan(fe(secure), "db1", "t1", T1_SQL, basic("carol", "nope")).status_code == 401
    locked = plan(fe(secure), "db1", "t1", T1_SQL, basic("carol", "carol-pw"))
    assert locked.status_code == 429
    assert "too many failed logins for carol@127.0.0.1" in locked.json()["exception"]
    assert int(locked.headers["retry-after"]) > 0
    # Another client address is not locked out, nor is another user from this address.
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(transport=transport, timeout=60) as other:
        assert plan(fe(secure), "db1", "t1", T1_SQL, basic("carol", "carol-pw"), client=other).status_code == 200
    assert plan(fe(secure), "db1", "t1", T1_SQL, basic("alice", ALICE_PW)).status_code == 200


# ---- bearer tokens ------------------------------------------------------------------------
def token(sub: str = "tokenonly", key: str = JWT_KEY, **claims) -> str:
    payload = {"sub": sub, "iss": ISSUER, "exp": int(time.time()) + 300}
    payload.update(claims)
    return jwt.encode(payload, key, algorithm="HS256")


def test_bearer_token_plans_and_scans(secure):
    client = StarscanClient(fe(secure), user="tokenonly", token=token())
    rows = client.read("db1", "t1", T1_SQL)
    assert sorted(rows.column("k1").to_pylist()) == [1, 2, 3]
    # The token's user has the token user's grants only.
    resp = plan(fe(secure), "db1", "sales", "select k1 from db1.sales", f"Bearer {token()}")
    assert resp.status_code == 401
    # A token-only user has no password to log in with.
    assert plan(fe(secure), "db1", "t1", T1_SQL, basic("tokenonly", "")).status_code == 401


@pytest.mark.parametrize("bad, reason", [
    (lambda: token(exp=int(time.time()) - 10), "expired"),
    (lambda: token(key="another-key-" + "x" * 32), "Signature verification failed"),
    (lambda: token(iss="https://evil.example"), "issuer"),
    (lambda: token(sub="nobody-here"), "not in the users file"),
    (lambda: "not.a.jwt", "bearer token rejected"),
    (lambda: jwt.encode({"sub": "tokenonly", "iss": ISSUER, "exp": int(time.time()) + 60}, None, algorithm="none"),
     "bearer token rejected"),
])
def test_bad_bearer_tokens_are_refused(secure, bad, reason):
    resp = plan(fe(secure), "db1", "t1", T1_SQL, f"Bearer {bad()}")
    assert resp.status_code == 401, resp.text
    assert reason in resp.json()["msg"]


def test_bearer_tokens_refused_where_not_configured(fe_url):
    resp = plan(fe_url, "db1", "t1", T1_SQL, f"Bearer {token()}")
    assert resp.status_code == 401 and "bearer tokens are not enabled" in resp.json()["msg"]


# ---- plan secret rotation -------------------------------------------------------------
def test_plan_secret_rotates_without_downtime(secure):
    before = alice_plan(secure)
    old_kid = RotatingPlanSigner(secure.settings.state_path).sign(b"x")[1]
    new_kid = rotate_secret(secure.settings.state_path)
    assert new_kid != old_kid
    # The running server notices within a second: new plans carry the new key ...
    wait_until(lambda: secure.signer.sign(b"x")[1] == new_kid, 10, what="the server to load the new secret")
    after = alice_plan(secure)
    assert open_scanner(secure, after).status.status_code == OK
    # ... and a plan signed just before the rotation still opens during the grace period.
    assert open_scanner(secure, before).status.status_code == OK
    # After it, the old plan is refused with a clear reason. The period counts from the
    # rotation (the previous secret's file time): here the rotation is made older than it.
    previous = secure.settings.state_path / PREVIOUS
    long_ago = time.time() - GRACE_S - 1
    os.utime(previous, (long_ago, long_ago))
    wait_until(lambda: open_scanner(secure, before).status.status_code != OK, 20, interval_s=0.5,
               what="the grace period to end")
    refused = open_scanner(secure, before)
    assert "signature does not match" in message(refused)
    assert open_scanner(secure, after).status.status_code == OK


# ---- audit and secrets --------------------------------------------------------------------
def audit_lines(srv) -> list[dict]:
    path = srv.settings.effective_audit_log
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_audit_says_who_read_what(secure):
    StarscanClient(fe(secure), "alice", ALICE_PW).read("db1", "t1", "select k1 from db1.t1 where k1 > 1")
    bad = plan(fe(secure), "db1", "t1", "select nope from db1.t1", basic("alice", ALICE_PW))
    assert bad.status_code == 500

    def find():
        lines = audit_lines(secure)
        plans = [x for x in lines if x["event"] == "plan" and x.get("sql") == "select k1 from db1.t1 where k1 > 1"]
        if not plans:
            return None
        scans = [x for x in lines if x["event"] == "scan" and x.get("query_id") == plans[-1]["query_id"]]
        return (plans[-1], scans) if scans else None

    plan_line, scans = wait_until(find, 30, what="audit lines for the scan")
    assert plan_line["user"] == "alice" and plan_line["client"] == "127.0.0.1" and plan_line["table"] == "db1.t1"
    assert plan_line["status"] == 200 and plan_line["columns"] == ["k1"] and plan_line["tablets"] >= 1
    assert sum(s["rows"] for s in scans) == 2
    for s in scans:
        assert s["user"] == "alice" and s["client"] == "127.0.0.1" and s["outcome"] == "complete"
        assert s["sql"] == "select k1 from db1.t1 where k1 > 1" and s["bytes"] > 0 and s["duration_ms"] > 0
    failed = [x for x in audit_lines(secure) if x["event"] == "plan" and x.get("sql") == "select nope from db1.t1"]
    assert failed and failed[-1]["status"] == 500 and failed[-1]["query_id"] is None


def test_secrets_never_reach_logs_or_errors(secure, caplog):
    caplog.set_level(logging.DEBUG)
    tok = token()
    StarscanClient(fe(secure), "alice", ALICE_PW).read("db1", "t1", T1_SQL)
    StarscanClient(fe(secure), user="tokenonly", token=tok).read("db1", "t1", T1_SQL)
    wrong = open_scanner(secure, alice_plan(secure), user="alice", passwd="wr0ng-secret-pw")
    assert wrong.status.status_code == NOT_AUTHORIZED
    plan(fe(secure), "db1", "t1", T1_SQL, basic("alice", "another-wr0ng-pw"))
    secret = secure.signer.secret.decode()
    texts = [caplog.text, secure.settings.effective_audit_log.read_text(encoding="utf-8"), message(wrong),
             repr(secure.settings), str(secure.settings.model_dump())]
    for text in texts:
        for needle in (ALICE_PW, "wr0ng-secret-pw", "another-wr0ng-pw", tok, JWT_KEY, secret):
            assert needle not in text


def test_mysql_port_failed_logins_count_too(secure):
    import pymysql

    secure.users.set_password("dave", "dave-pw", create=True)
    secure.users.grant("dave", "db1.t1")

    def connect(password):
        return pymysql.connect(host="127.0.0.1", port=secure.query_port, user="dave", password=password,
                               connect_timeout=30)

    for _ in range(3):
        with pytest.raises(pymysql.err.OperationalError) as info:
            connect("wrong")
        assert info.value.args[0] == 1045
    with pytest.raises(pymysql.err.OperationalError) as info:
        connect("dave-pw")
    assert "too many failed logins for dave@127.0.0.1" in str(info.value)
    # The HTTP port shares the count: dave is locked out there too, from this address.
    assert plan(fe(secure), "db1", "t1", T1_SQL, basic("dave", "dave-pw")).status_code == 429


# ---- plans answered on the FE's event loop (QueryPlanner.quick_plan_json) -----------------
@pytest.fixture(scope="module")
def listing_cached(spark, base_settings, tmp_path_factory):
    """A server that keeps its listings (the shared test servers list on every plan)."""
    path = own_warehouse(spark, tmp_path_factory.mktemp("quick-wh"))
    settings = base_settings.model_copy(update={"warehouse": path, "users_file": None, "listing_cache_ttl_s": 600.0})
    with running_server(spark, settings) as srv:
        for user in ("quinn", "rita"):
            srv.users.set_password(user, f"{user}-pw", create=True)
            srv.users.grant(user, "db1.quick")
        yield srv


def test_repeated_plans_are_new_plans_that_follow_the_table_settings_and_grants(listing_cached, monkeypatch):
    """A statement planned again is answered on the event loop from what its last plan
    computed: it is still a plan of its own (query id, times, signature), and the next plan
    follows a file added, a setting changed and a grant revoked."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from starscan.plans import codec as plan_codec

    srv = listing_cached
    folder = srv.warehouse.table_path("db1", "quick")
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(2):
        pq.write_table(pa.table({"k": [i]}), folder / f"part-{i}.parquet")
    sql, auth = "select k from db1.quick", basic("quinn", "quinn-pw")
    full_plans = []
    real = srv.planner.query_plan_json
    monkeypatch.setattr(srv.planner, "query_plan_json", lambda *a, **k: full_plans.append(1) or real(*a, **k))

    def planned() -> dict:
        resp = plan(fe(srv), "db1", "quick", sql, auth)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def decoded(body: dict):
        return plan_codec.decode(body["opaqued_query_plan"], srv.signer)

    first, second = planned(), planned()
    assert len(full_plans) == 1  # the second was answered from the first's work
    assert decoded(first).query_id != decoded(second).query_id
    assert decoded(second).user == "quinn" and decoded(second).sql == sql
    other = plan(fe(srv), "db1", "quick", sql, basic("rita", "rita-pw"))  # another user, the same statement
    assert other.status_code == 200 and len(full_plans) == 1
    assert decoded(other.json()).user == "rita"
    assert open_scanner(srv, other.json(), table="quick", user="rita", passwd="rita-pw").status.status_code == OK
    refused = open_scanner(srv, other.json(), table="quick", user="quinn", passwd="quinn-pw")
    assert refused.status.status_code != OK  # a plan is its user's
    assert first["partitions"] == second["partitions"]
    for body in (first, second):
        result = open_scanner(srv, body, table="quick", user="quinn", passwd="quinn-pw")
        assert result.status.status_code == OK, message(result)

    listed = weakref.ref(srv.warehouse.snapshot("db1", "quick"))
    # Another statement over the same listing, not planned again after the change below.
    assert plan(fe(srv), "db1", "quick", "select k from db1.quick where k > 0", auth).status_code == 200
    full_plans.pop()  # (the counts below are of the statement above)
    pq.write_table(pa.table({"k": [2]}), folder / "part-2.parquet")  # the folder changes: seen at once
    third = planned()
    assert len(full_plans) == 2
    gc.collect()
    assert listed() is None  # the plans kept for the loop do not keep the table's old listing alive
    assert third["partitions"] != second["partitions"]
    assert decoded(third).version != decoded(second).version

    assert decoded(third).tablets_digest is None  # a small list goes inline
    srv.ops.update_config({"plan_inline_tablets_max_bytes": "0"})
    try:
        assert decoded(planned()).tablets_digest is not None
        assert len(full_plans) == 3
    finally:
        srv.ops.update_config({"plan_inline_tablets_max_bytes": str(16 << 10)})

    srv.users.grant("quinn", "db1.quick", revoke=True)
    assert plan(fe(srv), "db1", "quick", sql, auth).status_code == 401


# ---- Arrow Flight SQL (docs/flight-sql.md) ------------------------------------------------
def _flight_statement(sql: str):
    import pyarrow.flight as flight
    from google.protobuf import any_pb2

    from starscan.flight import flight_sql_pb2 as sql_pb2

    command = any_pb2.Any()
    command.Pack(sql_pb2.CommandStatementQuery(query=sql))
    return flight.FlightDescriptor.for_command(command.SerializeToString())


def test_flight_sql_takes_jwt_bearer_tokens_and_audits_its_scans(secure):
    """A JWT as the bearer token (as on the HTTP port); its scans leave the same audit lines,
    with the user; a ticket issued to one user is refused to another at the FE."""
    import pyarrow.flight as flight

    client = flight.connect(f"grpc://127.0.0.1:{secure.flight_sql_port}")
    as_token = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {token()}".encode())])
    sql = "select k1, v1 from db1.t1 where k1 > 0"  # a statement of its own: the audit lines are this test's
    info = client.get_flight_info(_flight_statement(sql), as_token)
    got = pa_concat([client.do_get(e.ticket, as_token).read_all() for e in info.endpoints])
    assert sorted(got.column("k1").to_pylist()) == [1, 2, 3]

    def scans():
        lines = [x for x in audit_lines(secure) if x["event"] == "scan" and x.get("user") == "tokenonly"
                 and x.get("sql") == sql]
        return lines or None

    lines = wait_until(scans, 30, what="the Flight scan's audit line")
    assert sum(x["rows"] for x in lines) == 3 and all(x["outcome"] == "complete" for x in lines)
    # A query the FE answers itself: its ticket is the token user's alone.
    counted = client.get_flight_info(_flight_statement("select count(*) as n from db1.t1"), as_token)
    alice = flight.FlightCallOptions(headers=[client.authenticate_basic_token("alice", ALICE_PW)])
    with pytest.raises(flight.FlightUnauthorizedError, match="another user"):
        client.do_get(counted.endpoints[0].ticket, alice).read_all()
    assert client.do_get(counted.endpoints[0].ticket, as_token).read_all().column("n").to_pylist() == [3]
    with pytest.raises(flight.FlightUnauthenticatedError):
        client.get_flight_info(_flight_statement("select k1 from db1.t1"),
                               flight.FlightCallOptions(headers=[(b"authorization", b"Bearer not-a-token")]))


def pa_concat(tables):
    import pyarrow as pa

    return pa.concat_tables(tables)
