"""Iceberg data files in Avro, read into Arrow (pyarrow has no Avro reader; fastavro decodes).

Iceberg's Avro writer gives every field of the file's schema its Iceberg field id (a record
field's ``field-id``, an array's ``element-id``, a map's ``key-id`` and ``value-id``) and
writes Iceberg's types as Avro's logical types (``date``, ``timestamp-micros`` with
``adjust-to-utc``, ``decimal`` over fixed, ``uuid`` over fixed(16), ``time-micros``). A map
whose keys are not strings is an array of key/value records (logical type ``map``).

``AvroDataFile`` shows such a file with the interface of ``pyarrow.orc.ORCFile`` that the
reader uses for files read whole (``schema``, ``nstripes``, ``nrows``, ``read_stripe``): its
Arrow schema carries the ids as the ``iceberg.id`` field attribute, as an Iceberg ORC file's
does, so columns and nested fields are found by id, and its rows are one stripe, in file
order (positions for the table's deletes count from its first row). The file is decoded
whole when opened: Avro data files are rare (Iceberg writes Parquet by default) and small.
"""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa

MAGIC = b"Obj\x01"

_PRIMITIVE: dict[str, pa.DataType] = {
    "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
    "string": pa.string(), "bytes": pa.binary(),
}


class AvroSchemaError(ValueError):
    """An Avro type with no Iceberg meaning (a union of two non-null types, an enum)."""


def _field(name: str, avro: Any, field_id: Any) -> pa.Field:
    kind, nullable = _type(avro)
    meta = {b"iceberg.id": str(field_id).encode()} if field_id is not None else None
    return pa.field(name, kind, nullable, meta)


def _type(avro: Any) -> tuple[pa.DataType, bool]:
    """The Arrow type of an Avro schema, and whether it admits null (``["null", T]``)."""
    if isinstance(avro, list):
        others = [t for t in avro if t != "null"]
        if len(others) != 1:
            raise AvroSchemaError(f"an Avro union of {avro!r} has no Iceberg type")
        return _type(others[0])[0], len(others) != len(avro)
    if isinstance(avro, str):
        if avro in _PRIMITIVE:
            return _PRIMITIVE[avro], False
        raise AvroSchemaError(f"the Avro type {avro!r} has no Iceberg type")
    found = _logical_type(avro) or _nested_type(avro)
    if found is not None:
        return found, False
    base = avro.get("type")
    if isinstance(base, str) and base in _PRIMITIVE:
        return _PRIMITIVE[base], False
    raise AvroSchemaError(f"the Avro type {avro!r} has no Iceberg type")


def _logical_type(avro: dict[str, Any]) -> pa.DataType | None:
    """The Arrow type of an Avro logical type Iceberg writes (date, timestamps, time,
    decimal); None for any other schema."""
    logical, base = avro.get("logicalType"), avro.get("type")
    if logical == "date" and base == "int":
        return pa.date32()
    for unit, names in (("us", ("timestamp-micros", "local-timestamp-micros")),
                        ("ns", ("timestamp-nanos", "local-timestamp-nanos"))):
        if logical in names and base == "long":
            utc = logical == names[0] and bool(avro.get("adjust-to-utc", True))
            return pa.timestamp(unit, tz="UTC" if utc else None)
    if logical == "time-micros" and base == "long":
        return pa.time64("us")
    if logical == "decimal":
        return pa.decimal128(int(avro["precision"]), int(avro.get("scale", 0)))
    return None


def _nested_type(avro: dict[str, Any]) -> pa.DataType | None:
    """The Arrow type of an Avro fixed, record, array (an Iceberg map when its items are
    key/value records) or map; None for any other schema."""
    base = avro.get("type")
    if base == "fixed":
        return pa.binary(int(avro["size"]))
    if base == "record":
        return pa.struct([_field(f["name"], f["type"], f.get("field-id")) for f in avro["fields"]])
    if base == "array":
        items = avro["items"]
        if avro.get("logicalType") == "map" and isinstance(items, dict) and items.get("type") == "record":
            key, value = items["fields"]
            return _map(key["type"], key.get("field-id"), value["type"], value.get("field-id"))
        return pa.list_(_field("element", items, avro.get("element-id")))
    if base == "map":
        return _map("string", avro.get("key-id"), avro["values"], avro.get("value-id"))
    return None


def _map(key: Any, key_id: Any, value: Any, value_id: Any) -> pa.DataType:
    return pa.map_(_field("key", key, key_id).with_nullable(False), _field("value", value, value_id))


def _to_arrow_values(value: Any, kind: pa.DataType) -> Any:
    """A decoded value as pyarrow takes it for ``kind`` (maps arrive as a dict or, with
    non-string keys, as key/value records)."""
    if value is None:
        return None
    if pa.types.is_map(kind):
        pairs = value.items() if isinstance(value, dict) else ((p["key"], p["value"]) for p in value)
        return [(_to_arrow_values(k, kind.key_type), _to_arrow_values(v, kind.item_type)) for k, v in pairs]
    if pa.types.is_struct(kind):
        return {kind.field(i).name: _to_arrow_values(value.get(kind.field(i).name), kind.field(i).type)
                for i in range(kind.num_fields)}
    if pa.types.is_list(kind):
        return [_to_arrow_values(v, kind.value_type) for v in value]
    if pa.types.is_fixed_size_binary(kind) and not isinstance(value, (bytes, bytearray)):
        return value.bytes  # a uuid fastavro decoded
    return value


class AvroDataFile:
    """An Iceberg Avro data file, decoded whole, as ``pyarrow.orc.ORCFile`` shows a file."""

    def __init__(self, source: Any) -> None:
        import fastavro

        data = source.read_at(source.size(), 0) if hasattr(source, "read_at") else source.read()
        reader = fastavro.reader(io.BytesIO(bytes(data)))
        writer_schema = reader.writer_schema
        if not isinstance(writer_schema, dict) or writer_schema.get("type") != "record":
            raise AvroSchemaError("an Iceberg Avro data file holds records")
        self.schema = pa.schema([_field(f["name"], f["type"], f.get("field-id")) for f in writer_schema["fields"]])
        records: list[Any] = list(reader)
        columns = []
        for f in self.schema:
            values = [_to_arrow_values(r.get(f.name), f.type) for r in records]
            columns.append(pa.array(values, f.type))
        self._batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self.nrows = len(records)
        self.nstripes = 1

    def read_stripe(self, stripe: int, columns: list[str] | None = None) -> pa.RecordBatch:
        if stripe != 0:
            raise IndexError(f"an Avro data file is read as one stripe, not stripe {stripe}")
        return self._batch.select(columns) if columns is not None else self._batch
