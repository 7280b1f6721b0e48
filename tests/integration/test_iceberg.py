"""Iceberg tables from a pyiceberg SQL catalog on SQLite (starscan.tables.iceberg), served beside
the warehouse's folders: the rows of the current snapshot on both engines, compared with
Spark SQL over the rows pyiceberg itself reads for that snapshot; what starscan would read
wrongly is refused by name; renamed, re-added and promoted columns are read by field id.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from support.servers import basic, running_server

ROWS = 1200


def _rows(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "city": pa.array([None if i % 13 == 0 else ["oslo", "lima", "a/b c"][i % 3] for i in ids]),
        "amount": pa.array([Decimal(i) / 4 for i in ids], pa.decimal128(10, 2)),
        "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i % 9) for i in ids], pa.date32()),
        "score": pa.array([float("nan") if i % 17 == 0 else i * 0.5 for i in ids], pa.float64()),
    })


@pytest.fixture(scope="module")
def catalog_props(tmp_path_factory):
    root = tmp_path_factory.mktemp("iceberg")
    return {"name": "lake", "type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}


@pytest.fixture(scope="module")
def catalog(catalog_props):
    from pyiceberg.catalog import load_catalog

    cat = load_catalog("lake", **{k: v for k, v in catalog_props.items() if k != "name"})
    cat.create_namespace("ice")
    return cat


@pytest.fixture(scope="module")
def orders(catalog):
    """ice.orders: appended twice, then rows deleted (copy-on-write: files rewritten)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    data = _rows(0, ROWS)
    table = catalog.create_table("ice.orders", schema=data.schema)
    with table.update_spec() as spec:
        spec.add_field("city", IdentityTransform(), "city")
    assert PartitionSpec and PartitionField  # identity partitions: data/city=.../ folders
    table.append(data)
    table.append(_rows(5000, 300))
    table.delete("id < 100")
    return catalog.load_table("ice.orders")


@pytest.fixture(scope="module")
def ice_server(spark, base_settings, catalog_props, orders, tmp_path_factory, warehouse_dir):
    settings = base_settings.model_copy(update={"iceberg_catalog": catalog_props, "iceberg_namespaces": ["ice"]})
    with running_server(spark, settings) as srv:
        yield srv


def _read(srv, sql: str, table: str = "orders"):
    from starscan.client import StarscanClient

    return StarscanClient(f"http://127.0.0.1:{srv.http_port}", "root", "").read("ice", table, sql)


def _wire(value):
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and value != value:
        return "NaN"
    return value


def _direct_reader(ice_server):
    """A client of a user who may read ice.* directly."""
    from starscan.client import connect

    if not ice_server.users.exists("ice_direct"):
        ice_server.users.set_password("ice_direct", "pw", create=True)
    ice_server.users.grant("ice_direct", "ice.*")
    ice_server.users.grant("ice_direct", "direct_read:ice.*")
    return connect(f"http://127.0.0.1:{ice_server.http_port}", "ice_direct", "pw")


@pytest.mark.parametrize("engine", ["auto", "sql"])
@pytest.mark.parametrize("where", [
    "", " where city = 'oslo'", " where city is null or id > 5100", " where amount >= 100.5 and day = '2024-01-03'",
    " where score > 300", " where city = 'a/b c' and upper(city) = 'A/B C'",
])
def test_scans_of_an_iceberg_table_equal_spark_over_its_snapshot(ice_server, spark, orders, engine, where):
    ice_server.ops.update_config({"scan_engine": engine})
    try:
        sql = "select id, city, amount, day, score from ice.orders" + where
        got = _read(ice_server, sql)
        snapshot_rows = orders.scan().to_arrow().to_pylist()
        spark.createDataFrame(snapshot_rows, "id long, city string, amount decimal(10,2), day date, score double") \
            .createOrReplaceTempView("ice_orders_oracle")
        want = spark.sql(sql.replace("ice.orders", "ice_orders_oracle")).collect()
        assert sorted((tuple(_wire(v) for v in r.values()) for r in got.to_pylist()), key=str) == \
            sorted((tuple(_wire(v) for v in row) for row in want), key=str)
    finally:
        ice_server.ops.update_config({"scan_engine": "auto"})


def test_the_catalog_lists_iceberg_namespaces_and_the_plan_pins_the_snapshot(ice_server, catalog, orders):
    wh = ice_server.warehouse
    assert "ice" in wh.databases() and wh.tables("ice") == ["orders"]
    snap = wh.snapshot("ice", "orders")
    served = {f.path for f in snap.files}
    assert served == {_relative(t.file.file_path, snap.location) for t in orders.scan().plan_files()}
    assert snap.partition_columns == ()
    schema = ice_server.planner.schemas.schema(snap)
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("id", "bigint"), ("city", "string"), ("amount", "decimal(10,2)"), ("day", "date"), ("score", "double")]
    before = _read(ice_server, "select id from ice.orders").num_rows
    table = catalog.load_table("ice.orders")
    table.append(_rows(9000, 10))
    wh.invalidate("ice", "orders")
    assert wh.snapshot("ice", "orders").version != snap.version
    assert _read(ice_server, "select id from ice.orders").num_rows == before + 10


