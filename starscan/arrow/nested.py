"""Columns whose files name them apart from the table's schema, down to the fields of
structs nested in them: Iceberg resolves every field (at any depth) by its field id, Delta's
column mapping gives every struct field a physical name. A column's name in the files is a
``FileName``:

- a key: the column's name in the files (matched case-insensitively, as Spark matches
  Parquet columns) or its Parquet field id (an int), its nested fields named as in the
  schema;
- or, where nested fields are named apart too, a JSON object with the column's ``key`` and,
  by its type, ``fields`` (a struct: each field's schema name -> its FileName), ``element``
  (an array's element) or ``keys`` and ``values`` (a map's). An element's, a map key's or a
  map value's own ``key`` means nothing (they are found by position).

:func:`conform` rebuilds a file's nested array as the schema's type by these names: a field
the file lacks reads as NULL (a field added since the file was written), as for a column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

FileKey = str | int
FileName = FileKey | Mapping[str, Any]

__all__ = ["FileKey", "FileName", "conform", "field_id_of", "file_fields", "key_of", "is_nested_name", "parse_file_name", "NestedMismatch"]


class NestedMismatch(ValueError):
    """A file's nested column does not have the shape the schema says (a struct where the
    schema has a list, ...)."""


def key_of(name: FileName) -> FileKey:
    """The column's (or field's) own key in the files."""
    if isinstance(name, Mapping):
        key = name.get("key")
        return key if isinstance(key, int) else str(key)
    return name


def is_nested_name(name: FileName) -> bool:
    return isinstance(name, Mapping)


def parse_file_name(value: Any) -> FileName:
    """A FileName from its JSON form, checked; ValueError when malformed."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a column's name in the files")
    if isinstance(value, (int, str)):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{value!r} is not a column's name in the files")
    out: dict[str, Any] = {"key": value.get("key") if isinstance(value.get("key"), (int, str)) else None}
    if "fields" in value:
        fields = value["fields"]
        if not isinstance(fields, Mapping):
            raise ValueError("a struct's \"fields\" must be an object")
        out["fields"] = {str(k): parse_file_name(v) for k, v in fields.items()}
    for part in ("element", "keys", "values"):
        if part in value:
            out[part] = parse_file_name(value[part])
    return out


Leaf = Callable[[pa.Array, pa.DataType], pa.Array]


def conform(array: pa.Array, name: FileName | None, expected: pa.DataType, leaf: Leaf) -> pa.Array:
    """``array`` (a file's column or nested field) as ``expected``, its struct fields found by
    the keys ``name`` gives (by their schema names where it gives none); values that are not
    nested go through ``leaf`` (the reader's type rules: widening, UUID text, ...)."""
    spec = name if isinstance(name, Mapping) else {}
    actual = array.type
    if pa.types.is_struct(expected):
        if not pa.types.is_struct(actual):
            raise NestedMismatch(f"a struct in the schema is {actual} in the file")
        given = spec.get("fields") or {}
        find = _child_finder(actual)
        children = array.flatten()  # offset applied; the struct's own nulls are kept below
        arrays = []
        for f in expected:
            sub = given.get(f.name)
            at = find(key_of(sub) if sub is not None else f.name)
            if at is None:
                arrays.append(pa.nulls(len(array), f.type))
            else:
                arrays.append(conform(children[at], sub, f.type, leaf))
        return pa.StructArray.from_arrays(arrays, fields=list(expected), mask=_mask(array))
    if pa.types.is_map(expected):
        if not pa.types.is_map(actual):
            raise NestedMismatch(f"a map in the schema is {actual} in the file")
        keys = conform(array.keys, spec.get("keys"), expected.key_type, leaf)
        items = conform(array.items, spec.get("values"), expected.item_type, leaf)
        return pa.MapArray.from_arrays(_offsets(array), keys, items, type=expected, mask=_mask(array))
    if pa.types.is_list(expected) or pa.types.is_large_list(expected):
        if not (pa.types.is_list(actual) or pa.types.is_large_list(actual)):
            raise NestedMismatch(f"an array in the schema is {actual} in the file")
        values = conform(array.values, spec.get("element"), expected.value_type, leaf)
        cls = pa.LargeListArray if pa.types.is_large_list(expected) else pa.ListArray
        return cls.from_arrays(_offsets(array, large=pa.types.is_large_list(expected)), values, type=expected,
                               mask=_mask(array))
    return leaf(array, expected)


