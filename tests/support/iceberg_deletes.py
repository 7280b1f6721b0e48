"""Iceberg delete files, which pyiceberg does not write (its deletes rewrite data files):
written here from the Iceberg spec and committed with pyiceberg's own snapshot producer as a
DELETE snapshot whose new manifest has content ``deletes``, as Spark's and Flink's row-delta
commits do.

* Position delete files ("Position Delete Files"): Parquet rows of ``file_path`` (field id
  2147483546) and ``pos`` (2147483545), sorted by both. Checked with pyiceberg's reader,
  which applies them.
* Equality delete files ("Equality Delete Files"): Parquet rows of the equality columns,
  each column carrying its table field id, and ``equality_ids`` in the manifest entry, as
  Flink's upsert writer makes them. pyiceberg refuses to read these; the tests check them
  with DuckDB's Iceberg extension."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

FILE_PATH_ID, POS_ID = 2147483546, 2147483545


def write_position_deletes(table, deletes: dict[str, list[int]], file_format: str = "parquet") -> str:
    """One position delete file for ``deletes`` (data file location -> positions), committed
    to ``table``; returns its location. ``file_format``: parquet, orc or avro (as Iceberg's
    writers write a table's deletes in its format: the spec's ``file_path`` and ``pos``
    fields with their reserved field ids)."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    rows = sorted((path, pos) for path, positions in deletes.items() for pos in positions)
    location = f"{table.location().rstrip('/')}/data/delete-{uuid.uuid4()}.{file_format}"
    local = location.removeprefix("file://")
    if file_format == "orc":
        import pyarrow.orc as orc

        meta = {b"iceberg.required": b"true"}
        schema = pa.schema([pa.field("file_path", pa.string(), False, {**meta, b"iceberg.id": str(FILE_PATH_ID).encode()}),
                            pa.field("pos", pa.int64(), False, {**meta, b"iceberg.id": str(POS_ID).encode()})])
        orc.write_table(pa.table([[r[0] for r in rows], [r[1] for r in rows]], schema=schema), local)
    elif file_format == "avro":
        import fastavro

        avro = {"type": "record", "name": "position_delete", "fields": [
            {"name": "file_path", "type": "string", "field-id": FILE_PATH_ID},
            {"name": "pos", "type": "long", "field-id": POS_ID}]}
        with open(local, "wb") as out:
            fastavro.writer(out, fastavro.parse_schema(avro), [{"file_path": p, "pos": n} for p, n in rows])
    else:
        schema = pa.schema([pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
                            pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": str(POS_ID).encode()})])
        pq.write_table(pa.table([[r[0] for r in rows], [r[1] for r in rows]], schema=schema), local)
    size = Path(local).stat().st_size
    delete_file = DataFile.from_args(content=DataFileContent.POSITION_DELETES, file_path=location,
                                     file_format={"avro": FileFormat.AVRO, "orc": FileFormat.ORC}.get(file_format,
                                                                                                  FileFormat.PARQUET),
                                     partition=Record(), record_count=len(rows), file_size_in_bytes=size)
    delete_file.spec_id = table.metadata.default_spec_id
    _commit_deletes(table, delete_file)
    return location


def write_equality_deletes(table, rows: pa.Table, partition=None) -> str:
    """One equality delete file of ``rows`` (columns named as the table's, each deleting the
    rows equal to it in every one of those columns), committed to ``table`` in ``partition``
    (a pyiceberg Record; unpartitioned: global); returns its location."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    schema = table.schema()
    ids = [schema.find_field(name).field_id for name in rows.column_names]
    fields = [pa.field(name, rows.schema.field(name).type, True, {b"PARQUET:field_id": str(i).encode()})
              for name, i in zip(rows.column_names, ids)]
    location = f"{table.location().rstrip('/')}/data/eq-delete-{uuid.uuid4()}.parquet"
    local = location.removeprefix("file://")
    pq.write_table(pa.table(rows.columns, schema=pa.schema(fields)), local)
    # The file's column statistics in the manifest entry, as Iceberg's writers record them.
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )

    delete_schema = schema.select(*rows.column_names)
    stats = data_file_statistics_from_parquet_metadata(
        pq.read_metadata(local), compute_statistics_plan(delete_schema, table.metadata.properties),
        parquet_path_to_id_mapping(delete_schema))
    delete_file = DataFile.from_args(content=DataFileContent.EQUALITY_DELETES, file_path=location,
                                     file_format=FileFormat.PARQUET, partition=partition or Record(),
                                     file_size_in_bytes=Path(local).stat().st_size, equality_ids=ids,
                                     **stats.to_serialized_dict())
    delete_file.spec_id = table.metadata.default_spec_id
    _commit_deletes(table, delete_file)
    return location


def _commit_deletes(table, delete_file) -> None:
    from pyiceberg.manifest import ManifestContent, ManifestWriterV2
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _FastAppendFiles

    class _DeletesManifest(ManifestWriterV2):
        def content(self):
            return ManifestContent.DELETES

        @property
        def _meta(self):
            return {**super()._meta, "content": "deletes"}

    with table.transaction() as tx:
        producer = _FastAppendFiles(operation=Operation.DELETE, transaction=tx, io=table.io)

        def new_manifest_writer(spec):
            return _DeletesManifest(spec, producer.schema(), producer.new_manifest_output(), producer._snapshot_id,
                                    producer._compression)

        producer.new_manifest_writer = new_manifest_writer
        producer.append_data_file(delete_file)
        producer.commit()
