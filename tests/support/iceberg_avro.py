"""Iceberg data files in Avro, which pyiceberg does not write (it writes Parquet): written
here with fastavro as Iceberg's Avro writer lays them out (the spec's "Avro" appendix: each
record field carries its Iceberg ``field-id``, a list its ``element-id``, a map its
``key-id`` and ``value-id``; an optional field is a union with null, null first; a date is
an ``int`` of logical type ``date``, a timestamptz a ``long`` of ``timestamp-micros`` with
``adjust-to-utc``, a decimal a ``fixed`` of logical type ``decimal``) and committed with
pyiceberg's fast append (``support.iceberg_orc.fast_append``)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any


def avro_schema(schema) -> dict:
    """An Iceberg schema as Iceberg's Avro writer writes it."""
    from pyiceberg import types as I

    def kind(t, field_id: int) -> Any:
        if isinstance(t, I.StructType):
            return {"type": "record", "name": f"r{field_id}", "fields": [field(f) for f in t.fields]}
        if isinstance(t, I.ListType):
            return {"type": "array", "items": optional(kind(t.element_type, t.element_id), t.element_required),
                    "element-id": t.element_id}
        if isinstance(t, I.MapType):
            return {"type": "map", "values": optional(kind(t.value_type, t.value_id), t.value_required),
                    "key-id": t.key_id, "value-id": t.value_id}
        if isinstance(t, I.DateType):
            return {"type": "int", "logicalType": "date"}
        if isinstance(t, I.TimestamptzType):
            return {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": True}
        if isinstance(t, I.TimestampType):
            return {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": False}
        if isinstance(t, I.DecimalType):
            size = next(n for n in range(1, 17) if 2 ** (8 * n - 1) > 10 ** t.precision)
            return {"type": "fixed", "name": f"decimal_{t.precision}_{t.scale}", "size": size,
                    "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
        return {I.BooleanType: "boolean", I.IntegerType: "int", I.LongType: "long", I.FloatType: "float",
                I.DoubleType: "double", I.StringType: "string", I.BinaryType: "bytes"}[type(t)]

    def optional(avro: Any, required: bool) -> Any:
        return avro if required else ["null", avro]

    def field(f) -> dict:
        out = {"name": f.name, "type": optional(kind(f.field_type, f.field_id), f.required), "field-id": f.field_id}
        if not f.required:
            out["default"] = None
        return out

    return {"type": "record", "name": "table", "fields": [field(f) for f in schema.fields]}


def append_avro_file(table, rows: list[dict]) -> str:
    """One Avro data file of ``rows`` (dicts by the table's column names, values as fastavro
    takes them), committed to the unpartitioned ``table``; returns its location."""
    import fastavro
    from pyiceberg.manifest import FileFormat

    from support.iceberg_orc import fast_append

    location = f"{table.location().rstrip('/')}/data/avro-{uuid.uuid4()}.avro"
    local = location.removeprefix("file://")
    Path(local).parent.mkdir(parents=True, exist_ok=True)
    with open(local, "wb") as out:
        fastavro.writer(out, fastavro.parse_schema(avro_schema(table.schema())), rows, codec="deflate", sync_interval=4096)
    return fast_append(table, location, FileFormat.AVRO, len(rows))