@pytest.fixture(scope="module")
def evolved(catalog):
    """ice.evolved: ``city`` renamed to ``town``, ``score`` dropped and added again (a new
    field id: the old files' values are gone), ``qty`` promoted from int to long, then rows
    appended with the new schema. Column names alone would read the old ``score`` values
    and miss ``town`` in the old files."""
    from pyiceberg.types import DoubleType, LongType

    first = _rows(0, 300).append_column("qty", pa.array([i % 7 for i in range(300)], pa.int32()))
    table = catalog.create_table("ice.evolved", schema=first.schema)
    table.append(first)
    with table.update_schema() as update:
        update.rename_column("city", "town")
        update.delete_column("score")
        update.update_column("qty", LongType())
    with table.update_schema() as update:
        update.add_column("score", DoubleType())
    more = list(range(1000, 1100))
    table.append(pa.table({
        "id": pa.array(more, pa.int64()), "town": pa.array([["oslo", "rome"][i % 2] for i in more]),
        "amount": pa.array([Decimal(i) / 4 for i in more], pa.decimal128(10, 2)),
        "day": pa.array([dt.date(2024, 2, 1)] * len(more), pa.date32()),
        "qty": pa.array([i * 3_000_000_000 for i in more], pa.int64()),
        "score": pa.array([None if i % 5 == 0 else i * 1.5 for i in more], pa.float64())}))
    return catalog.load_table("ice.evolved")


@pytest.mark.parametrize("scan_engine", ["sql", "auto"])
@pytest.mark.parametrize("where", ["", " where town = 'oslo' and id < 50", " where score > 1500 or qty > 3000000000000",
                                   " where upper(town) = 'ROME' or score is null"])
def test_columns_renamed_dropped_or_promoted_are_read_by_field_id(ice_server, spark, evolved, scan_engine, where):
    from support.readers import engine_counts

    ice_server.ops.update_config({"scan_engine": scan_engine})
    arrow_before = engine_counts(ice_server).get("arrow", 0)
    try:
        ice_server.warehouse.invalidate("ice", "evolved")
        sql = "select id, town, qty, score from ice.evolved" + where
        got = _read(ice_server, sql, table="evolved")
        oracle = evolved.scan(selected_fields=("id", "town", "qty", "score")).to_arrow()  # pyiceberg reads by id
        assert oracle.column("score").null_count >= 300 and oracle.column("town").null_count < 300
        spark.createDataFrame(oracle.to_pylist(), "id long, town string, qty long, score double") \
            .createOrReplaceTempView("ice_evolved_oracle")
        want = spark.sql(sql.replace("ice.evolved", "ice_evolved_oracle")).collect()
        assert sorted((tuple(_wire(v) for v in r.values()) for r in got.to_pylist()), key=str) == \
            sorted((tuple(_wire(v) for v in row) for row in want), key=str)
        if scan_engine == "auto" and "upper" not in where:  # the arrow engine resolved the ids
            assert engine_counts(ice_server).get("arrow", 0) == arrow_before + 1
    finally:
        ice_server.ops.update_config({"scan_engine": "auto"})


def test_direct_reads_resolve_iceberg_field_ids_too(ice_server, evolved):
    conn = _direct_reader(ice_server)
    got = conn.read_arrow("ice.evolved", ["id", "town", "score"], "id < 5 or id >= 1098", direct="auto")
    assert conn.direct_tablets > 0
    assert sorted(tuple(r.values()) for r in got.to_pylist()) == [
        (0, None, None), (1, "lima", None), (2, "a/b c", None), (3, "oslo", None), (4, "lima", None),
        (1098, "oslo", 1647.0), (1099, "rome", 1648.5)]


def test_nested_fields_renamed_or_added_are_read_by_field_id(ice_server, catalog):
    """A struct, a list of structs and a map of structs: a nested field renamed (``s.a`` to
    ``s.alpha``) keeps its data, one added later (``s.c``) reads as NULL in the older
    file. Oracle: pyiceberg's reader, which resolves every field by id."""
    from pyiceberg.types import StringType

    s_type = pa.struct([("a", pa.int64()), ("b", pa.string())])
    l_type = pa.list_(pa.struct([("c", pa.int32())]))
    m_type = pa.map_(pa.string(), pa.struct([("d", pa.float64())]))
    ids = list(range(40))
    first = pa.table({
        "id": pa.array(ids, pa.int64()),
        "s": pa.array([None if i % 9 == 0 else {"a": i, "b": f"b{i}"} for i in ids], s_type),
        "l": pa.array([[{"c": i}, None] if i % 4 else None for i in ids], l_type),
        "m": pa.array([[("k", {"d": i / 2})] if i % 3 else [] for i in ids], m_type)})
    table = catalog.create_table("ice.nested", schema=first.schema)
    table.append(first)
    with table.update_schema() as update:
        update.rename_column("s.a", "alpha")
        update.add_column(("s", "c"), StringType())
    more = [100, 101]
    table.append(pa.table({
        "id": pa.array(more, pa.int64()),
        "s": pa.array([{"alpha": i, "b": None, "c": f"c{i}"} for i in more],
                      pa.struct([("alpha", pa.int64()), ("b", pa.string()), ("c", pa.string())])),
        "l": pa.array([None, []], l_type), "m": pa.array([None, [("z", None)]], m_type)}))
    table = catalog.load_table("ice.nested")
    ice_server.warehouse.invalidate("ice", "nested")

    def rows(found: list[dict]) -> list[tuple]:
        out = []
        for r in found:
            m = r["m"]
            m = sorted(m.items()) if isinstance(m, dict) else sorted(tuple(kv) for kv in (m or [])) if m is not None else None
            out.append((r["id"], r["s"], r["l"], m))
        return sorted(out, key=lambda t: t[0])

    want = [r for r in rows(table.scan().to_arrow().to_pylist()) if r[0] % 2 == 1 or r[0] >= 100]
    assert want[0][1] == {"alpha": 1, "b": "b1", "c": None}
    got = _read(ice_server, "select id, s, l, m from ice.nested where id % 2 = 1 or id >= 100", table="nested")
    assert rows(got.to_pylist()) == want


