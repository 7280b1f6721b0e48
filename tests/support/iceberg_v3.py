"""Iceberg format-v3 deletion vectors, which no writer here makes (pyiceberg 0.12 writes no v3
metadata): written from the Iceberg spec and committed by hand.

* The vectors: a Puffin file ("Puffin file format": magic ``PFA1``, the blobs, then a footer
  of magic, a JSON payload, its length and flags, magic) holding one ``deletion-vector-v1``
  blob per data file: a 4-byte big-endian length, the magic ``D1 D3 39 64``, the positions
  as a portable 64-bit roaring bitmap, and a big-endian CRC-32 of magic and bitmap; the blob
  names its data file in the ``referenced-data-file`` property.
* The commit: the table's metadata upgraded to format version 3 (``next-row-id`` and the
  snapshot's ``first-row-id``, as v3 requires) with a new ``delete`` snapshot whose manifest
  list (v3) keeps the table's manifests and adds a v3 delete manifest of ``PUFFIN`` entries,
  each naming its data file (``referenced_data_file``) and its blob's place
  (``content_offset``, ``content_size_in_bytes``). The SQL catalog's pointer is moved to the
  new metadata file, as a catalog commit does.

pyiceberg's reader reads such tables (it applies Puffin deletion vectors): the tests'
independent reader.
"""

from __future__ import annotations

import json
import random
import sqlite3
import struct
import time
import uuid
import zlib
from pathlib import Path

from pyroaring import BitMap64

from starscan.arrow.deletes import PORTABLE_MAGIC

DV_FIELD_ID = 2147483645  # the "_pos" field the spec gives deletion-vector blobs


def _blob(positions: list[int]) -> bytes:
    data = struct.pack("<I", PORTABLE_MAGIC) + BitMap64(positions).serialize()
    return struct.pack(">I", len(data)) + data + struct.pack(">I", zlib.crc32(data))


def write_puffin(path: Path, vectors: dict[str, list[int]], snapshot_id: int,
                 sequence_number: int) -> dict[str, tuple[int, int, int]]:
    """A Puffin file of one deletion vector per data file; returns data file -> (offset,
    length, cardinality) of its blob."""
    body = b"PFA1"
    places: dict[str, tuple[int, int, int]] = {}
    blobs = []
    for data_file, positions in vectors.items():
        blob = _blob(positions)
        places[data_file] = (len(body), len(blob), len(set(positions)))
        blobs.append({"type": "deletion-vector-v1", "fields": [DV_FIELD_ID], "snapshot-id": snapshot_id,
                      "sequence-number": sequence_number, "offset": len(body), "length": len(blob),
                      "properties": {"referenced-data-file": data_file, "cardinality": str(len(set(positions)))}})
        body += blob
    footer = json.dumps({"blobs": blobs, "properties": {"created-by": "starscan tests"}}).encode()
    body += b"PFA1" + footer + struct.pack("<i", len(footer)) + b"\0\0\0\0" + b"PFA1"
    path.write_bytes(body)
    return places


