"""Names and values from the data that reach a parser: file names (Hadoop globs), partition
folders (Hive's %-escapes, '=', NULL marker), database/table folders with spaces and
non-ASCII, columns named like SQL keywords or holding a backtick.

Each scan is compared as a multiset with pyarrow reading every planned file directly (the
partition values added as Spark decodes the folder names), so a file read twice, a file
never read or a partition value decoded differently fails the test."""

from __future__ import annotations

import contextlib
import shutil
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from starscan.client import ReadError, thrift_client
from starscan.core.thrift_defs import wire
from starscan.storage.hadoop_paths import literal, unescape_path_name

# The scans here run on both engines (conftest `engine`): the arrow engine reads the files
# with pyarrow and must take the same names literally.
on_both_engines = pytest.mark.usefixtures("engine")


def _write(path: Path, ids: list[int], **extra) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), **{k: pa.array(v) for k, v in extra.items()}}), path)


def _fresh_table(server, db: str, table: str) -> Path:
    location = server.warehouse.table_path(db, table)
    shutil.rmtree(location, ignore_errors=True)
    location.mkdir(parents=True)
    return location


def _planned_rows(server, db: str, table: str, plan: dict, columns: list[str], types: dict, keep) -> Counter:
    """What pyarrow reads from each planned file, partition values decoded as Spark does
    (typed as the scan typed them), rows kept by ``keep``."""
    snap = server.warehouse.snapshot(db, table)
    out: Counter = Counter()
    for tablet_id in plan["partitions"]:
        tablet = snap.by_id[int(tablet_id)]
        for f in tablet.files:
            data = pq.read_table(Path(snap.location) / f.path).to_pylist()
            parts = {}
            for col, raw in f.partition:
                value = None if raw is None else unescape_path_name(raw)
                if value is not None and pa.types.is_integer(types.get(col, pa.string())):
                    value = int(value)
                parts[col] = value
            for row in data:
                row.update(parts)
                if keep(row):
                    out[tuple(row[c] for c in columns)] += 1
    return out


def _scanned(client, db: str, table: str, sql: str, columns: list[str]) -> tuple[Counter, dict]:
    got = client.read(db, table, sql)
    types = {f.name: f.type for f in got.schema}
    return (Counter(zip(*[got.column(c).to_pylist() for c in columns])) if got.num_rows else Counter()), types


def _same_as_planned(server, client, db: str, table: str, sql: str, columns: list[str], keep=lambda row: True
                     ) -> Counter:
    plan = client.plan(db, table, sql)
    got, types = _scanned(client, db, table, sql, columns)
    assert got == _planned_rows(server, db, table, plan, columns, types, keep)
    return got


# ---- file names that are glob patterns -------------------------------------------------------
GLOB_FILES = {
    "a1.parquet": 0,
    "a[1].parquet": 100,        # as a pattern it matches a1.parquet: silent wrong rows before
    "b{x,y}.parquet": 200,      # as a pattern it matches nothing: an error before
    "c*.parquet": 300,
    "d?.parquet": 400,
    "e\\f.parquet": 500,
    "g h.parquet": 600,
    "é ü.parquet": 700,
    "i%41.parquet": 800,
    "m#n.parquet": 1000,
}


@pytest.fixture(scope="module")
def glob_table(server):
    location = _fresh_table(server, "names", "globs")
    for name, start in GLOB_FILES.items():
        _write(location / name, list(range(start, start + 10)))
    server.warehouse.invalidate("names", "globs")
    return location


@on_both_engines
def test_file_names_are_read_literally(server, client, glob_table):
    got = _same_as_planned(server, client, "names", "globs", "select id from names.globs", ["id"])
    want = Counter((i,) for start in GLOB_FILES.values() for i in range(start, start + 10))
    assert got == want  # every file once, none twice


@on_both_engines
def test_a_filtered_scan_of_glob_named_files(server, client, glob_table):
    got = _same_as_planned(server, client, "names", "globs", "select id from names.globs where id >= 100 and id < 110",
                           ["id"], keep=lambda row: 100 <= row["id"] < 110)
    assert got == Counter((i,) for i in range(100, 110))