@pytest.fixture(scope="module")
def orc_table(catalog):
    """ice.orc_rows: 100 rows in a Parquet file (pyiceberg's append), then 2,000 rows in an
    ORC file of several stripes (as Iceberg's ORC writer makes it), 1 row in 10 of which an
    ORC position delete file deletes."""
    from support.iceberg_deletes import write_position_deletes
    from support.iceberg_orc import append_orc_file

    def rows(ids: list[int]) -> pa.Table:
        return pa.table({
            "id": pa.array(ids, pa.int64()), "name": pa.array([None if i % 11 == 0 else f"n{i}" for i in ids], pa.string()),
            "day": pa.array([dt.date(2024, 1, 1 + i % 28) for i in ids], pa.date32()),
            "s": pa.array([{"a": i % 5} for i in ids], pa.struct([("a", pa.int32())]))})

    table = catalog.create_table("ice.orc_rows", schema=rows([0]).schema)
    table.append(rows(list(range(100))))
    orc_file = append_orc_file(table, rows(list(range(100, 2100))), stripe_rows=300)
    write_position_deletes(table, {orc_file: list(range(0, 2000, 10))}, file_format="orc")  # the table's format
    return catalog.load_table("ice.orc_rows")


@pytest.mark.parametrize("scan_engine", ["sql", "auto"])
@pytest.mark.parametrize("where", ["", " where name is null or id > 2090", " where day = '2024-01-05' and id % 3 = 0"])
def test_orc_data_files_are_read_with_their_deletes(ice_server, spark, orc_table, scan_engine, where):
    import pyarrow.orc

    snap = ice_server.warehouse.snapshot("ice", "orc_rows")
    orc_paths = [f.path for f in snap.files if f.path.endswith(".orc")]
    assert orc_paths and pyarrow.orc.ORCFile(f"{snap.location}/{orc_paths[0]}").nstripes > 1
    ice_server.ops.update_config({"scan_engine": scan_engine})
    try:
        oracle = orc_table.scan().to_arrow()  # pyiceberg reads ORC and applies the deletes
        assert oracle.num_rows == 100 + 1800
        spark.createDataFrame(oracle.to_pylist(), "id long, name string, day date, s struct<a: int>") \
            .createOrReplaceTempView("ice_orc_oracle")
        sql = "select id, name, day, s from ice.orc_rows" + where
        want = spark.sql(sql.replace("ice.orc_rows", "ice_orc_oracle")).collect()
        got = _read(ice_server, sql, table="orc_rows")
        assert sorted((tuple(_wire(v) for v in r.values()) for r in got.to_pylist()), key=str) == \
            sorted((tuple(_wire(v) for v in (r.id, r.name, r.day, r.s.asDict())) for r in want), key=str)
    finally:
        ice_server.ops.update_config({"scan_engine": "auto"})


@pytest.mark.parametrize("kind", ["orc", "avro"])
def test_direct_reads_read_orc_and_avro_data_files_too(ice_server, request, kind):
    """The client's reader (the BE's code) reads ORC and Avro data files, with their deletes."""
    if kind == "orc":
        table = request.getfixturevalue("orc_table")
        rows, where, keep = table.scan().to_arrow().to_pylist(), "id >= 2080 or id < 3", lambda i: i >= 2080 or i < 3
    else:
        _, rows = request.getfixturevalue("avro_table")
        where, keep = "id >= 1500 or id < 3", lambda i: i >= 1500 or i < 3
    conn = _direct_reader(ice_server)
    got = conn.read_arrow(f"ice.{kind}_rows", ["id", "name"], where, direct="auto")
    assert conn.direct_tablets > 0
    assert sorted(tuple(r.values()) for r in got.to_pylist()) == sorted((r["id"], r["name"]) for r in rows if keep(r["id"]))


@pytest.fixture(scope="module")
def avro_table(catalog):
    """ice.avro_rows: 50 rows in a Parquet file (pyiceberg's append), then 1,500 rows in an
    Avro data file (as Iceberg's Avro writer makes it: tests/support/iceberg_avro.py), 1 row
    in 7 of which an Avro position delete file deletes; the rows the table holds then (the oracle:
    pyiceberg reads no Avro data files)."""
    from decimal import Decimal

    from support.iceberg_avro import append_avro_file
    from support.iceberg_deletes import write_position_deletes

    def row(i: int) -> dict:
        return {"id": i, "name": None if i % 11 == 0 else f"n{i}", "day": dt.date(2024, 1, 1 + i % 28),
                "amount": Decimal(i) / 100, "s": {"a": i % 5, "tags": [f"t{i % 3}", None]},
                "m": {f"k{i % 4}": i * 0.5}}

    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.date32()),
                        ("amount", pa.decimal128(12, 2)),
                        ("s", pa.struct([("a", pa.int32()), ("tags", pa.list_(pa.string()))])),
                        ("m", pa.map_(pa.string(), pa.float64()))])
    table = catalog.create_table("ice.avro_rows", schema=schema)
    table.append(pa.Table.from_pylist([row(i) for i in range(50)], schema=schema))
    ids = list(range(50, 1550))
    avro_file = append_avro_file(table, [row(i) for i in ids])
    deleted = set(range(0, 1500, 7))
    write_position_deletes(table, {avro_file: sorted(deleted)}, file_format="avro")  # deletes in the table's format
    kept = [row(i) for i in range(50)] + [row(i) for n, i in enumerate(ids) if n not in deleted]
    return catalog.load_table("ice.avro_rows"), kept


