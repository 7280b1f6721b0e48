"""Incremental reads of folder tables (`_query_plan` with ``since_version``, starscan.tables.versions):
only the rows appended after a version, exactly, with the next cursor; a rewritten table or
an unknown version is refused, never answered with a full or partial read."""

from __future__ import annotations

import json
import shutil

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.mtimes import later
from support.servers import basic

pytestmark = pytest.mark.spark_line  # the Spark-version tier (docs/scaling.md)


def _write(location, name: str, ids: range, **partition) -> None:
    folder = location.joinpath(*[f"{k}={v}" for k, v in partition.items()])
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(list(ids), pa.int64())}), folder / name)
    # A distinct modification time for the file and every folder it changed, whatever the
    # file system's clock granularity.
    later(folder / name, *[folder, *folder.parents][: len(partition) + 1])


def _plan(fe_url: str, sql: str, since=None, table: str = "events") -> httpx.Response:
    body = {"sql": sql} if since is None else {"sql": sql, "since_version": since}
    return httpx.post(f"{fe_url}/api/inc/{table}/_query_plan", content=json.dumps(body),
                      headers={"Authorization": basic("root", "")}, timeout=60)


def _ids(client, sql: str, since: int, table: str = "events") -> tuple[list[int], int]:
    plan = client.plan("inc", table, sql, since_version=since)
    assert plan["since_version"] == since
    if not plan["partitions"]:
        return [], plan["version"]
    rows = client.read("inc", table, sql, plan=plan)
    return sorted(rows.column("id").to_pylist()), plan["version"]


@pytest.fixture
def events(server):
    location = server.warehouse.table_path("inc", "events")
    shutil.rmtree(location, ignore_errors=True)
    location.mkdir(parents=True)
    _write(location, "part-0.parquet", range(0, 100))
    return location


def test_each_plan_since_a_version_reads_only_what_was_appended(server, client, fe_url, events):
    sql = "select id from inc.events"
    v0 = server.warehouse.snapshot("inc", "events").version
    _write(events, "part-1.parquet", range(100, 150))
    ids, v1 = _ids(client, sql, v0)
    assert ids == list(range(100, 150)) and v1 != v0
    assert _ids(client, sql, v1) == ([], v1)  # nothing new: an empty plan, the same cursor
    _write(events, "part-2.parquet", range(150, 160))
    _write(events, "part-3.parquet", range(160, 170))
    ids, v2 = _ids(client, sql, v1)
    assert ids == list(range(150, 170))
    assert _ids(client, sql, v0)[0] == list(range(100, 170))  # from an older cursor: everything since
    assert _ids(client, "select id from inc.events where id >= 165", v1)[0] == list(range(165, 170))
    old = _plan(fe_url, sql).json()
    assert "since_version" not in old and "version" not in old  # readers without the field see no change


def test_a_rewritten_table_or_an_unknown_version_is_refused(server, client, fe_url, events):
    sql = "select id from inc.events"
    v0 = server.warehouse.snapshot("inc", "events").version
    _write(events, "part-1.parquet", range(100, 110))
    _ids(client, sql, v0)
    _write(events, "part-0.parquet", range(0, 90))  # rewritten
    r = _plan(fe_url, sql, v0)
    assert r.status_code == 409, r.text
    assert "rewritten after version" in r.json()["exception"] and "full read" in r.json()["exception"]
    now = server.warehouse.snapshot("inc", "events").version
    assert _ids(client, sql, now) == ([], now)
    r = _plan(fe_url, sql, 123456)
    assert r.status_code == 404 and "not known" in r.json()["exception"], r.text
    for bad in ("12", -1, 1.5, True, 1 << 40):
        assert _plan(fe_url, sql, bad).status_code == 400, bad


def test_partitions_appended_are_pruned_like_any_plan(server, client, events):
    location = server.warehouse.table_path("inc", "parts")
    shutil.rmtree(location, ignore_errors=True)
    _write(location, "p.parquet", range(0, 10), city="oslo")
    v0 = server.warehouse.snapshot("inc", "parts").version
    _write(location, "p.parquet", range(10, 20), city="lima")
    _write(location, "q.parquet", range(20, 25), city="oslo")
    plan = client.plan("inc", "parts", "select id from inc.parts where city = 'oslo'", since_version=v0)
    assert len(plan["partitions"]) == 1
    ids, _ = _ids(client, "select id from inc.parts where city = 'oslo'", v0, table="parts")
    assert ids == list(range(20, 25))


def _commit(fe_url: str, name: str, version, table: str = "events") -> httpx.Response:
    return httpx.post(f"{fe_url}/api/inc/{table}/_consumers/{name}/commit", content=json.dumps({"version": version}),
                      headers={"Authorization": basic("root", "")}, timeout=60)


