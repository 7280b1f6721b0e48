"""Iceberg data files in ORC, which pyiceberg does not write (it writes Parquet): written
here as Iceberg's ORC writer lays them out (each ORC type carries its field id in the
``iceberg.id`` attribute, and whether it is required in ``iceberg.required``) and committed
with pyiceberg's fast append. pyiceberg's reader reads them back (the tests' oracle)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.orc as orc


def _with_ids(field: pa.Field, iceberg_field) -> pa.Field:
    """``field`` with the Iceberg ids of it and of the fields nested in it."""
    from pyiceberg import types as I

    kind = field.type
    nested = iceberg_field.field_type
    if pa.types.is_struct(kind):
        kind = pa.struct([_with_ids(kind.field(i), nested.field_by_name(kind.field(i).name))
                          for i in range(kind.num_fields)])
    elif pa.types.is_list(kind) and isinstance(nested, I.ListType):
        element = I.NestedField(nested.element_id, "element", nested.element_type, nested.element_required)
        kind = pa.list_(_with_ids(kind.value_field, element))
    meta = {b"iceberg.id": str(iceberg_field.field_id).encode(),
            b"iceberg.required": b"true" if iceberg_field.required else b"false"}
    return pa.field(field.name, kind, field.nullable, meta)


def append_orc_file(table, rows: pa.Table, stripe_rows: int = 0) -> str:
    """One ORC data file of ``rows`` (columns named as the table's), committed to the
    unpartitioned ``table``; returns its location. ``stripe_rows``: aim for stripes of about
    this many rows (0: ORC's default size)."""
    from pyiceberg.manifest import FileFormat

    schema = table.schema()
    fields = [_with_ids(rows.schema.field(name), schema.find_field(name)) for name in rows.column_names]
    location = f"{table.location().rstrip('/')}/data/orc-{uuid.uuid4()}.orc"
    local = location.removeprefix("file://")
    Path(local).parent.mkdir(parents=True, exist_ok=True)
    options = {"stripe_size": max(1024, stripe_rows * 16)} if stripe_rows else {}
    orc.write_table(pa.table(rows.columns, schema=pa.schema(fields)), local, **options)
    return fast_append(table, location, FileFormat.ORC, rows.num_rows)


def fast_append(table, location: str, file_format, record_count: int) -> str:
    """Commit the data file written at ``location`` (a local ``file://`` one) to the
    unpartitioned ``table`` with pyiceberg's fast append; returns its location."""
    from pyiceberg.manifest import DataFile, DataFileContent
    from pyiceberg.typedef import Record

    data_file = DataFile.from_args(content=DataFileContent.DATA, file_path=location, file_format=file_format,
                                   partition=Record(), record_count=record_count,
                                   file_size_in_bytes=Path(location.removeprefix("file://")).stat().st_size)
    data_file.spec_id = table.metadata.default_spec_id
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            append.append_data_file(data_file)
    return location