@pytest.mark.parametrize("scan_engine", ["sql", "auto"])
@pytest.mark.parametrize("where", ["", " where name is null or id > 1540 or (day = '2024-01-05' and id % 3 = 0)"])
def test_avro_data_files_are_read_with_their_deletes(ice_server, spark, avro_table, scan_engine, where):
    import fastavro

    snap = ice_server.warehouse.snapshot("ice", "avro_rows")
    avro_paths = [f.path for f in snap.files if f.path.endswith(".avro")]
    assert avro_paths
    with open(f"{snap.location}/{avro_paths[0]}", "rb") as f:  # an independent reader of the same file
        assert sum(1 for _ in fastavro.reader(f)) == 1500
    _, kept = avro_table
    ice_server.ops.update_config({"scan_engine": scan_engine})
    try:
        spark.createDataFrame(kept, "id long, name string, day date, amount decimal(12,2), "
                                    "s struct<a: int, tags: array<string>>, m map<string, double>") \
            .createOrReplaceTempView("ice_avro_oracle")
        sql = "select id, name, day, amount, s, m from ice.avro_rows" + where
        want = spark.sql(sql.replace("ice.avro_rows", "ice_avro_oracle")).collect()
        got = _read(ice_server, sql, table="avro_rows")
        assert len(want) > 0
        assert sorted((tuple(_wire(v) for v in r.values()) for r in got.to_pylist()), key=str) == \
            sorted((tuple(_wire(v) for v in (r.id, r.name, r.day, r.amount, {"a": r.s.a, "tags": r.s.tags},
                                             list(r.m.items()))) for r in want), key=str)
    finally:
        ice_server.ops.update_config({"scan_engine": "auto"})


@pytest.fixture(scope="module")
def v3_vectors(catalog, catalog_props):
    """ice.v3_dv: two Parquet files of 500 rows, then the table upgraded to format v3 with a
    deletion vector for each (one Puffin file; tests/support/iceberg_v3.py)."""
    from pathlib import Path

    from support.iceberg_v3 import commit_v3_deletion_vectors

    table = catalog.create_table("ice.v3_dv", schema=_rows(1, 1).schema)
    table.append(_rows(0, 500))
    table.append(_rows(1000, 500))
    table = catalog.load_table("ice.v3_dv")
    files = sorted(t.file.file_path for t in table.scan().plan_files())
    commit_v3_deletion_vectors(Path(catalog_props["uri"].removeprefix("sqlite:///")), table,
                               {files[0]: [0, 1, 250, 499], files[1]: list(range(0, 500, 5))})
    table = catalog.load_table("ice.v3_dv")
    assert table.metadata.format_version == 3 and table.scan().to_arrow().num_rows == 1000 - 4 - 100
    return table


@pytest.mark.parametrize("scan_engine", ["sql", "auto"])
@pytest.mark.parametrize("where", ["", " where id < 3 or id between 1000 and 1010", " where city = 'oslo'"])
def test_v3_deletion_vectors_leave_their_rows_out(ice_server, spark, v3_vectors, scan_engine, where):
    ice_server.ops.update_config({"scan_engine": scan_engine})
    try:
        oracle = v3_vectors.scan().to_arrow()  # pyiceberg applies Puffin deletion vectors
        spark.createDataFrame(oracle.to_pylist(), "id long, city string, amount decimal(10,2), day date, score double") \
            .createOrReplaceTempView("ice_v3_oracle")
        sql = "select id, city, amount, day, score from ice.v3_dv" + where
        want = spark.sql(sql.replace("ice.v3_dv", "ice_v3_oracle")).collect()
        got = _read(ice_server, sql, table="v3_dv")
        assert sorted((tuple(_wire(v) for v in r.values()) for r in got.to_pylist()), key=str) == \
            sorted((tuple(_wire(v) for v in row) for row in want), key=str)
    finally:
        ice_server.ops.update_config({"scan_engine": "auto"})


def test_direct_reads_apply_v3_deletion_vectors(ice_server, v3_vectors):
    conn = _direct_reader(ice_server)
    got = conn.read_arrow("ice.v3_dv", ["id"], "id < 10 or id >= 1490", direct="auto")
    assert conn.direct_tablets > 0
    want = sorted(r["id"] for r in v3_vectors.scan().to_arrow().to_pylist() if r["id"] < 10 or r["id"] >= 1490)
    assert sorted(got.column("id").to_pylist()) == want


@pytest.fixture(scope="module")
def position_deleted(catalog):
    """ice.posdel: three appends in row groups of 100 rows, then two DELETE snapshots of
    position delete files (the second with positions in two data files, one of them a
    position the first already deleted)."""
    from support.iceberg_deletes import write_position_deletes

    table = catalog.create_table("ice.posdel", schema=_rows(0, 5).schema,
                                 properties={"write.parquet.row-group-limit": "100"})
    for first in (0, 1000, 2000):
        table.append(_rows(first, 400))
    table = catalog.load_table("ice.posdel")
    by_first = {}
    for task in table.scan().plan_files():
        first_id = pa.parquet.read_table(task.file.file_path.removeprefix("file://"), columns=["id"])["id"][0].as_py()
        by_first[first_id] = task.file.file_path
    write_position_deletes(table, {by_first[0]: [0, 99, 100, 250, 399]})
    write_position_deletes(catalog.load_table("ice.posdel"),
                           {by_first[0]: [250, 251], by_first[2000]: list(range(150, 260))})
    return catalog.load_table("ice.posdel")