def test_the_mysql_port_reads_glob_named_files(server, glob_table):
    import pymysql

    conn = pymysql.connect(host="127.0.0.1", port=server.query_port, user="root", password="", connect_timeout=20)
    try:
        with conn.cursor() as cur:
            cur.execute("select id from names.globs")
            got = Counter(r[0] for r in cur.fetchall())
    finally:
        conn.close()
    assert got == Counter(i for start in GLOB_FILES.values() for i in range(start, start + 10))


def test_a_file_name_spark_cannot_open_is_refused_at_plan_time(server, client):
    location = _fresh_table(server, "names", "colon")
    _write(location / "ok.parquet", [1])
    _write(location / "j:k.parquet", [2])
    server.warehouse.invalidate("names", "colon")
    with pytest.raises(ReadError) as err:
        client.plan("names", "colon", "select id from names.colon")
    assert err.value.status == 500
    assert "j:k.parquet" in err.value.message and "rename the file" in err.value.message
    # A folder holding ':' above a file whose name holds glob characters.
    location = _fresh_table(server, "names", "colon2")
    _write(location / "p=a:b" / "x[1].parquet", [1])
    server.warehouse.invalidate("names", "colon2")
    with pytest.raises(ReadError) as err:
        client.plan("names", "colon2", "select id from names.colon2")
    assert "p=a:b/x[1].parquet" in err.value.message and "rename the file or folder" in err.value.message


# ---- partition folders -------------------------------------------------------------------------
# folder value -> the string Spark reads (None: NULL). Spark decodes %XX byte by byte.
STRING_FOLDERS = {
    "plain": "plain",
    "a%20b": "a b",
    "a b": "a b",
    "a=b": "a=b",
    "a%3Db": "a=b",
    "x%2Fy": "x/y",
    "é": "é",
    "%C3%A9": "Ã©",
    "100%": "100%",
    "%zz": "%zz",
    "[1]": "[1]",
    "*": "*",
    "{p,q}": "{p,q}",
    "a:b": "a:b",
    "__HIVE_DEFAULT_PARTITION__": None,
}


@pytest.fixture(scope="module")
def part_table(server):
    location = _fresh_table(server, "names", "parts")
    for k, folder in enumerate(STRING_FOLDERS):
        # Hadoop cannot match an escaped glob below a folder holding ':' (refused: see below).
        name = "f.parquet" if ":" in folder else "f[0].parquet"
        _write(location / f"s={folder}" / f"n={k}" / name, [k * 10, k * 10 + 1])
    server.warehouse.invalidate("names", "parts")
    return location


@on_both_engines
def test_partition_folders_are_decoded_as_spark_does(server, client, part_table):
    got = _same_as_planned(server, client, "names", "parts", "select id, s, n from names.parts", ["id", "s", "n"])
    assert {s for _, s, _ in got} == set(STRING_FOLDERS.values())


@pytest.mark.parametrize("where,folders", [
    ("s = 'a b'", ["a%20b", "a b"]),
    ("s = 'a=b'", ["a=b", "a%3Db"]),
    ("s = 'x/y'", ["x%2Fy"]),
    ("s = 'é'", ["é"]),
    ("s = 'Ã©'", ["%C3%A9"]),
    ("s = '100%'", ["100%"]),
    ("s = '[1]'", ["[1]"]),
    ("s is null", ["__HIVE_DEFAULT_PARTITION__"]),
    ("s in ('*', '{p,q}')", ["*", "{p,q}"]),
])
@on_both_engines
def test_pruned_partitions_hold_the_rows_spark_finds(server, client, spark, part_table, where, folders):
    sql = f"select id, s from names.parts where {where}"
    got, _ = _scanned(client, "names", "parts", sql, ["id", "s"])
    keys = list(STRING_FOLDERS)
    assert sorted(i for i, _ in got) == sorted(v for f in folders for v in (keys.index(f) * 10, keys.index(f) * 10 + 1))
    # Spark SQL over the same files agrees.
    spark.read.parquet(literal(str(part_table))).createOrReplaceTempView("names_parts")
    want = Counter((r.id, r.s) for r in spark.sql(f"select id, s from names_parts where {where}").collect())
    assert got == want


