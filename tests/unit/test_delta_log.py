"""starscan.delta on local Delta tables written by deltalake (no Spark, no server)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from starscan.catalog import Warehouse
from starscan.errors import TableUnreadable


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


def test_column_mapping_is_refused(tmp_path):
    location = tmp_path / "wh" / "d.db" / "t"
    try:
        write_deltalake(str(location), _table(range(4)), configuration={"delta.columnMapping.mode": "name"})
    except Exception as exc:  # noqa: BLE001 - this deltalake cannot write such a table
        pytest.skip(f"deltalake cannot write column mapping: {exc}")
    with pytest.raises(TableUnreadable, match="column mapping"):
        Warehouse(tmp_path / "wh", 0).snapshot("d", "t")
