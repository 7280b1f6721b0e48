"""Delta column mapping (``name`` and ``id`` modes): data files name columns by physical
names, so a rename changes only the schema and a column dropped and added again is a new
column (the old files' values of it are gone). Every reader resolves columns through the
plan's file names, on both engines, the MySQL port and direct reads, against delta-rs' own
reader of the same table.

delta-rs writes column-mapped tables but does not rename or drop columns, so those
schema changes are written here as the Delta protocol describes them (a metaData action
with the new schema; physical names and field ids kept, a re-added column a new pair)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

on_both_engines = pytest.mark.usefixtures("engine")


def _oracle(location: Path, where: str = "") -> list[tuple]:
    table = QueryBuilder().register("t", DeltaTable(str(location))).execute(f"select id, label, x from t{where}")
    return sorted(tuple(r.values()) for r in pa.table(table.read_all()).to_pylist())


def _evolve(location: Path) -> None:
    """A commit renaming ``v`` to ``label`` and dropping ``x``, then adding ``x`` again."""
    log = location / "_delta_log"
    version = max(int(p.name[:20]) for p in log.glob("*.json"))
    metadata = next(json.loads(line)["metaData"] for line in (log / f"{0:020d}.json").read_text().splitlines()
                    if "metaData" in json.loads(line))
    schema = json.loads(metadata["schemaString"])
    for f in schema["fields"]:
        if f["name"] == "v":
            f["name"] = "label"
    top = max(int(f["metadata"]["delta.columnMapping.id"]) for f in schema["fields"])
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "x"]
    schema["fields"].append({"name": "x", "type": "double", "nullable": True,
                             "metadata": {"delta.columnMapping.id": top + 1,
                                          "delta.columnMapping.physicalName": "col-x-again"}})
    metadata["schemaString"] = json.dumps(schema)
    metadata["configuration"]["delta.columnMapping.maxColumnId"] = str(top + 1)
    commit = [{"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "RENAME COLUMN"}},
              {"metaData": metadata}]
    (log / f"{version + 1:020d}.json").write_text("\n".join(json.dumps(a) for a in commit) + "\n")


@pytest.fixture(scope="module", params=["name", "id"])
def mapped(request, server):
    """lake.mapped_<mode>: 400 rows written, ``v`` renamed to ``label``, ``x`` dropped and
    added again, 100 rows appended with the new schema."""
    table = f"mapped_{request.param}"
    location = server.warehouse.table_path("lake", table)
    shutil.rmtree(location, ignore_errors=True)
    location.parent.mkdir(parents=True, exist_ok=True)
    ids = list(range(400))
    write_deltalake(str(location), pa.table({"id": pa.array(ids, pa.int64()), "v": [f"r{i}" for i in ids],
                                             "x": pa.array([i * 0.5 for i in ids], pa.float64())}),
                    configuration={"delta.columnMapping.mode": request.param})
    _evolve(location)
    more = list(range(1000, 1100))
    write_deltalake(str(location), pa.table({"id": pa.array(more, pa.int64()), "label": [f"n{i}" for i in more],
                                             "x": pa.array([None if i % 9 == 0 else i * 2.0 for i in more])}),
                    mode="append")
    oracle = _oracle(location)
    assert len(oracle) == 500 and oracle[0] == (0, "r0", None) and oracle[-1] == (1099, "n1099", 2198.0)
    server.warehouse.invalidate("lake", table)
    return table, location


@on_both_engines
@pytest.mark.parametrize("where", ["", " where label = 'r7' or label like 'n10%'", " where x > 2100 or id < 3",
                                   " where id % 5 = 1 and x is null"])
def test_columns_are_read_by_their_names_in_the_files(server, client, mapped, where):
    table, location = mapped
    got = client.read("lake", table, f"select id, label, x from lake.{table}{where}")
    assert sorted(tuple(r.values()) for r in got.to_pylist()) == _oracle(location, where)


def test_direct_reads_and_the_mysql_port_resolve_the_same_names(server, fe_url, mapped):
    import pymysql

    from starscan.client import connect

    table, location = mapped
    if not server.users.exists("cm_direct"):
        server.users.set_password("cm_direct", "pw", create=True)
    server.users.grant("cm_direct", "lake.*")
    server.users.grant("cm_direct", "direct_read:lake.*")
    conn = connect(fe_url, "cm_direct", "pw")
    got = conn.read_arrow(f"lake.{table}", ["id", "label", "x"], "x > 2100 or id < 3", direct="auto")
    assert conn.direct_tablets > 0
    assert sorted(tuple(r.values()) for r in got.to_pylist()) == _oracle(location, " where x > 2100 or id < 3")
    mysql = pymysql.connect(host="127.0.0.1", port=server.query_port, user="root", password="", connect_timeout=20,
                            read_timeout=120)
    try:
        with mysql.cursor() as cur:
            cur.execute(f"select id, label from lake.{table} where id < 3 or id >= 1097")
            rows = sorted((int(i), label) for i, label in cur.fetchall())
    finally:
        mysql.close()
    assert rows == [(0, "r0"), (1, "r1"), (2, "r2"), (1097, "n1097"), (1098, "n1098"), (1099, "n1099")]


@pytest.fixture(scope="module")
def mapped_parts(server):
    """lake.mapped_parts: partitioned by a string (a NULL and a '%' among its values), a
    long and a date, with column mapping: delta-rs puts the files in random prefixes, so
    the values are only in the log."""
    import datetime as dt

    location = server.warehouse.table_path("lake", "mapped_parts")
    shutil.rmtree(location, ignore_errors=True)
    location.parent.mkdir(parents=True, exist_ok=True)
    ids = list(range(300))
    write_deltalake(str(location), pa.table({
        "id": pa.array(ids, pa.int64()),
        "p": [None if i % 7 == 0 else ("b%41" if i % 3 == 0 else f"p{i % 3}") for i in ids],
        "q": pa.array([i % 4 for i in ids], pa.int64()),
        "d": [dt.date(2024, 1, 1 + i % 2) for i in ids],
        "v": [i * 0.25 for i in ids]}), partition_by=["p", "q", "d"], configuration={"delta.columnMapping.mode": "name"})
    assert not any("=" in f.parent.name for f in location.rglob("*.parquet"))
    server.warehouse.invalidate("lake", "mapped_parts")
    return location


def _parts_oracle(location: Path, where: str = "") -> list[tuple]:
    """delta-rs' rows, with dates as the StarRocks wire's DATE text (what the clients give)."""
    table = QueryBuilder().register("t", DeltaTable(str(location))).execute(f"select id, p, q, d, v from t{where}")
    return sorted((i, p, q, d.isoformat(), v) for i, p, q, d, v in (tuple(r.values()) for r in
                                                                      pa.table(table.read_all()).to_pylist()))


@on_both_engines
@pytest.mark.parametrize("where", ["", " where p = 'b%41' and q = 3", " where p is null or d = '2024-01-02'",
                                   " where q in (1, 2) and v > 50"])
def test_a_partitioned_column_mapped_table_reads_its_partition_values_from_the_log(server, client, mapped_parts, where):
    got = client.read("lake", "mapped_parts", f"select id, p, q, d, v from lake.mapped_parts{where}")
    want = _parts_oracle(mapped_parts, where)
    assert want and sorted(tuple(r.values()) for r in got.to_pylist()) == want


def test_partition_values_from_the_log_through_direct_reads_and_the_mysql_port(server, fe_url, mapped_parts):
    import pymysql

    from starscan.client import connect

    new_user = "cm_parts"
    if not server.users.exists(new_user):
        server.users.set_password(new_user, "pw", create=True)
    server.users.grant(new_user, "lake.*")
    server.users.grant(new_user, "direct_read:lake.*")
    conn = connect(fe_url, new_user, "pw")
    got = conn.read_arrow("lake.mapped_parts", ["id", "p", "q", "d", "v"], "p = 'b%41' or q = 0", direct="auto")
    assert conn.direct_tablets > 0
    assert sorted(tuple(r.values()) for r in got.to_pylist()) == _parts_oracle(mapped_parts, " where p = 'b%41' or q = 0")
    mysql = pymysql.connect(host="127.0.0.1", port=server.query_port, user="root", password="", connect_timeout=20,
                            read_timeout=120)
    try:
        with mysql.cursor() as cur:
            cur.execute("select id, p, q from lake.mapped_parts where id < 8")
            rows = sorted((int(i), p, int(q)) for i, p, q in cur.fetchall())
    finally:
        mysql.close()
    assert rows == [(i, p, q) for i, p, q, _, _ in _parts_oracle(mapped_parts, " where id < 8")]


@on_both_engines
def test_nested_fields_are_read_by_their_physical_names(server, client):
    """A struct, an array of structs and a map of structs under column mapping, after a
    commit that renames a field nested in the struct (``s.a`` to ``s.alpha``): every struct
    field is found by its physical name, so the renamed one keeps its data."""
    location = server.warehouse.table_path("lake", "mapped_nested")
    shutil.rmtree(location, ignore_errors=True)
    location.parent.mkdir(parents=True, exist_ok=True)
    ids = list(range(60))
    write_deltalake(str(location), pa.table({
        "id": pa.array(ids, pa.int64()),
        "s": pa.array([None if i % 9 == 0 else {"a": i, "b": f"b{i}"} for i in ids],
                      pa.struct([("a", pa.int64()), ("b", pa.string())])),
        "l": pa.array([[{"c": i}, None] if i % 4 else None for i in ids], pa.list_(pa.struct([("c", pa.int32())]))),
        "m": pa.array([[("k", {"d": i / 2})] if i % 3 else [] for i in ids],
                      pa.map_(pa.string(), pa.struct([("d", pa.float64())])))}),
        configuration={"delta.columnMapping.mode": "name"})
    log = location / "_delta_log"
    metadata = next(json.loads(line)["metaData"] for line in (log / f"{0:020d}.json").read_text().splitlines()
                    if "metaData" in json.loads(line))
    schema = json.loads(metadata["schemaString"])
    struct = next(f for f in schema["fields"] if f["name"] == "s")
    next(f for f in struct["type"]["fields"] if f["name"] == "a")["name"] = "alpha"
    metadata["schemaString"] = json.dumps(schema)
    (log / f"{1:020d}.json").write_text("\n".join(json.dumps(a) for a in [
        {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "RENAME COLUMN"}},
        {"metaData": metadata}]) + "\n")
    server.warehouse.invalidate("lake", "mapped_nested")
    got = client.read("lake", "mapped_nested", "select id, s, l, m from lake.mapped_nested where id % 2 = 1")

    def row(r: dict) -> tuple:
        m = r["m"]
        m = sorted(m.items()) if isinstance(m, dict) else sorted(tuple(kv) for kv in (m or []))
        return r["id"], r["s"], r["l"], m

    want = [(i, None if i % 9 == 0 else {"alpha": i, "b": f"b{i}"}, [{"c": i}, None] if i % 4 else None,
             [("k", {"d": i / 2})] if i % 3 else []) for i in ids if i % 2 == 1]
    assert sorted((row(r) for r in got.to_pylist()), key=lambda t: t[0]) == want
