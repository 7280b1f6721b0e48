"""GET /varz (effective configuration, secrets masked) and POST /api/update_config on a
running server: run-time keys take effect on the next request, others need a restart."""

from __future__ import annotations

import httpx
import pytest
from pydantic import SecretStr
from support.readers import OK, Reader, plan_for
from support.servers import add_users, own_warehouse, running_server

from starscan.client import StarscanClient
from starscan.core.thrift_defs import wire

PLAN_SECRET = "plan-secret-for-varz-test-0123456789"
JWT_KEY = "jwt-key-for-varz-test-abcdefghijklmnop"
S3_SECRET = "s3-secret-value-for-varz-test"


@pytest.fixture(scope="module")
def srv(spark, base_settings, tmp_path_factory):
    warehouse = own_warehouse(spark, tmp_path_factory.mktemp("runtime") / "warehouse")
    add_users(warehouse, {"bob": ("bob-pw", ("db1.*",))})
    settings = base_settings.model_copy(update={
        "warehouse": warehouse, "http_port": 0, "be_port": 0, "query_port": 0,
        "plan_secret": SecretStr(PLAN_SECRET), "jwt_key": SecretStr(JWT_KEY),
        "spark_conf": {**base_settings.spark_conf, "spark.hadoop.fs.s3a.secret.key": S3_SECRET}})
    with running_server(spark, settings) as server:
        yield server


def fe(server) -> str:
    return f"http://127.0.0.1:{server.http_port}"


def update(server, auth=("root", ""), **params):
    return httpx.post(f"{fe(server)}/api/update_config", params=params, auth=auth, timeout=30)


def test_varz_masks_secrets(srv):
    resp = httpx.get(f"{fe(srv)}/varz", auth=("root", ""), timeout=30)
    assert resp.status_code == 200
    body = resp.json()
    config = body["config"]
    assert config["http_port"] == srv.http_port and config["be_port"] == srv.be_port and config["max_scanners"] == 256
    assert config["plan_secret"] == "**********" and config["jwt_key"] == "**********"
    assert config["spark_conf"]["spark.hadoop.fs.s3a.secret.key"] == "**********"
    assert config["spark_conf"]["spark.driver.memory"] == "2g"
    for secret in (PLAN_SECRET, JWT_KEY, S3_SECRET):
        assert secret not in resp.text
    assert "max_scanners" in body["runtime_changeable"] and "http_port" not in body["runtime_changeable"]
    assert httpx.get(f"{fe(srv)}/varz", auth=("bob", "bob-pw")).status_code == 403


def test_update_config_changes_a_limit_at_run_time(srv):
    be_addr = ("127.0.0.1", srv.be_port)
    client = StarscanClient(fe(srv), "root", "")
    plan_b64, tablets = plan_for(client, "db1", "t1", "select k1 from db1.t1")
    first, second = Reader(be_addr), Reader(be_addr)
    opened = []
    try:
        resp = update(srv, max_scanners="1")
        assert resp.status_code == 200 and resp.json() == {"status": "OK", "msg": "", "updated": {"max_scanners": "1"}}
        opened.append((first, first.open_ok("db1", "t1", plan_b64, tablets)))
        refused = second.open("db1", "t1", plan_b64, tablets)
        assert refused.status.status_code == wire.TStatusCode.TOO_MANY_TASKS
        assert "max_scanners=1" in refused.status.error_msgs[0]
        assert update(srv, max_scanners="256").status_code == 200
        again = second.open("db1", "t1", plan_b64, tablets)
        assert again.status.status_code == OK
        opened.append((second, again.context_id))
        varz = httpx.get(f"{fe(srv)}/varz", auth=("root", "")).json()["config"]
        assert varz["max_scanners"] == 256
    finally:
        for reader, cid in opened:
            reader.close_scanner(cid)
        first.close()
        second.close()


def test_profile_switch_and_gc_interval(srv):
    assert update(srv, enable_profile_for_external_plan="true", scan_context_gc_interval_s="0.5").status_code == 200
    assert srv.reaper.interval_s == 0.5
    rows = StarscanClient(fe(srv), "root", "").read("db1", "t1", "select k1 from db1.t1")
    assert rows.num_rows == 3
    assert srv.ops.profiles._done  # noqa: SLF001 - a profile was kept for that scan
    cid = next(iter(srv.ops.profiles._done))  # noqa: SLF001
    assert httpx.get(f"{fe(srv)}/api/scans/{cid}/profile", auth=("root", "")).json()["rows"] == 3
    assert update(srv, enable_profile_for_external_plan="false", scan_context_gc_interval_s="1").status_code == 200


def test_update_config_refusals(srv):
    restart = update(srv, http_port="9999")
    assert restart.status_code == 400 and restart.json()["status"] == "BAD"
    assert "restart" in restart.json()["msg"]
    unknown = update(srv, no_such_key="1")
    assert unknown.status_code == 400 and "unknown configuration key 'no_such_key'" in unknown.json()["msg"]
    bad = update(srv, max_scanners="0")
    assert bad.status_code == 400 and "bad value for 'max_scanners'" in bad.json()["msg"]
    # A refused change changes nothing, not even the valid keys sent with it.
    mixed = update(srv, max_scanners_per_user="3", queue_max_bytes="nope")
    assert mixed.status_code == 400
    assert httpx.get(f"{fe(srv)}/varz", auth=("root", "")).json()["config"]["max_scanners_per_user"] == 64
    assert update(srv, auth=("bob", "bob-pw"), max_scanners="5").status_code == 403
    assert update(srv).status_code == 400  # nothing to change


def test_plan_rate_and_login_lockout_change_at_run_time(srv):
    """Both limits live in objects built at start; update_config reconfigures them."""
    url = f"{fe(srv)}/api/db1/t1/_query_plan"
    body = {"sql": "select k1 from db1.t1"}
    try:
        # One plan per 100 s, no burst: bob's first plan passes, the second is refused.
        assert update(srv, plan_rate_per_user="0.01", plan_rate_burst="1").status_code == 200
        assert httpx.post(url, json=body, auth=("bob", "bob-pw"), timeout=30).status_code == 200
        refused = httpx.post(url, json=body, auth=("bob", "bob-pw"), timeout=30)
        assert refused.status_code == 429 and "plan_rate_per_user=0.01" in refused.text
        # Two failed logins lock bob out from this address, even with the right password.
        assert update(srv, plan_rate_per_user="0", login_max_failures="2").status_code == 200
        for _ in range(2):
            assert httpx.post(url, json=body, auth=("bob", "wrong"), timeout=30).status_code == 401
        locked = httpx.post(url, json=body, auth=("bob", "bob-pw"), timeout=30)
        assert locked.status_code == 429 and "too many failed logins" in locked.text
    finally:
        # Back to the module's settings; reconfiguring the guard also forgets bob's failures.
        assert update(srv, plan_rate_per_user="0", login_max_failures="1000000").status_code == 200
    assert httpx.post(url, json=body, auth=("bob", "bob-pw"), timeout=30).status_code == 200
