"""starscan.tables.iceberg: which equality delete files apply to which data files (the
Iceberg spec's scan planning rule), on pyiceberg's own metadata objects."""

from __future__ import annotations

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from starscan.tables.iceberg import _EqualityIndex

SCHEMA = Schema(NestedField(1, "id", LongType(), False), NestedField(2, "city", StringType(), False))


def _metadata(partitioned: bool):
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "city")) if partitioned else PartitionSpec()
    return new_table_metadata(SCHEMA, spec, sort_order=UNSORTED_SORT_ORDER,
                              location="file:///t", properties={"format-version": "2"})


def _file(path: str, content, partition: Record, spec_id: int = 0) -> DataFile:
    f = DataFile.from_args(content=content, file_path=path, file_format=FileFormat.PARQUET, partition=partition,
                           record_count=1, file_size_in_bytes=1, equality_ids=[1] if content else None)
    f.spec_id = spec_id
    return f


def _delete(sequence: int, partition: Record, spec_id: int = 0) -> ManifestEntry:
    return ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=1, sequence_number=sequence,
                                   file_sequence_number=sequence,
                                   data_file=_file(f"eq-{sequence}", DataFileContent.EQUALITY_DELETES,
                                                   partition, spec_id))


def test_an_equality_delete_applies_only_to_data_of_a_strictly_lower_sequence_number():
    index = _EqualityIndex(_metadata(False))
    for sequence in (2, 3, 5):
        index.add(_delete(sequence, Record()))
    data = _file("d", DataFileContent.DATA, Record())
    assert [d.file_path for d in index.applying_to(data, 3)] == ["eq-5"]
    assert [d.file_path for d in index.applying_to(data, 1)] == ["eq-2", "eq-3", "eq-5"]
    assert index.applying_to(data, 5) == []


def test_a_partitioned_equality_delete_applies_only_within_its_partition():
    index = _EqualityIndex(_metadata(True))
    index.add(_delete(4, Record("oslo")))
    assert len(index.applying_to(_file("a", DataFileContent.DATA, Record("oslo")), 1)) == 1
    assert index.applying_to(_file("b", DataFileContent.DATA, Record("lima")), 1) == []