@on_both_engines
def test_partition_column_names_are_decoded(server, client):
    location = _fresh_table(server, "names", "partcols")
    _write(location / "c%3Dd=1" / "f.parquet", [1])
    _write(location / "c%3Dd=2" / "f.parquet", [2])
    server.warehouse.invalidate("names", "partcols")
    schema = httpx.get(f"http://127.0.0.1:{server.http_port}/api/names/partcols/_schema", auth=("root", "")).json()
    assert [p["name"] for p in schema["properties"]] == ["id", "c=d"]
    got = _same_as_planned(server, client, "names", "partcols", "select id, `c=d` from names.partcols where `c=d` = 2",
                           ["id", "c=d"], keep=lambda row: row["c=d"] == 2)
    assert got == Counter({(2, 2): 1})


@on_both_engines
def test_partition_values_of_numbers_and_dates_are_parsed_as_spelled(server, client):
    """Spark parses these as they stand: '+1' and '01' are 1; '1%30' is no number (an error,
    never the value 10)."""
    location = _fresh_table(server, "names", "intparts")
    for k, folder in enumerate(["01", "+1", "2", "-0"]):
        _write(location / f"i={folder}" / "f.parquet", [k])
    server.warehouse.invalidate("names", "intparts")
    got, _ = _scanned(client, "names", "intparts", "select id, i from names.intparts where i = 1", ["id", "i"])
    assert got == Counter({(0, 1): 1, (1, 1): 1})
    assert _scanned(client, "names", "intparts", "select id from names.intparts where i = 0", ["id"])[0] == Counter({(3,): 1})

    bad = _fresh_table(server, "names", "badint")
    _write(bad / "i=1" / "f.parquet", [1])
    _write(bad / "i=1%30" / "f.parquet", [2])
    server.warehouse.invalidate("names", "badint")
    # Spark infers the column as a string (1%30 is no integer) and decodes it: '1' and '10'.
    got, _ = _scanned(client, "names", "badint", "select id, i from names.badint", ["id", "i"])
    assert got == Counter({(1, "1"): 1, (2, "10"): 1})


def test_an_empty_partition_value_is_refused_at_plan_time(server, client):
    location = _fresh_table(server, "names", "emptypart")
    _write(location / "s=" / "f.parquet", [1])
    server.warehouse.invalidate("names", "emptypart")
    with pytest.raises(ReadError) as err:
        client.plan("names", "emptypart", "select id from names.emptypart")
    assert err.value.status == 500
    assert "table names.emptypart cannot be read by Spark: [EMPTY_PARTITION_COLUMN_VALUE]" in err.value.message
    assert "'s='" in err.value.message


# ---- database, table and column names ---------------------------------------------------------
@on_both_engines
@pytest.mark.parametrize("db,table", [("my db", "ta ble"), ("dätä", "tä[b]le"), ("names", "t{1}"), ("names", "ü?")])
def test_database_and_table_folders_with_spaces_and_non_ascii(server, client, db, table):
    location = _fresh_table(server, db, table)
    _write(location / "part-0.parquet", [1, 2, 3])
    _write(location / "a[1].parquet", [4])
    server.warehouse.invalidate(db, table)
    quoted = f"`{db}`.`{table}`"
    got = _same_as_planned(server, client, db, table, f"select id from {quoted} where id > 1", ["id"],
                           keep=lambda row: row["id"] > 1)
    assert got == Counter({(2,): 1, (3,): 1, (4,): 1})
    schema = httpx.get(f"http://127.0.0.1:{server.http_port}/api/{quote(db, safe='')}/{quote(table, safe='')}/_schema",
                       auth=("root", ""))
    assert schema.status_code == 200 and schema.json()["properties"][0]["name"] == "id"