def commit_v3_deletion_vectors(catalog_db: Path, table, vectors: dict[str, list[int]]) -> str:
    """Upgrade ``table`` (unpartitioned, committed through the SQL catalog in the SQLite file
    ``catalog_db``) to format version 3 and commit ``vectors`` (data file location ->
    deleted positions) as deletion vectors in one Puffin file; returns its location."""
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestContent,
        ManifestEntry,
        ManifestEntryStatus,
        ManifestListWriter,
        ManifestListWriterV2,
        ManifestWriterV2,
    )
    from pyiceberg.typedef import Record

    metadata = table.metadata
    parent = table.current_snapshot()
    snapshot_id = random.getrandbits(62)
    sequence_number = metadata.last_sequence_number + 1
    location = table.location().rstrip("/")
    local = Path(location.removeprefix("file://"))
    puffin = f"{location}/data/dv-{uuid.uuid4()}.puffin"
    places = write_puffin(Path(puffin.removeprefix("file://")), vectors, snapshot_id, sequence_number)
    puffin_size = Path(puffin.removeprefix("file://")).stat().st_size

    class DeleteManifestV3(ManifestWriterV2):
        def content(self):
            return ManifestContent.DELETES

        @property
        def version(self):
            return 3

        @property
        def _meta(self):
            return {**super()._meta, "content": "deletes", "format-version": "3"}

    manifest_path = f"{location}/metadata/{uuid.uuid4()}-m0.avro"
    spec = table.spec()
    writer = DeleteManifestV3(spec, table.schema(), table.io.new_output(manifest_path), snapshot_id, "deflate")
    with writer:
        for data_file, (offset, length, cardinality) in places.items():
            dv = DataFile.from_args(
                _table_format_version=3, content=DataFileContent.POSITION_DELETES, file_path=puffin,
                file_format=FileFormat.PUFFIN, partition=Record(), record_count=cardinality,
                file_size_in_bytes=puffin_size, referenced_data_file=data_file, content_offset=offset,
                content_size_in_bytes=length)
            dv.spec_id = spec.spec_id
            writer.add_entry(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id,
                                                     data_file=dv))
    new_manifest = writer.to_manifest_file()

    class ManifestListV3(ManifestListWriterV2):
        def __init__(self, output_file):
            ManifestListWriter.__init__(self, format_version=3, output_file=output_file, meta={
                "snapshot-id": str(snapshot_id), "parent-snapshot-id": str(parent.snapshot_id),
                "sequence-number": str(sequence_number), "format-version": "3", "first-row-id": "0",
                "avro.codec": "deflate"})
            self._commit_snapshot_id = snapshot_id
            self._sequence_number = sequence_number

    list_path = f"{location}/metadata/snap-{snapshot_id}-0-{uuid.uuid4()}.avro"
    with ManifestListV3(table.io.new_output(list_path)) as manifest_list:
        manifest_list.add_manifests([*parent.manifests(table.io), new_manifest])

    doc = json.loads(Path(table.metadata_location.removeprefix("file://")).read_text())
    now = int(time.time() * 1000)
    total_rows = sum(int(s.get("summary", {}).get("added-records", 0)) for s in doc["snapshots"])
    doc.update({"format-version": 3, "next-row-id": total_rows, "last-sequence-number": sequence_number,
                "current-snapshot-id": snapshot_id, "last-updated-ms": now})
    doc["snapshots"].append({"snapshot-id": snapshot_id, "parent-snapshot-id": parent.snapshot_id,
                             "sequence-number": sequence_number, "timestamp-ms": now, "manifest-list": list_path,
                             "summary": {"operation": "delete", "added-dvs": str(len(places))},
                             "schema-id": metadata.current_schema_id, "first-row-id": total_rows, "added-rows": 0})
    doc["snapshot-log"] = [*doc.get("snapshot-log", []), {"snapshot-id": snapshot_id, "timestamp-ms": now}]
    doc["metadata-log"] = [*doc.get("metadata-log", []),
                           {"metadata-file": table.metadata_location, "timestamp-ms": metadata.last_updated_ms}]
    doc["refs"] = {**doc.get("refs", {}), "main": {"snapshot-id": snapshot_id, "type": "branch"}}
    new_location = f"{location}/metadata/{len(doc['metadata-log']):05d}-{uuid.uuid4()}.metadata.json"
    (local / "metadata" / new_location.rsplit("/", 1)[1]).write_text(json.dumps(doc))
    namespace, name = table.name()[-2], table.name()[-1]
    with sqlite3.connect(catalog_db) as db:
        changed = db.execute("update iceberg_tables set metadata_location = ?, previous_metadata_location = ? "
                             "where table_namespace = ? and table_name = ? and metadata_location = ?",
                             (new_location, table.metadata_location, namespace, name, table.metadata_location)).rowcount
    assert changed == 1, "the catalog's pointer moved under the commit"
    return puffin
