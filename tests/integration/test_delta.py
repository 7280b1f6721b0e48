"""Delta tables in the warehouse (starscan.tables.delta): the rows of the current version only, on
both engines, against what delta-rs reads for that version; what cannot be read exactly is
refused by name.

A Delta table's folder keeps the files of older versions until they are vacuumed: served as
a plain folder, an overwritten or deleted row would come back. These tests make exactly
such tables (overwrite, append, delete) with ``deltalake`` and read them through the server.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

on_both_engines = pytest.mark.usefixtures("engine")


def _table(server, name: str) -> Path:
    location = server.warehouse.table_path("lake", name)
    shutil.rmtree(location, ignore_errors=True)
    location.parent.mkdir(parents=True, exist_ok=True)
    return location


def _rows(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "city": pa.array([["oslo", "lima", "a/b %c"][i % 3] for i in ids]),
        "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i % 5) for i in ids], pa.date32()),
        "amount": pa.array([None if i % 11 == 0 else i * 0.25 for i in ids], pa.float64()),
    })


def _wire(row: dict) -> tuple:
    return tuple(v.isoformat() if isinstance(v, dt.date) else v for v in row.values())


def _expected(location: Path, where=lambda r: True) -> list[tuple]:
    """What delta-rs reads for the table's current version."""
    rows = DeltaTable(str(location)).to_pyarrow_table(columns=["id", "city", "day", "amount"]).to_pylist()
    return sorted(_wire(r) for r in rows if where(r))


@pytest.fixture(scope="module")
def events(server):
    """lake.events at version 3: written, overwritten, appended to, then rows deleted; the
    folder still holds every file of versions 0-2."""
    location = _table(server, "events")
    write_deltalake(str(location), _rows(0, 900), partition_by=["city"])
    write_deltalake(str(location), _rows(1000, 600), partition_by=["city"], mode="overwrite")
    write_deltalake(str(location), _rows(5000, 300), partition_by=["city"], mode="append")
    DeltaTable(str(location)).delete("id < 1100")
    return location


@on_both_engines
@pytest.mark.parametrize("where, keep", [
    ("", lambda r: True),
    (" where city = 'oslo'", lambda r: r["city"] == "oslo"),
    (" where city = 'a/b %c' and id > 5100", lambda r: r["city"] == "a/b %c" and r["id"] > 5100),
    (" where day = '2024-01-03' or amount is null", lambda r: r["day"] == dt.date(2024, 1, 3) or r["amount"] is None),
])
def test_a_delta_table_serves_its_current_version_only(server, client, events, where, keep):
    got = client.read("lake", "events", "select id, city, day, amount from lake.events" + where)
    assert sorted(_wire(r) for r in got.to_pylist()) == _expected(events, keep)


def test_the_plan_carries_deltas_version_and_schema(server, client, events):
    body = client.plan("lake", "events", "select id from lake.events where city = 'lima'")
    snap = server.warehouse.snapshot("lake", "events")
    assert snap.version == DeltaTable(str(events)).version() >= 3
    assert {t["version"] for t in body["partitions"].values()} == {snap.version}
    assert {int(t) for t in body["partitions"]} == {t.tablet_id for t in snap.tablets if t.partition["city"] == "lima"}
    on_disk = {p.relative_to(events).as_posix() for p in events.rglob("*.parquet")}
    served = {f.path for f in snap.files}
    assert served < on_disk  # the files of older versions are still there, and not served
    schema = server.planner.schemas.schema(snap)
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == \
        [("id", "bigint"), ("city", "string"), ("day", "date"), ("amount", "double")]


def test_an_old_plan_reads_its_version_and_a_new_plan_the_new_one(server, client, events, be_addr):
    """Delta keeps an overwritten version's files until they are vacuumed: a plan made before
    an overwrite, read while the overwrite commits, reads exactly its own version (the plan
    pins the files)."""
    from support.readers import Reader, plan_for

    before = _expected(events)
    version = DeltaTable(str(events)).version()
    opaque, tablets = plan_for(client, "lake", "events", "select id, city, day, amount from lake.events")
    committed = []

    def overwrite() -> None:  # a writer commits a new version while the plan is read
        write_deltalake(str(events), _rows(9000, 30), partition_by=["city"], mode="overwrite")
        committed.append(True)

    try:
        reader = Reader(be_addr)
        try:
            rows = reader.read_tablets("lake", "events", opaque, tablets, after_first_batch=overwrite)
        finally:
            reader.close()
        assert committed
        assert sorted(tuple(r.values()) for r in rows) == before
        got = client.read("lake", "events", "select id from lake.events")
        assert sorted(r["id"] for r in got.to_pylist()) == list(range(9000, 9030))
    finally:
        DeltaTable(str(events)).restore(version)  # the module's other tests read the rows of before
    assert server.warehouse.snapshot("lake", "events").version == version + 2
    assert sorted(_wire(r) for r in client.read("lake", "events", "select id, city, day, amount from lake.events")
                  .to_pylist()) == before