@pytest.mark.parametrize("scan_engine", ["sql", "auto"])
@pytest.mark.parametrize("where", ["", " where id between 90 and 260 or id >= 2140", " where upper(city) = 'OSLO'"])
def test_position_deletes_leave_their_rows_out(ice_server, spark, position_deleted, scan_engine, where):
    ice_server.ops.update_config({"scan_engine": scan_engine})
    try:
        ice_server.warehouse.invalidate("ice", "posdel")
        sql = "select id, city, score from ice.posdel" + where
        got = _read(ice_server, sql, table="posdel")
        oracle = position_deleted.scan(selected_fields=("id", "city", "score")).to_arrow()  # applies the deletes
        assert oracle.num_rows == 1200 - 6 - 110
        spark.createDataFrame(oracle.to_pylist(), "id long, city string, score double") \
            .createOrReplaceTempView("ice_posdel_oracle")
        want = spark.sql(sql.replace("ice.posdel", "ice_posdel_oracle")).collect()
        assert sorted((tuple(_wire(v) for v in r.values()) for r in got.to_pylist()), key=str) == \
            sorted((tuple(_wire(v) for v in row) for row in want), key=str)
    finally:
        ice_server.ops.update_config({"scan_engine": "auto"})


class _Commits:
    """An Iceberg table's commits and, beside it, the rows the spec says it holds: an
    equality delete removes the rows of earlier commits (a lower sequence number) whose
    values in its columns equal a delete row's (NULL equal to NULL), within its partition
    when it has one. pyiceberg cannot read equality deletes; this is the oracle."""

    def __init__(self, catalog, name: str, partition_by: str | None = None):
        from pyiceberg.transforms import IdentityTransform

        self.catalog, self.name, self.partition_by = catalog, name, partition_by
        self.rows: list[tuple[int, dict]] = []   # (commit, row)
        self.commit = 0
        table = catalog.create_table(name, schema=_rows(0, 5).schema, properties={"write.parquet.row-group-limit": "100"})
        if partition_by:
            with table.update_spec() as spec:
                spec.add_field(partition_by, IdentityTransform(), partition_by)

    def append(self, data: pa.Table) -> None:
        self.catalog.load_table(self.name).append(data)
        self.commit += 1
        self.rows += [(self.commit, row) for row in data.to_pylist()]

    def delete(self, keys: pa.Table, partition_value=None) -> None:
        from pyiceberg.typedef import Record
        from support.iceberg_deletes import write_equality_deletes

        table = self.catalog.load_table(self.name)
        write_equality_deletes(table, keys, Record(partition_value) if self.partition_by else None)
        self.commit += 1
        deleted = {tuple(row[c] for c in keys.column_names) for row in keys.to_pylist()}
        self.rows = [(commit, row) for commit, row in self.rows
                     if not (tuple(row[c] for c in keys.column_names) in deleted
                             and (not self.partition_by or row[self.partition_by] == partition_value))]

    def expected(self) -> list[dict]:
        return [row for _, row in self.rows]


@pytest.fixture(scope="module")
def equality_deleted(catalog):
    """ice.upserts, as a Flink upsert job leaves it: appends, equality deletes by id (one
    naming an id no row has), rows written again after their delete (they stay), a delete by
    two columns with a NULL in one; and ice.upserts_p, partitioned by city, with a delete in
    one partition only."""
    flat = _Commits(catalog, "ice.upserts")
    flat.append(_rows(0, 400))
    flat.append(_rows(1000, 400))
    flat.delete(pa.table({"id": pa.array([5, 17, 1003, 1399, 99999], pa.int64())}))
    again = _rows(5, 1).to_pylist() + _rows(17, 1).to_pylist()
    flat.append(pa.Table.from_pylist([{**r, "city": "upserted"} for r in again], schema=_rows(0, 5).schema))
    flat.delete(pa.table({"city": pa.array([None, "lima"]), "day": pa.array([dt.date(2024, 1, 2), dt.date(2024, 1, 5)])}))
    flat.delete(pa.table({"id": pa.array([20, 21], pa.int64())}))
    assert len(flat.expected()) < 800 - 5
    parted = _Commits(catalog, "ice.upserts_p", partition_by="city")
    parted.append(_rows(0, 300))
    parted.delete(pa.table({"id": pa.array([i for i in range(0, 300, 2)], pa.int64())}), partition_value="oslo")
    return {"upserts": flat, "upserts_p": parted}


@pytest.mark.parametrize("scan_engine", ["sql", "auto"])
@pytest.mark.parametrize("table", ["upserts", "upserts_p"])
@pytest.mark.parametrize("where", ["", " where id between 3 and 30 or id >= 1390", " where city is null or upper(city) = 'LIMA'"])
def test_equality_deletes_leave_the_rows_they_name_out(ice_server, spark, equality_deleted, scan_engine, table, where):
    ice_server.ops.update_config({"scan_engine": scan_engine})
    try:
        ice_server.warehouse.invalidate("ice", table)
        sql = f"select id, city, day, score from ice.{table}" + where
        got = _read(ice_server, sql, table=table)
        spark.createDataFrame(equality_deleted[table].expected(), "id long, city string, amount decimal(10,2), "
                              "day date, score double").createOrReplaceTempView(f"ice_{table}_oracle")
        want = spark.sql(sql.replace(f"ice.{table}", f"ice_{table}_oracle")).collect()
        assert sorted((tuple(_wire(v) for v in r.values()) for r in got.to_pylist()), key=str) == \
            sorted((tuple(_wire(v) for v in row) for row in want), key=str)
    finally:
        ice_server.ops.update_config({"scan_engine": "auto"})


