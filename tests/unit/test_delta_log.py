"""starscan.tables.delta on local Delta tables written by deltalake (no Spark, no server)."""

from __future__ import annotations

import deltalake
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from packaging.version import Version

from starscan.core.errors import TableUnreadable
from starscan.tables.catalog import Warehouse

#: These tests write column-mapped tables with deltalake's writer, which does so from 1.6.6
#: (starscan reads Delta tables with deltalake 1.2 on: ./quickstart.sh test-minimum skips them).
writes_column_mapping = pytest.mark.skipif(Version(deltalake.__version__) < Version("1.6.6"),
                                           reason="deltalake writes column-mapped tables from 1.6.6")


def _table(rows: range) -> pa.Table:
    return pa.table({"id": pa.array(list(rows), pa.int64()), "k": pa.array([f"v{i % 2}" for i in rows])})


def test_only_the_current_versions_files_are_the_table(tmp_path):
    location = tmp_path / "wh" / "d.db" / "t"
    write_deltalake(str(location), _table(range(10)), partition_by=["k"])
    write_deltalake(str(location), _table(range(100, 104)), partition_by=["k"], mode="overwrite")
    snap = Warehouse(tmp_path / "wh", 0).snapshot("d", "t")
    current = set(DeltaTable(str(location)).file_uris())
    assert {str(location / f.path) for f in snap.files} == current
    assert len(list(location.rglob("*.parquet"))) > len(snap.files)  # the old files are still there
    assert snap.version == 1 and snap.partition_columns == ("k",) and snap.schema_json is not None
    assert {t.partition["k"] for t in snap.tablets} == {"v0", "v1"}


def test_a_file_of_the_log_missing_from_the_folder_is_refused(tmp_path):
    location = tmp_path / "wh" / "d.db" / "t"
    write_deltalake(str(location), _table(range(10)), partition_by=["k"])
    victim = next(location.rglob("*.parquet"))
    victim.unlink()
    with pytest.raises(TableUnreadable, match="not in the table folder"):
        Warehouse(tmp_path / "wh", 0).snapshot("d", "t")


@writes_column_mapping
def test_column_mapping_reads_each_column_by_its_physical_name(tmp_path):
    location = tmp_path / "wh" / "d.db" / "t"
    write_deltalake(str(location), _table(range(4)), configuration={"delta.columnMapping.mode": "name"})
    snap = Warehouse(tmp_path / "wh", 0).snapshot("d", "t")
    import pyarrow.parquet as pq

    names = dict(snap.file_columns)
    assert set(names) == set(_table(range(1)).column_names)
    written = pq.read_schema(location / snap.files[0].path).names
    assert sorted(names.values()) == sorted(written) and not set(names) & set(written)


@writes_column_mapping
def test_partition_values_come_from_the_log_where_folders_do_not_spell_them(tmp_path):
    """Column mapping writes files in random prefixes: each file carries its log entry's
    values (a '%' in a value spelled so that it decodes back); a table whose folders spell
    them keeps reading them from the folders, as Spark does."""
    import json

    parted = tmp_path / "wh" / "d.db" / "p"
    table = pa.table({"id": [1, 2, 3], "p": ["a", "b%41", None]})
    write_deltalake(str(parted), table, partition_by=["p"], configuration={"delta.columnMapping.mode": "id"})
    snap = Warehouse(tmp_path / "wh", 0).snapshot("d", "p")
    assert snap.partitions_recorded and snap.plan_partition_columns == ["p"]
    recorded = sorted((json.loads(f.recorded_partition)["p"] or "", dict(f.partition)["p"]) for f in snap.files)
    assert recorded == [("", None), ("a", "a"), ("b%41", "b%2541")]
    plain = tmp_path / "wh" / "d.db" / "q"
    write_deltalake(str(plain), table, partition_by=["p"])
    snap = Warehouse(tmp_path / "wh", 0).snapshot("d", "q")
    assert snap.partitions_in_folders and not snap.partitions_recorded
    assert all(f.recorded_partition is None for f in snap.files)


@pytest.mark.parametrize("order", ["add first", "remove first"])
def test_a_commits_actions_count_whatever_their_order(tmp_path, order):
    """A commit's actions are a set: a file that was there at the start version, removed
    and added again in one commit (a deletion-vector update), is a rewrite in either order;
    a file appended after it and removed again is not returned."""
    import json

    from starscan.core.errors import TableRewritten
    from starscan.storage.stores import LOCAL
    from starscan.tables.delta import DeltaChanges

    log = tmp_path / "_delta_log"
    log.mkdir()

    def commit(version: int, *actions: dict) -> None:
        if order == "remove first":
            actions = tuple(sorted(actions, key=lambda a: "add" in a))
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")

    add = lambda p: {"add": {"path": p, "dataChange": True}}  # noqa: E731
    remove = lambda p: {"remove": {"path": p, "dataChange": True}}  # noqa: E731
    commit(0, add("a.parquet"))
    commit(1, add("b.parquet"))
    commit(2, add("c.parquet"), remove("b.parquet"))     # b appended after 0 and deleted again
    commit(3, add("a.parquet"), remove("a.parquet"))     # a, there at 0, rewritten in place
    changes = DeltaChanges("d.t", str(tmp_path), LOCAL, 3)
    assert changes.added_since(0, 2) == ["c.parquet"]
    with pytest.raises(TableRewritten):
        changes.added_since(0, 3)
    assert changes.added_since(2, 2) == []


@writes_column_mapping
def test_the_column_mapping_property_counts_only_where_the_protocol_supports_it(tmp_path):
    """delta-rs sets ``delta.columnMapping.mode`` on a table with deletion vectors but leaves
    ``columnMapping`` out of its reader features and writes the schema's names: such files
    are read by those names, as delta-rs reads them."""
    location = tmp_path / "wh" / "d.db" / "t"
    write_deltalake(str(location), _table(range(4)),
                    configuration={"delta.columnMapping.mode": "name", "delta.enableDeletionVectors": "true"})
    assert "columnMapping" not in (DeltaTable(str(location)).protocol().reader_features or [])
    snap = Warehouse(tmp_path / "wh", 0).snapshot("d", "t")
    assert snap.file_columns == ()