def test_a_vacuumed_version_is_gone(server, client, be_addr):
    from support.readers import Reader, plan_for

    location = _table(server, "vacuumed")
    write_deltalake(str(location), _rows(0, 50))
    opaque, tablets = plan_for(client, "lake", "vacuumed", "select id from lake.vacuumed")
    write_deltalake(str(location), _rows(100, 5), mode="overwrite")
    DeltaTable(str(location)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    reader = Reader(be_addr)
    try:
        opened = reader.open("lake", "vacuumed", opaque, tablets)
        assert opened.status.status_code != 0 and "is gone" in opened.status.error_msgs[0], opened.status
    finally:
        reader.close()
    assert sorted(r["id"] for r in client.read("lake", "vacuumed", "select id from lake.vacuumed").to_pylist()) == \
        list(range(100, 105))


def _since(fe_url: str, table: str, since, consumer: str | None = None):
    import httpx
    from support.servers import basic

    body = {"sql": f"select id from lake.{table}", "since_version": since}
    if consumer is not None:
        body["consumer"] = consumer
    return httpx.post(f"{fe_url}/api/lake/{table}/_query_plan", content=json.dumps(body),
                      headers={"Authorization": basic("root", "")}, timeout=60)


def _ids_since(client, table: str, since: int) -> tuple[list[int], int]:
    sql = f"select id from lake.{table}"
    plan = client.plan("lake", table, sql, since_version=since)
    rows = client.read("lake", table, sql, plan=plan).column("id").to_pylist() if plan["partitions"] else []
    return sorted(rows), plan["version"]


def test_incremental_reads_of_a_delta_table_are_its_logs_appends(server, client, fe_url):
    """since_version on a Delta table: the files added with a data change by the commits
    after that version; a compaction (no data change) is skipped; a delete since that version
    is refused, as is a version the log does not hold."""
    location = _table(server, "appends")
    write_deltalake(str(location), _rows(0, 100))                            # version 0
    write_deltalake(str(location), _rows(100, 50), mode="append")            # 1
    write_deltalake(str(location), _rows(150, 25), mode="append")            # 2
    server.warehouse.invalidate("lake", "appends")
    assert _ids_since(client, "appends", 0) == (list(range(100, 175)), 2)
    assert _ids_since(client, "appends", 1) == (list(range(150, 175)), 2)
    assert _ids_since(client, "appends", 2) == ([], 2)
    DeltaTable(str(location)).optimize.compact()                             # 3: the same rows in fewer files
    write_deltalake(str(location), _rows(500, 10), mode="append")            # 4
    server.warehouse.invalidate("lake", "appends")
    assert _ids_since(client, "appends", 2) == (list(range(500, 510)), 4)
    r = _since(fe_url, "appends", 0)  # its appended files were compacted into others
    assert r.status_code == 409 and "full read" in r.json()["exception"], r.text
    DeltaTable(str(location)).delete("id = 3")                               # 5
    server.warehouse.invalidate("lake", "appends")
    r = _since(fe_url, "appends", 4)
    assert r.status_code == 409 and "version 5 removed rows" in r.json()["exception"], r.text
    assert _ids_since(client, "appends", 5) == ([], 5)
    r = _since(fe_url, "appends", 6)
    assert r.status_code == 404 and "no Delta version 6" in r.json()["exception"], r.text
    # a consumer's position is a Delta version: monotonic, and one the table has
    assert client.commit("lake", "appends", "d1", 4) == {"consumer": "d1", "version": 4}
    write_deltalake(str(location), _rows(900, 5), mode="append")             # 6
    server.warehouse.invalidate("lake", "appends")
    nxt = client.plan("lake", "appends", "select id from lake.appends where id >= 3", consumer="d2")
    assert "since_version" not in nxt  # d2 committed nothing: the whole table
    r = _since(fe_url, "appends", 5, consumer="d1")  # an explicit since_version wins over the position
    assert r.status_code == 200 and r.json()["since_version"] == 5 and r.json()["version"] == 6
    assert client.commit("lake", "appends", "d1", 6)["version"] == 6
    import httpx
    from support.servers import basic
    back = httpx.post(f"{fe_url}/api/lake/appends/_consumers/d1/commit", content=json.dumps({"version": 5}),
                      headers={"Authorization": basic("root", "")}, timeout=60)
    assert back.status_code == 409 and "never moves back" in back.json()["exception"]
    ahead = httpx.post(f"{fe_url}/api/lake/appends/_consumers/d1/commit", content=json.dumps({"version": 7}),
                       headers={"Authorization": basic("root", "")}, timeout=60)
    assert ahead.status_code == 404, ahead.text