def test_the_mysql_port_leaves_equality_deleted_rows_out(ice_server, equality_deleted):
    import pymysql

    with pymysql.connect(host="127.0.0.1", port=ice_server.query_port, user="root", password="",
                         connect_timeout=20, read_timeout=120) as conn, conn.cursor() as cur:
        cur.execute("select id, city from ice.upserts where id < 40")
        got = list(cur.fetchall())
    want = sorted((r["id"], r["city"]) for r in equality_deleted["upserts"].expected() if r["id"] < 40)
    assert sorted(got, key=str) == sorted(want, key=str) and len(got) < 40


def test_direct_reads_apply_position_and_equality_deletes(ice_server, equality_deleted, position_deleted):
    conn = _direct_reader(ice_server)
    got = conn.read_arrow("ice.upserts", ["id", "city"], direct=True)
    assert conn.direct_tablets > 0 and not conn.fallbacks
    assert sorted(map(tuple, (r.values() for r in got.to_pylist())), key=str) == \
        sorted(((r["id"], r["city"]) for r in equality_deleted["upserts"].expected()), key=str)
    got = conn.read_arrow("ice.posdel", ["id"], direct=True)
    want = position_deleted.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
    assert sorted(got.column("id").to_pylist()) == sorted(want)


def test_equality_delete_keys_are_read_from_the_files_even_when_not_selected(ice_server, equality_deleted):
    """The key columns of a delete (city, day) are read with the data even when the query
    selects neither; its count is the oracle's."""
    got = _read(ice_server, "select score from ice.upserts", table="upserts")
    assert got.num_rows == len(equality_deleted["upserts"].expected())


@pytest.fixture(scope="module")
def uuid_table(catalog):
    """ice.kinds: a uuid and a fixed(4) column, written by pyiceberg."""
    import uuid

    from pyiceberg.schema import Schema
    from pyiceberg.types import FixedType, LongType, NestedField, UUIDType

    table = catalog.create_table("ice.kinds", schema=Schema(
        NestedField(1, "id", LongType(), False), NestedField(2, "u", UUIDType(), False),
        NestedField(3, "f", FixedType(4), False)))
    ids = list(range(50))
    uuids = [uuid.UUID(int=(i * 0x9E3779B97F4A7C15) % 2**128) if i % 7 else None for i in ids]
    table.append(pa.table({
        "id": pa.array(ids, pa.int64()),
        "u": pa.ExtensionArray.from_storage(pa.uuid(), pa.array([u.bytes if u else None for u in uuids], pa.binary(16))),
        "f": pa.array([i.to_bytes(4, "big") if i % 5 else None for i in ids], pa.binary(4))},
        schema=pa.schema([("id", pa.int64()), ("u", pa.uuid()), ("f", pa.binary(4))])))
    return catalog.load_table("ice.kinds")


@pytest.mark.parametrize("scan_engine", ["sql", "auto"])
def test_uuid_columns_read_as_their_text_and_fixed_as_binary(ice_server, uuid_table, scan_engine):
    """As Spark's Iceberg connector shows them: a UUID's 36 characters (Java's UUID.toString),
    a fixed(4) value's bytes; a predicate on the text works on both engines."""
    ice_server.ops.update_config({"scan_engine": scan_engine})
    try:
        oracle = {r["id"]: (str(r["u"]) if r["u"] is not None else None, r["f"])
                  for r in uuid_table.scan().to_arrow().to_pylist()}
        got = _read(ice_server, "select id, u, f from ice.kinds", table="kinds").to_pylist()
        assert {r["id"]: (r["u"], r["f"]) for r in got} == oracle
        one = oracle[3][0]
        picked = _read(ice_server, f"select id from ice.kinds where u = '{one}' or u is null", table="kinds")
        assert sorted(picked.column("id").to_pylist()) == sorted(i for i, (u, _) in oracle.items() if u in (one, None))
    finally:
        ice_server.ops.update_config({"scan_engine": "auto"})


def test_a_position_delete_snapshot_ends_incremental_reads_with_409(ice_server, catalog):
    from support.iceberg_deletes import write_position_deletes

    table = catalog.create_table("ice.posdel_since", schema=_rows(0, 5).schema)
    table.append(_rows(0, 20))
    ice_server.warehouse.invalidate("ice", "posdel_since")
    start = ice_server.warehouse.snapshot("ice", "posdel_since").version
    path = next(iter(catalog.load_table("ice.posdel_since").scan().plan_files())).file.file_path
    write_position_deletes(catalog.load_table("ice.posdel_since"), {path: [3]})
    ice_server.warehouse.invalidate("ice", "posdel_since")
    r = _since(ice_server, "posdel_since", start)
    assert r.status_code == 409 and "delete" in r.json()["exception"], r.text
    assert sorted(_read(ice_server, "select id from ice.posdel_since", table="posdel_since")
                  .column("id").to_pylist()) == [i for i in range(20) if i != 3]


def _relative(path: str, location: str) -> str:
    path = path.removeprefix("file://")
    return path[len(location) + 1:]