def test_a_consumer_reads_from_its_committed_version_and_never_moves_back(server, client, fe_url, events):
    sql = "select id from inc.events"
    first = client.plan("inc", "events", sql, consumer="loader-1")  # nothing committed: the whole table
    assert first["consumer"] == "loader-1" and "since_version" not in first
    assert sorted(client.read("inc", "events", sql, plan=first).column("id").to_pylist()) == list(range(100))
    v0 = first["version"]
    assert _commit(fe_url, "loader-1", v0).json() == {"consumer": "loader-1", "version": v0}
    _write(events, "part-1.parquet", range(100, 130))
    nxt = client.plan("inc", "events", sql, consumer="loader-1")
    assert nxt["since_version"] == v0
    assert sorted(client.read("inc", "events", sql, plan=nxt).column("id").to_pylist()) == list(range(100, 130))
    assert _commit(fe_url, "loader-1", nxt["version"]).status_code == 200
    assert _commit(fe_url, "loader-1", nxt["version"]).status_code == 200  # idempotent
    back = _commit(fe_url, "loader-1", v0)
    assert back.status_code == 409 and "never moves back" in back.json()["exception"], back.text
    position = httpx.get(f"{fe_url}/api/inc/events/_consumers/loader-1", headers={"Authorization": basic("root", "")},
                         timeout=60).json()
    assert position["version"] == nxt["version"]
    assert _commit(fe_url, "loader-1", 424242).status_code == 404
    assert _commit(fe_url, "no such name!", v0).status_code == 400
    assert _commit(fe_url, "loader-1", "x").status_code == 400
    again = client.plan("inc", "events", sql, consumer="loader-1")  # nothing new since the commit
    assert again["partitions"] == {} and again["version"] == nxt["version"]


def test_the_get_form_takes_since_version_as_a_parameter(server, client, fe_url, events):
    v0 = server.warehouse.snapshot("inc", "events").version
    _write(events, "part-1.parquet", range(100, 105))
    r = httpx.request("GET", f"{fe_url}/api/inc/events/_query_plan", params={"since_version": v0},
                      content=json.dumps({"sql": "select id from inc.events"}),
                      headers={"Authorization": basic("root", "")}, timeout=60)
    assert r.status_code == 200 and r.json()["since_version"] == v0 and len(r.json()["partitions"]) == 1


def test_consumer_routes_need_the_tables_select_grant(server, client, fe_url, events):
    import uuid

    name = f"inc_{uuid.uuid4().hex[:8]}"
    server.users.set_password(name, "pw", create=True)
    server.users.grant(name, "db1.t1")  # another table only
    auth = {"Authorization": basic(name, "pw")}
    v0 = server.warehouse.snapshot("inc", "events").version
    committed = httpx.post(f"{fe_url}/api/inc/events/_consumers/x/commit", content=json.dumps({"version": v0}),
                           headers=auth, timeout=60)
    read = httpx.get(f"{fe_url}/api/inc/events/_consumers/x", headers=auth, timeout=60)
    planned = httpx.post(f"{fe_url}/api/inc/events/_query_plan", headers=auth, timeout=60,
                         content=json.dumps({"sql": "select id from inc.events", "consumer": "x"}))
    # 401, as StarRocks' FE answers a plan without the grant, on all three routes alike
    assert (committed.status_code, read.status_code, planned.status_code) == (401, 401, 401), \
        (committed.text, read.text, planned.text)
    assert all("SELECT privilege" in r.text for r in (committed, read, planned))
    assert client.plan("inc", "events", "select id from inc.events", consumer="x")["version"] == v0  # root may


def test_consumers_and_their_lag_are_on_the_admin_page_and_in_metrics(server, client, fe_url, events):
    from support.readers import scrape, value

    sql = "select id from inc.events"
    first = client.plan("inc", "events", sql, consumer="lagging")
    client.commit("inc", "events", "lagging", first["version"])
    _write(events, "part-1.parquet", range(100, 130))
    _write(events, "part-2.parquet", range(130, 140))
    server.warehouse.snapshot("inc", "events")  # the server lists the table (a version with one file more)...
    _write(events, "part-3.parquet", range(140, 141))  # ...and again
    appended = sum((events / f"part-{i}.parquet").stat().st_size for i in (1, 2, 3))
    auth = {"Authorization": basic("root", "")}
    state = httpx.get(f"{fe_url}/api/admin/state", headers=auth, timeout=60).json()
    row = next(c for c in state["consumers"] if c["table"] == "inc.events" and c["consumer"] == "lagging")
    assert (row["committed_version"], row["lag_bytes"], row["state"]) == (first["version"], appended, "ok"), row
    assert row["lag_versions"] == 2 and row["table_version"] == server.warehouse.snapshot("inc", "events").version
    samples = scrape(fe_url)
    assert value(samples, "starscan_consumer_lag_versions", table="inc.events", consumer="lagging") == 2
    assert value(samples, "starscan_consumer_lag_bytes", table="inc.events", consumer="lagging") == appended
    page = httpx.get(f"{fe_url}/admin", headers=auth, timeout=60).text
    assert "<td>lagging</td>" in page and "<h2>Consumers</h2>" in page
    _write(events, "part-0.parquet", range(0, 90))  # rewritten: the lag cannot be told
    state = httpx.get(f"{fe_url}/api/admin/state", headers=auth, timeout=60).json()
    row = next(c for c in state["consumers"] if c["table"] == "inc.events" and c["consumer"] == "lagging")
    assert row["state"] == "rewritten" and row["lag_bytes"] is None
    assert value(scrape(fe_url), "starscan_consumers_lag_unknown") >= 1