def _child_finder(struct: pa.StructType) -> Callable[[FileKey], int | None]:
    """A struct's field by name or field id, as ``_position_finder``."""
    return _position_finder(struct.field(i) for i in range(struct.num_fields))


def _position_finder(fields: Iterable[pa.Field]) -> Callable[[FileKey], int | None]:
    """The position of a field by name (case-insensitively, the first of names differing only
    in case, as Spark reads Parquet) or by field id (an int: Parquet's, or the ``iceberg.id``
    attribute of an Iceberg ORC file)."""
    by_lower: dict[str, int] = {}
    by_id: dict[int, int] = {}
    for i, f in enumerate(fields):
        by_lower.setdefault(f.name.lower(), i)
        field_id = field_id_of(f)
        if field_id is not None:
            by_id.setdefault(field_id, i)

    def find(key: FileKey) -> int | None:
        return by_id.get(key) if isinstance(key, int) else by_lower.get(key.lower())

    return find


def field_id_of(field: pa.Field) -> int | None:
    """A file's field id: Parquet's, or the ``iceberg.id`` attribute Iceberg's ORC writer
    gives each ORC type (pyarrow shows both as field metadata)."""
    meta = field.metadata or {}
    raw = meta.get(b"PARQUET:field_id", meta.get(b"iceberg.id"))
    return int(raw) if raw is not None and raw.strip().lstrip(b"-").isdigit() else None


def file_fields(schema: pa.Schema) -> Callable[[FileKey], pa.Field | None]:
    """A file's top-level field by name or field id, as ``_position_finder``; None where the
    file has none (Spark reads such a column as NULL)."""
    find = _position_finder(schema)

    def lookup(key: FileKey) -> pa.Field | None:
        position = find(key)
        return None if position is None else schema.field(position)

    return lookup


def _mask(array: pa.Array) -> pa.Array | None:
    return array.is_null() if array.null_count else None


def _offsets(array: Any, large: bool = False) -> pa.Array:
    """A list's (or map's) offsets into its whole child array, in the width wanted."""
    offsets = array.offsets
    want = pa.int64() if large else pa.int32()
    if array.offset:  # a slice: pyarrow builds lists with a null mask from unsliced offsets only
        offsets = pa.array(offsets.to_numpy(), type=offsets.type)
    return offsets if offsets.type == want else offsets.cast(want)


def map_leaves(array: pa.Array, fn: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """``array`` with ``fn`` applied to each array of scalars inside it (struct fields, list
    elements, map keys and values, at any depth); a leaf whose type ``fn`` changes changes
    in the nested type too (its field's name, nullability and metadata kept)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = array.type
    if pa.types.is_struct(kind):
        children = [map_leaves(array.field(i).slice(array.offset, len(array)), fn) for i in range(kind.num_fields)]
        fields = [kind.field(i).with_type(child.type) for i, child in enumerate(children)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=_mask(array))
    if pa.types.is_map(kind):
        keys, items = map_leaves(array.keys, fn), map_leaves(array.items, fn)
        map_type = pa.map_(kind.key_field.with_type(keys.type), kind.item_field.with_type(items.type), kind.keys_sorted)
        return pa.MapArray.from_arrays(_offsets(array), keys, items, type=map_type, mask=_mask(array))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        large = pa.types.is_large_list(kind)
        values = map_leaves(array.values, fn)
        field = kind.value_field.with_type(values.type)
        builder = pa.LargeListArray if large else pa.ListArray
        return builder.from_arrays(_offsets(array, large), values, type=pa.large_list(field) if large else pa.list_(field),
                                   mask=_mask(array))
    return fn(array)