def test_the_mysql_port_and_schema_see_iceberg_tables_as_folder_tables(ice_server, orders):
    import httpx
    import pymysql

    with pymysql.connect(host="127.0.0.1", port=ice_server.query_port, user="root", password="",
                         connect_timeout=20, read_timeout=120) as conn, conn.cursor() as cur:
        cur.execute("show databases")
        assert "ice" in {r[0] for r in cur.fetchall()}
        cur.execute("show tables from ice")
        assert "orders" in {r[0] for r in cur.fetchall()}
        cur.execute("select id, city from ice.orders where id < 105 and city = 'oslo'")
        got = sorted(cur.fetchall())
    want = sorted((r["id"], r["city"]) for r in orders.scan().to_arrow().to_pylist()
                  if r["id"] < 105 and r["city"] == "oslo")
    assert got == want
    schema = httpx.get(f"http://127.0.0.1:{ice_server.http_port}/api/ice/orders/_schema",
                       headers={"Authorization": basic("root", "")}, timeout=60).json()
    assert [p["name"] for p in schema["properties"]] == ["id", "city", "amount", "day", "score"]


def test_a_plan_reads_its_snapshot_while_a_writer_commits(ice_server, catalog):
    """Iceberg never rewrites a data file: a plan pins its snapshot's files, and a commit made
    while the plan is read changes nothing in what it returns."""
    from support.readers import Reader

    from starscan.client import StarscanClient

    table = catalog.create_table("ice.busy", schema=_rows(0, 5).schema)
    table.append(_rows(0, 2000))
    before = sorted(r["id"] for r in table.scan().to_arrow().to_pylist())
    body = StarscanClient(f"http://127.0.0.1:{ice_server.http_port}", "root", "").plan(
        "ice", "busy", "select id from ice.busy")
    committed = []

    def commit() -> None:
        table.append(_rows(50_000, 10))
        table.delete("id < 100")  # copy-on-write: the snapshot's files stay for the plan
        committed.append(True)

    reader = Reader(("127.0.0.1", ice_server.be_port))
    try:
        rows = reader.read_tablets("ice", "busy", body["opaqued_query_plan"], body["partitions"],
                                   after_first_batch=commit, batch_size=100)
    finally:
        reader.close()
    assert committed and sorted(r["id"] for r in rows) == before
    ice_server.warehouse.invalidate("ice", "busy")
    now = _read(ice_server, "select id from ice.busy", "busy")
    assert now.num_rows == 2000 - 100 + 10


def _since(srv, table: str, since, consumer: str | None = None):
    import json

    import httpx

    body = {"sql": f"select id from ice.{table}", "since_version": since}
    if consumer is not None:
        body["consumer"] = consumer
    return httpx.post(f"http://127.0.0.1:{srv.http_port}/api/ice/{table}/_query_plan", content=json.dumps(body),
                      headers={"Authorization": basic("root", "")}, timeout=60)


def _ids_since(srv, table: str, since) -> tuple[list[int], int]:
    from starscan.client import StarscanClient

    client = StarscanClient(f"http://127.0.0.1:{srv.http_port}", "root", "")
    sql = f"select id from ice.{table}"
    body = client.plan("ice", table, sql, since_version=since, cursor=True)
    rows = client.read("ice", table, sql, plan=body).column("id").to_pylist() if body["partitions"] else []
    return sorted(rows), body["version"]


def test_incremental_reads_of_an_iceberg_table_are_its_append_snapshots(ice_server, catalog):
    """since_version on an Iceberg table: the data files the append snapshots after it added;
    a delete or overwrite since is refused, as is a snapshot the table does not have."""
    table = catalog.create_table("ice.appends", schema=_rows(0, 5).schema)
    empty, v0 = _ids_since(ice_server, "appends", None)  # no snapshot yet: version 0, nothing to read
    assert (empty, v0) == ([], 0)
    table.append(_rows(0, 100))
    _, va = _ids_since(ice_server, "appends", None)
    table.append(_rows(100, 50))
    table.append(_rows(150, 25))
    assert _ids_since(ice_server, "appends", 0)[0] == list(range(175))
    ids, vc = _ids_since(ice_server, "appends", va)
    assert ids == list(range(100, 175)) and vc != va
    assert _ids_since(ice_server, "appends", vc) == ([], vc)
    table.delete("id = 160")  # copy-on-write: a file rewritten, one row gone
    r = _since(ice_server, "appends", vc)
    assert r.status_code == 409 and "full read" in r.json()["exception"], r.text
    _, vd = _ids_since(ice_server, "appends", None)
    table.append(_rows(700, 5))
    ids, ve = _ids_since(ice_server, "appends", vd)
    assert ids == list(range(700, 705))
    r = _since(ice_server, "appends", 12345)
    assert r.status_code == 404 and "no snapshot of version 12345" in r.json()["exception"], r.text
    from starscan.client import StarscanClient

    client = StarscanClient(f"http://127.0.0.1:{ice_server.http_port}", "root", "")
    assert client.commit("ice", "appends", "ice-1", ve)["version"] == ve
    import json

    import httpx
    back = httpx.post(f"http://127.0.0.1:{ice_server.http_port}/api/ice/appends/_consumers/ice-1/commit",
                      content=json.dumps({"version": vd}), headers={"Authorization": basic("root", "")}, timeout=60)
    assert back.status_code == 409 and "never moves back" in back.json()["exception"], back.text
    assert client.plan("ice", "appends", "select id from ice.appends", consumer="ice-1")["partitions"] == {}


