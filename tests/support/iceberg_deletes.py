"""Iceberg position delete files, which pyiceberg reads but does not write (its deletes
rewrite data files): written here from the Iceberg spec ("Position Delete Files": Parquet
rows of ``file_path``, field id 2147483546, and ``pos``, 2147483545, sorted by both) and
committed with pyiceberg's own snapshot producer as a DELETE snapshot whose new manifest has
content ``deletes``, as Spark's row-delta commits do. The tests check every table made this
way with pyiceberg's reader (which applies position deletes) before serving it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

FILE_PATH_ID, POS_ID = 2147483546, 2147483545


def write_position_deletes(table, deletes: dict[str, list[int]]) -> str:
    """One position delete file for ``deletes`` (data file location -> positions), committed
    to ``table``; returns its location."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent, ManifestWriterV2
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _FastAppendFiles
    from pyiceberg.typedef import Record

    rows = sorted((path, pos) for path, positions in deletes.items() for pos in positions)
    schema = pa.schema([pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
                        pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": str(POS_ID).encode()})])
    location = f"{table.location().rstrip('/')}/data/delete-{uuid.uuid4()}.parquet"
    local = location.removeprefix("file://")
    pq.write_table(pa.table([[r[0] for r in rows], [r[1] for r in rows]], schema=schema), local)
    size = Path(local).stat().st_size
    delete_file = DataFile.from_args(content=DataFileContent.POSITION_DELETES, file_path=location,
                                     file_format=FileFormat.PARQUET, partition=Record(), record_count=len(rows),
                                     file_size_in_bytes=size)
    delete_file.spec_id = table.metadata.default_spec_id

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
    return location
