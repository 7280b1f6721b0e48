"""An Iceberg table's schema as starscan serves it: Spark's types for Iceberg's (as Spark's
Iceberg connector maps them), the columns no reader can be given (``time``), and each
column's field ids when names no longer say which data is which."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starscan.core.errors import TableUnreadable

if TYPE_CHECKING:
    from pyspark.sql import types as T

    from starscan.arrow.nested import FileName


def field_ids_needed(loaded: Any) -> tuple[tuple[str, FileName], ...]:
    """Each column's field id, with its nested fields' (starscan.arrow.nested), when names
    no longer say which data is which: a column or nested field renamed, or a name dropped
    and added again (a new field id), in the table's schema history; or when the table has a
    UUID column or field (the ids send the sql engine through starscan's reader). Iceberg
    resolves columns by field id (the Parquet files carry them); while every name has kept
    one id, reading by name is the same (and lets Spark's own reader read the files)."""
    from pyiceberg.schema import index_name_by_id

    names_of: dict[int, set[str]] = {}
    ids_of: dict[str, set[int]] = {}
    for schema in loaded.schemas().values():
        for field_id, name in index_name_by_id(schema).items():
            names_of.setdefault(field_id, set()).add(name)
            ids_of.setdefault(name.lower(), set()).add(field_id)
    stable = all(len(n) == 1 for n in names_of.values()) and all(len(i) == 1 for i in ids_of.values())
    if stable and not _has_uuid(loaded.schema()):
        return ()
    return ids_by_column(loaded)


def ids_by_column(loaded: Any) -> tuple[tuple[str, FileName], ...]:
    """Each column of the current schema with its field id and its nested fields'."""
    return tuple((f.name, _ids_of(f.field_id, f.field_type)) for f in loaded.schema().fields)


def _ids_of(field_id: int, kind: Any) -> FileName:
    """A field's id, with the ids of the fields nested in its type."""
    from pyiceberg import types as I

    if isinstance(kind, I.StructType):
        return {"key": int(field_id), "fields": {f.name: _ids_of(f.field_id, f.field_type) for f in kind.fields}}
    if isinstance(kind, I.ListType):
        return {"key": int(field_id), "element": _ids_of(kind.element_id, kind.element_type)}
    if isinstance(kind, I.MapType):
        return {"key": int(field_id), "keys": _ids_of(kind.key_id, kind.key_type),
                "values": _ids_of(kind.value_id, kind.value_type)}
    return int(field_id)


def _has_uuid(schema: Any) -> bool:
    """Whether a column or a field nested in one is a UUID: Spark's Parquet reader reads its
    16 bytes as binary, not as the text the schema says; starscan's reader (which field ids
    send every engine to) writes the text."""
    from pyiceberg import types as I
    from pyiceberg.schema import index_by_id

    return any(isinstance(f.field_type, I.UUIDType) for f in index_by_id(schema).values())


def _time_in(t: Any) -> bool:
    """Whether an Iceberg type is ``time`` or holds one (in a struct, list or map)."""
    from pyiceberg import types as I

    if isinstance(t, I.TimeType):
        return True
    if isinstance(t, I.StructType):
        return any(_time_in(f.field_type) for f in t.fields)
    if isinstance(t, I.ListType):
        return _time_in(t.element_type)
    if isinstance(t, I.MapType):
        return _time_in(t.key_type) or _time_in(t.value_type)
    return False


def unread_columns(name: str, schema: Any) -> tuple[tuple[str, str], ...]:
    """The columns no StarRocks reader can be given, each with why: those of Iceberg's
    ``time`` type (or holding one). The table is served without them; a query that names
    one is refused with the reason."""
    return tuple((f.name, f"column {f.name} of table {name} has Iceberg type {f.field_type}, for which neither "
                          "StarRocks nor Spark has a type (Spark's Iceberg connector refuses the whole table): "
                          "starscan serves the table without it; select the other columns")
                 for f in schema.fields if _time_in(f.field_type))


def to_spark_schema(name: str, schema: Any) -> T.StructType:
    """Iceberg's schema as Spark's Iceberg connector shows it, without the columns of
    ``unread_columns``."""
    from pyspark.sql import types as T

    def convert(t: Any, column: str) -> T.DataType:
        from pyiceberg import types as I

        simple: dict[type, T.DataType] = {
            I.BooleanType: T.BooleanType(), I.IntegerType: T.IntegerType(), I.LongType: T.LongType(),
            I.FloatType: T.FloatType(), I.DoubleType: T.DoubleType(), I.DateType: T.DateType(),
            I.TimestampType: T.TimestampNTZType(), I.TimestamptzType: T.TimestampType(),
            I.StringType: T.StringType(), I.BinaryType: T.BinaryType(),
            # As Spark's Iceberg connector shows them: a UUID as its 36-character text, a
            # fixed-length byte array as binary.
            I.UUIDType: T.StringType(), I.FixedType: T.BinaryType(),
        }
        for cls, spark in simple.items():
            if isinstance(t, cls):
                return spark
        if isinstance(t, I.DecimalType):
            return T.DecimalType(t.precision, t.scale)
        if isinstance(t, I.StructType):
            return T.StructType([T.StructField(f.name, convert(f.field_type, f"{column}.{f.name}"), not f.required)
                                 for f in t.fields])
        if isinstance(t, I.ListType):
            return T.ArrayType(convert(t.element_type, column), not t.element_required)
        if isinstance(t, I.MapType):
            return T.MapType(convert(t.key_type, column), convert(t.value_type, column), not t.value_required)
        reason = " (Spark's Iceberg connector has no type for it either)" if isinstance(t, I.TimeType) else ""
        raise TableUnreadable(f"table {name}: column {column} has Iceberg type {t}, which starscan does not read{reason}")

    return T.StructType([T.StructField(f.name, convert(f.field_type, f.name), not f.required) for f in schema.fields
                         if not _time_in(f.field_type)])