@pytest.mark.slow  # starts `starscan follow` processes of its own
def test_a_killed_consumer_follows_an_iceberg_table_exactly_once(ice_server, catalog, tmp_path):
    """A writer appends 50 snapshots with pyiceberg while `starscan follow` processes are
    killed with SIGKILL at random moments and started again: every row exactly once."""
    import random
    import signal
    import threading
    import time
    from collections import Counter

    import pyarrow.parquet as pq
    from support.readers import follow_process

    versions, per_version = 50, 20
    table = catalog.create_table("ice.follow", schema=_rows(0, 5).schema)
    table.append(_rows(0, per_version))
    done = threading.Event()

    def writer() -> None:
        for i in range(1, versions):
            table.append(_rows(i * per_version, per_version))
            time.sleep(random.uniform(0.01, 0.1))
        done.set()

    fe = f"127.0.0.1:{ice_server.http_port}"
    out = tmp_path / "out"
    rng = random.Random(20261124)
    threading.Thread(target=writer, daemon=True).start()
    kills = 0
    while (not done.is_set() or kills < 6) and kills <= 40:
        proc = follow_process(fe, out, table="ice.follow", consumer="ice-exporter")
        time.sleep(rng.uniform(0.3, 2.0))  # before, inside or after a step, or before its commit
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        kills += 1
    assert done.wait(120)
    final = follow_process(fe, out, "--stop-when-idle", table="ice.follow", consumer="ice-exporter")
    _, err = final.communicate(timeout=300)
    assert final.returncode == 0, err.decode(errors="replace")[-2000:]
    seen: Counter = Counter()
    for path in sorted(out.glob("*-*.parquet")):
        step = pq.read_table(path)
        seen.update(zip(step.column("id").to_pylist(), step.column("city").to_pylist()))
    expected = Counter((r["id"], r["city"]) for r in _rows(0, versions * per_version).to_pylist())
    assert len(table.history()) == versions and kills >= 6
    assert seen == expected, (sum(seen.values()), len(expected), [k for k, n in seen.items() if n > 1][:5])


@pytest.fixture(scope="module")
def random_tables(spark, ice_server, equality_deleted, position_deleted, evolved, v3_vectors):
    """The Iceberg tables with deletes and evolution, each with Spark SQL's source of truth:
    a temporary view of the rows an independent reader gives (pyiceberg; the commits'
    replay for equality deletes, which pyiceberg refuses)."""
    from support.random_queries import TableInfo

    schema = "id long, city string, amount decimal(10,2), day date, score double"
    sources = {
        "upserts": (equality_deleted["upserts"].expected(), schema),
        "posdel": (position_deleted.scan().to_arrow().to_pylist(), schema),
        "v3_dv": (v3_vectors.scan().to_arrow().to_pylist(), schema),
        "evolved": (evolved.scan().to_arrow().to_pylist(),
                    "id long, town string, amount decimal(10,2), day date, qty long, score double"),
    }
    out = []
    for table, (rows, types) in sources.items():
        spark.createDataFrame(rows, types).createOrReplaceTempView(f"ice_random_{table}")
        ice_server.warehouse.invalidate("ice", table)
        out.append(TableInfo(spark, ice_server, "ice", table, None, oracle_view=f"ice_random_{table}"))
    return out


@pytest.mark.parametrize("scan_engine", ["sql", "auto"])
def test_random_queries_over_deletes_and_evolution_match_spark(ice_server, spark, random_tables, scan_engine):
    """Random projections, predicates and batch sizes (the property of
    test_scan_properties.py) over position, equality and v3 deletes and renamed, re-added and
    promoted columns: the multiset of rows Spark SQL gives over the independent reader's rows."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from support.random_queries import columns_strategy, predicate, run_both

    from starscan.client import StarscanClient

    client = StarscanClient(f"http://127.0.0.1:{ice_server.http_port}", "root", "")
    ice_server.ops.update_config({"scan_engine": scan_engine})

    @settings(max_examples=20, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(data=st.data())
    def check(data):
        info = data.draw(st.sampled_from(random_tables), label="table")
        columns = data.draw(columns_strategy(info.columns), label="columns")
        where = data.draw(predicate(info.scalar, info.samples, info.zone), label="where")
        batch_size = data.draw(st.integers(1, 900), label="batch_size")
        got, want, sr_sql = run_both(spark, client, info, info.sql(columns, where), batch_size)
        assert got == want, f"{sr_sql}: {sum((want - got).values())} rows missing, {sum((got - want).values())} extra"

    try:
        check()
    finally:
        ice_server.ops.update_config({"scan_engine": "auto"})


def test_a_time_column_is_left_out_and_refused_by_name(ice_server, catalog):
    """Iceberg's ``time`` has no StarRocks or Spark type: the table is served without that
    column (Spark's Iceberg connector refuses the whole table), and a query naming it is
    refused with the reason."""
    import httpx

    schema = pa.schema([("id", pa.int64()), ("t", pa.time64("us")), ("name", pa.string())])
    table = catalog.create_table("ice.with_time", schema=schema)
    table.append(pa.table({"id": [1, 2], "t": [dt.time(1, 2, 3), None], "name": ["a", "b"]}, schema=schema))
    got = _read(ice_server, "select * from ice.with_time", table="with_time")
    assert got.column_names == ["id", "name"]
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    for sql in ("select id, t from ice.with_time", "select id from ice.with_time where t is null"):
        r = httpx.post(f"http://127.0.0.1:{ice_server.http_port}/api/ice/with_time/_query_plan", json={"sql": sql},
                       auth=("root", ""), timeout=60)
        assert r.status_code == 500, r.text  # an invalid SQL, as an unknown column is (docs/protocol.md)
        assert "column t of table ice.with_time has Iceberg type time" in r.json()["exception"], r.text
