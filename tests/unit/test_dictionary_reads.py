"""Text columns stored as dictionary codes (starscan.arrow.dictionary_reads): which columns
are read as codes, and that the kernel's reader gives the rows pyarrow's plain read gives,
on every one of its paths (one thread, runs, threads side by side, a predicate on such a
column, a file's own dictionary column). The files are written by pyarrow in Parquet 1.0,
whose list of encodings follows parquet-mr's (Spark's writer): the Spark-written case is in
tests/integration/test_spark_read_rules.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.splits import split_of

from starscan.arrow import dictionary_reads
from starscan.arrow.dictionary_reads import dictionary_columns, expanded
from starscan.arrow.read import read_split
from starscan.arrow.scan import Fields, plan_read
from starscan.core.sql_types import parse_schema
from starscan.expr import column, literal, op

ROWS_PER_GROUP = 20_000
FLAGS = ["A", "B", "N", "R", None]

SCHEMA = parse_schema({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": False, "metadata": {}},
    {"name": "flag", "type": "string", "nullable": True, "metadata": {}},
    {"name": "note", "type": "string", "nullable": True, "metadata": {}},
    {"name": "mode", "type": "string", "nullable": False, "metadata": {}},
]})


def _table(first: int, rows: int) -> pa.Table:
    ids = range(first, first + rows)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "flag": pa.array([FLAGS[i % 5] for i in ids], pa.string()),
        # unique and long: its dictionary outgrows the page limit and the chunk falls back to plain
        "note": pa.array([None if i % 11 == 0 else f"note {i:08d} " + "x" * (i % 40) for i in ids], pa.string()),
        "mode": pa.array([("AIR", "MAIL", "SHIP", "TRUCK")[i % 4] for i in ids], pa.string()),
    })


def _write(path: Path, groups: int, first: int = 0) -> None:
    with pq.ParquetWriter(path, _table(0, 1).schema, version="1.0", dictionary_pagesize_limit=64 << 10) as writer:
        for g in range(groups):
            writer.write_table(_table(first + g * ROWS_PER_GROUP, ROWS_PER_GROUP), row_group_size=ROWS_PER_GROUP)


def _rows(batches) -> Counter:
    out: Counter = Counter()
    for batch in batches:
        assert all(pa.types.is_string(f.type) for f in batch.schema if f.name != "id"), batch.schema
        out.update(zip(*(c.to_pylist() for c in batch.columns)))
    return out


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    _write(tmp_path / "a.parquet", 3)
    _write(tmp_path / "b.parquet", 2, first=3 * ROWS_PER_GROUP)
    return [tmp_path / "a.parquet", tmp_path / "b.parquet"]


def test_only_text_columns_of_codes_throughout_are_read_as_codes(files):
    parquet = pq.ParquetFile(files[0])
    encodings = {parquet.metadata.row_group(0).column(i).path_in_schema: parquet.metadata.row_group(0).column(i).encodings
                 for i in range(4)}
    assert "PLAIN" in encodings["note"] and "PLAIN" not in encodings["flag"], encodings  # the fallback happened
    names = ["id", "flag", "note", "mode"]
    assert dictionary_columns(parquet.metadata, parquet.schema_arrow, names, [0, 1, 2]) == ("flag", "mode")
    assert dictionary_columns(parquet.metadata, parquet.schema_arrow, ["id", "mode"], [1]) == ("mode",)
    assert dictionary_columns(parquet.metadata, parquet.schema_arrow, ["id", "note"], [0, 1, 2]) == ()


def test_small_row_groups_and_parquet_cpp_files_are_read_as_before(tmp_path: Path):
    small = tmp_path / "small.parquet"
    pq.write_table(_table(0, 1000), small, version="1.0")
    parquet = pq.ParquetFile(small)
    assert dictionary_columns(parquet.metadata, parquet.schema_arrow, ["flag", "mode"], [0]) == ()
    # Parquet 2.x by pyarrow lists PLAIN for the dictionary page itself: not told apart from a fallback.
    v2 = tmp_path / "v2.parquet"
    pq.write_table(_table(0, ROWS_PER_GROUP), v2)
    parquet = pq.ParquetFile(v2)
    assert dictionary_columns(parquet.metadata, parquet.schema_arrow, ["flag", "mode"], [0]) == ()


@pytest.mark.parametrize("threads, cut", [(1, True), (1, False), (3, True)], ids=["one", "runs", "threads"])
def test_the_reader_gives_the_plain_reads_rows(files, threads, cut):
    want = Counter()
    for path in files:
        table = pq.read_table(path)
        want.update(zip(*(c.to_pylist() for c in table.columns)))
    read = plan_read("t.t", 1, Fields(SCHEMA), [(n, n) for n in ("id", "flag", "note", "mode")], None, "UTC",
                     "parquet", set())
    got = _rows(read_split(read, split_of(files), batch_rows=4096, threads=threads, cut=cut))
    assert got == want


def test_a_predicate_on_a_column_of_codes(files, monkeypatch):
    """The same rows with the column read as codes and read plain."""
    pred = op("and", op("=", column("flag"), literal("string", "B")), op("!=", column("mode"), literal("string", "AIR")))
    read = plan_read("t.t", 1, Fields(SCHEMA), [("id", "id"), ("mode", "mode")], pred, "UTC", "parquet", set())
    as_codes = _rows(read_split(read, split_of(files), batch_rows=4096))
    monkeypatch.setattr(dictionary_reads, "MIN_ROWS_PER_ROW_GROUP", 1 << 40)
    plain = _rows(read_split(read, split_of(files), batch_rows=4096))
    assert as_codes == plain and sum(plain.values()) == 15_000  # i % 5 == 1 and i % 4 != 0, of 100,000


def test_expanded_casts_only_the_columns_read_as_codes():
    codes = pa.DictionaryArray.from_arrays(pa.array([0, 1, None, 0], pa.int32()), pa.array(["x", "y"]))
    own = pa.DictionaryArray.from_arrays(pa.array([1, 0, 0, 1], pa.int8()), pa.array(["p", "q"]))
    batch = pa.record_batch([codes, own, pa.array([1, 2, 3, 4])], names=["read_as_codes", "stored_so", "n"])
    out = list(expanded(iter([batch, batch.slice(1, 2)]), ("read_as_codes",)))
    assert [b.schema.types for b in out] == [[pa.string(), own.type, pa.int64()]] * 2
    assert out[0].column(0).to_pylist() == ["x", "y", None, "x"] and out[1].column(0).to_pylist() == ["y", None]
    assert out[0].column(1).equals(own)