KEYWORD_COLUMNS = {"select": [1, 2, 3], "from": ["x", "y", None], "a`b": [10, 20, 30], "with space": [1.5, 2.5, None],
                   "Ünï": ["u", "v", "w"]}


@pytest.fixture(scope="module")
def keyword_table(server):
    location = _fresh_table(server, "names", "keywords")
    pq.write_table(pa.table({k: v for k, v in KEYWORD_COLUMNS.items()}), location / "part-0.parquet")
    server.warehouse.invalidate("names", "keywords")
    return location


@on_both_engines
def test_columns_named_like_keywords_or_with_a_backtick(server, client, keyword_table):
    sql = "select `select`, `from`, `a``b`, `with space`, `Ünï` from names.keywords where `select` >= 2 and `a``b` < 30"
    got = client.read("names", "keywords", sql)
    assert got.column_names == ["select", "from", "a`b", "with space", "Ünï"]
    assert got.to_pylist() == [{"select": 2, "from": "y", "a`b": 20, "with space": 2.5, "Ünï": "v"}]
    everything = client.read("names", "keywords", "select * from names.keywords")
    assert everything.num_rows == 3 and everything.column_names == list(KEYWORD_COLUMNS)


def test_a_missing_backtick_column_is_a_clear_error(server, client, keyword_table):
    with pytest.raises(ReadError) as err:
        client.plan("names", "keywords", "select `a``c` from names.keywords")
    assert err.value.status in (400, 500) and "a`c" in err.value.message


# ---- loader and warm-up with glob characters in their paths ------------------------------------
def test_load_and_warm_up_take_paths_literally(spark, tmp_path):
    from starscan.app.loader import load_table
    from starscan.provider.warmup import warm_up
    from starscan.spark.schemas import SchemaResolver
    from starscan.tables.catalog import Warehouse

    source = tmp_path / "src[1]"
    source.mkdir()
    (source / "rows{a}.csv").write_text("id,name\n1,a\n2,b\n")
    decoy = tmp_path / "src1"  # what 'src[1]' matches as a pattern
    decoy.mkdir()
    (decoy / "other.csv").write_text("id,name\n9,z\n")
    root = tmp_path / "wh[x]"
    wh = Warehouse(root, listing_ttl_s=0)
    result = load_table(spark, wh, "db", "t", str(source), progress=False)
    assert result["rows"] == 2
    snap = wh.snapshot("db", "t")
    assert [f.name for f in SchemaResolver(spark).schema(snap).fields] == ["id", "name"]
    from starscan.provider.push.listener import PushListener

    listener = PushListener()
    try:
        assert warm_up(spark, root, 1000, listener) > 0
    finally:
        listener.stop()


# ---- protocol corners ---------------------------------------------------------------------------
def test_get_next_without_an_offset_is_offset_zero(client, be_addr):
    plan = client.plan("db1", "t1", "select k1 from db1.t1")
    conn = thrift_client(*be_addr)
    try:
        opened = conn.open_scanner(wire.TScanOpenParams(
            cluster="default_cluster", database="db1", table="t1", tablet_ids=[int(t) for t in plan["partitions"]],
            opaqued_query_plan=plan["opaqued_query_plan"], batch_size=1024))
        assert opened.status.status_code == wire.TStatusCode.OK
        first = conn.get_next(wire.TScanNextBatchParams(context_id=opened.context_id))
        assert first.status.status_code == wire.TStatusCode.OK and not first.eos
        rows = pa.ipc.open_stream(first.rows).read_all().num_rows
        again = conn.get_next(wire.TScanNextBatchParams(context_id=opened.context_id))  # offset 0 again: a replay
        assert again.status.status_code == wire.TStatusCode.OK and again.rows == first.rows
        nxt = conn.get_next(wire.TScanNextBatchParams(context_id=opened.context_id, offset=rows))
        assert nxt.status.status_code == wire.TStatusCode.OK
        conn.close_scanner(wire.TScanCloseParams(context_id=opened.context_id))
    finally:
        conn.close()


def test_a_failed_change_user_closes_the_connection(server):
    import mysql.connector

    name = "cu_user"
    server.users.set_password(name, "right-pw", create=True)
    conn = mysql.connector.connect(host="127.0.0.1", port=server.query_port, user="root", password="",
                                   connection_timeout=20, use_pure=True)
    try:
        with pytest.raises(mysql.connector.Error) as err:
            conn.cmd_change_user(username=name, password="wrong-pw")
        assert err.value.errno == 1045
        # MySQL ends the session: nothing more runs as the old user on this connection.
        with pytest.raises(mysql.connector.Error):
            cur = conn.cursor()
            cur.execute("select current_user()")
            cur.fetchall()
    finally:
        with contextlib.suppress(mysql.connector.Error, OSError):  # the server ended the session
            conn.close()
    # A good change of user keeps the connection and switches the user.
    conn = mysql.connector.connect(host="127.0.0.1", port=server.query_port, user="root", password="",
                                   connection_timeout=20, use_pure=True)
    try:
        conn.cmd_change_user(username=name, password="right-pw")
        cur = conn.cursor()
        cur.execute("show databases")
        assert ("information_schema",) in cur.fetchall()
    finally:
        conn.close()


def _schema_pairs(schema) -> list:
    return [(f.name, f.dataType, f.nullable) for f in schema.fields]


def test_a_folder_tables_schema_is_what_spark_reads_of_the_folder(server, spark):
    """The FE takes a folder table's schema from one footer and the folder names, without
    Spark listing the folder: the same as ``spark.read.parquet(folder).schema`` where a
    partition column is also a data column (the data's place, the partition's type) and
    where partition values of several types widen (1, 2.5: double)."""
    location = _fresh_table(server, "names", "overlap")
    _write(location / "k=1" / "part-0.parquet", [1, 2], k=["x", "y"], v=[1.5, 2.5])
    _write(location / "k=2.5" / "part-0.parquet", [3], k=["z"], v=[3.5])
    _write(location / "k=2.5" / "part-1.parquet", [4], k=["w"], v=[4.5])
    got = server.planner.schemas.schema(server.warehouse.snapshot("names", "overlap"))
    assert _schema_pairs(got) == _schema_pairs(spark.read.parquet(str(location)).schema)
    assert [f.name for f in got.fields] == ["id", "k", "v"]


def test_a_summary_files_schema_comes_first_as_in_spark(server, spark):
    """Spark takes a folder's columns from ``_common_metadata`` when there is one."""
    location = _fresh_table(server, "names", "summary")
    _write(location / "part-0.parquet", [1, 2])
    pq.write_metadata(pa.schema([("id", pa.int64()), ("note", pa.string())]), location / "_common_metadata")
    got = server.planner.schemas.schema(server.warehouse.snapshot("names", "summary"))
    assert _schema_pairs(got) == _schema_pairs(spark.read.parquet(str(location)).schema)
    assert [f.name for f in got.fields] == ["id", "note"]


def test_a_tables_footer_is_read_by_spark_while_it_is_listed(server, spark):
    """As soon as a new version of a folder table is listed, Spark starts reading the footer
    its schema comes from (SchemaResolver.prefetch, while the tablets are cut); the schema
    takes that read, and it is Spark's schema of the folder."""
    location = _fresh_table(server, "names", "prefetched")
    _write(location / "part-0.parquet", [1, 2])
    _write(location / "part-1.parquet", [3])
    schemas = server.planner.schemas
    snap = server.warehouse.snapshot("names", "prefetched")
    key = schemas._footer_key(snap.location, snap.files, snap.storage)
    assert key[0].endswith("part-0.parquet") and key in schemas._footers  # read since the listing
    got = schemas.schema(snap)
    assert key not in schemas._footers  # taken by the schema
    assert _schema_pairs(got) == _schema_pairs(spark.read.parquet(str(location)).schema)
