"""Spark SQL's column types without Spark: what a table's schema says, read from the JSON
Spark writes for it (``StructType.json()``, which every plan carries).

The Arrow readers (the BE's ``arrow`` engine and the client's direct reads) need to know a
column's type exactly, but the client must not load pyspark. ``SqlType`` is that knowledge:
the kind and its parameters, Spark's own Arrow type for it (what ``toArrow`` gives) and
the Arrow type StarRocks' wire uses (dates and timestamps as text).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from starscan.core.errors import PlanInvalid, SqlInvalid

__all__ = ["Field", "SqlType", "decimal_precision_scale", "decimal_type_of", "parse_schema", "parse_type"]

INTEGRAL_KINDS = ("byte", "short", "integer", "long")
#: Decimal digits each integral kind holds.
INTEGRAL_DIGITS = {"byte": 3, "short": 5, "integer": 10, "long": 19}
SCALAR_KINDS = frozenset({"boolean", *INTEGRAL_KINDS, "float", "double", "decimal", "string", "binary", "date",
                          "timestamp", "timestamp_ntz"})
_SIMPLE_ARROW: dict[str, pa.DataType] = {
    "boolean": pa.bool_(), "byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64(),
    "float": pa.float32(), "double": pa.float64(), "string": pa.utf8(), "binary": pa.binary(), "date": pa.date32(),
    "void": pa.null(),
}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")
_LENGTH = re.compile(r"(char|varchar)\((\d+)\)")


@dataclass(frozen=True)
class SqlType:
    """One Spark SQL type. ``kind`` is Spark's JSON name (``integer``, ``decimal``,
    ``timestamp_ntz``, ``array``, ...); parameters are set for the kinds that have them."""

    kind: str
    precision: int | None = None      # decimal
    scale: int | None = None          # decimal
    length: int | None = None         # char / varchar
    collation: str | None = None      # a string with a collation other than the default
    element: SqlType | None = None    # array
    contains_null: bool = True        # array elements / map values
    key: SqlType | None = None        # map
    value: SqlType | None = None      # map
    fields: tuple[Field, ...] = ()    # struct

    @property
    def is_integral(self) -> bool:
        return self.kind in INTEGRAL_KINDS

    @property
    def is_scalar(self) -> bool:
        return self.kind in SCALAR_KINDS

    @property
    def is_nested(self) -> bool:
        return self.kind in ("array", "map", "struct")

    @property
    def is_string(self) -> bool:
        return self.kind in ("string", "char", "varchar")

    def simple_string(self) -> str:
        """Spark's short spelling (``decimal(10,2)``, ``array<int>``), for messages."""
        if self.kind == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.kind in ("char", "varchar"):
            return f"{self.kind}({self.length})"
        if self.kind == "array":
            assert self.element is not None
            return f"array<{self.element.simple_string()}>"
        if self.kind == "map":
            assert self.key is not None and self.value is not None
            return f"map<{self.key.simple_string()},{self.value.simple_string()}>"
        if self.kind == "struct":
            return "struct<" + ",".join(f"{f.name}:{f.type.simple_string()}" for f in self.fields) + ">"
        return {"integer": "int", "long": "bigint", "byte": "tinyint", "short": "smallint"}.get(self.kind, self.kind)

    def spark_arrow_type(self, time_zone: str) -> pa.DataType:
        """The Arrow type Spark gives this type (``toArrow``; timestamps in the session's
        ``time_zone``)."""
        simple = _SIMPLE_ARROW.get("string" if self.kind in ("char", "varchar") else self.kind)
        if simple is not None:
            return simple
        if self.kind == "decimal":
            return pa.decimal128(self.precision or 10, self.scale or 0)
        if self.kind == "timestamp":
            return pa.timestamp("us", tz=time_zone)
        if self.kind == "timestamp_ntz":
            return pa.timestamp("us")
        if self.kind == "array":
            assert self.element is not None
            return pa.list_(pa.field("element", self.element.spark_arrow_type(time_zone), self.contains_null))
        if self.kind == "map":
            assert self.key is not None and self.value is not None
            return pa.map_(self.key.spark_arrow_type(time_zone),
                           pa.field("value", self.value.spark_arrow_type(time_zone), self.contains_null))
        if self.kind == "struct":
            return pa.struct([pa.field(f.name, f.type.spark_arrow_type(time_zone), f.nullable) for f in self.fields])
        raise TypeError(f"Spark type {self.simple_string()} has no Arrow type")

    def wire_arrow_type(self) -> pa.DataType:
        """The Arrow type a StarRocks BE sends for this type: dates and timestamps as text."""
        if self.kind in ("date", "timestamp", "timestamp_ntz", "string", "char", "varchar"):
            return pa.utf8()
        if self.kind == "decimal":
            return pa.decimal128(self.precision or 10, self.scale or 0)
        if self.kind == "array":
            assert self.element is not None
            return pa.list_(pa.field("element", self.element.wire_arrow_type(), self.contains_null))
        if self.kind == "map":
            assert self.key is not None and self.value is not None
            return pa.map_(self.key.wire_arrow_type(), pa.field("value", self.value.wire_arrow_type(), self.contains_null))
        if self.kind == "struct":
            return pa.struct([pa.field(f.name, f.type.wire_arrow_type(), f.nullable) for f in self.fields])
        simple = _SIMPLE_ARROW.get(self.kind)
        if simple is None:
            raise TypeError(f"Spark type {self.simple_string()} has no StarRocks Arrow encoding")
        return simple

    def needs_wire_conversion(self) -> bool:
        """True when Spark's own Arrow for this type differs from the wire's."""
        if self.kind in ("date", "timestamp", "timestamp_ntz"):
            return True
        if self.kind == "array":
            assert self.element is not None
            return self.element.needs_wire_conversion()
        if self.kind == "map":
            assert self.key is not None and self.value is not None
            return self.key.needs_wire_conversion() or self.value.needs_wire_conversion()
        return any(f.type.needs_wire_conversion() for f in self.fields)


@dataclass(frozen=True)
class Field:
    """A column of a table or a struct: name, type, nullability and Spark's metadata."""

    name: str
    type: SqlType
    nullable: bool = True
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def declared_char_length(self) -> int | None:
        """N of a column declared ``CHAR(N)`` (Spark keeps it as a string with this in its
        metadata, and pads values to N)."""
        declared = str(self.metadata.get("__CHAR_VARCHAR_TYPE_STRING", "")).lower().replace(" ", "")
        found = _LENGTH.fullmatch(declared)
        return int(found.group(2)) if found and found.group(1) == "char" else None

    @property
    def is_char(self) -> bool:
        return self.declared_char_length is not None or self.type.kind == "char"


def parse_type(value: Any) -> SqlType:
    """A type as Spark's JSON writes it: a name (``"long"``, ``"decimal(10,2)"``) or an
    object (``{"type": "array", ...}``). Kinds this module does not model (intervals,
    variant, user-defined types) keep their name: they are not scalar, and no Arrow type
    is given for them."""
    if isinstance(value, str):
        text = value.strip()
        found = _DECIMAL.fullmatch(text)
        if found:
            return SqlType("decimal", precision=int(found.group(1)), scale=int(found.group(2)))
        if text == "decimal":
            return SqlType("decimal", precision=10, scale=0)
        found = _LENGTH.fullmatch(text)
        if found:
            return SqlType(found.group(1), length=int(found.group(2)))
        if text.startswith("string collate "):
            collation = text[len("string collate "):].strip()
            return SqlType("string", collation=None if collation.upper() == "UTF8_BINARY" else collation)
        return SqlType(text)
    if isinstance(value, dict):
        kind = value.get("type")
        if kind == "array":
            return SqlType("array", element=parse_type(value["elementType"]), contains_null=bool(value.get("containsNull", True)))
        if kind == "map":
            return SqlType("map", key=parse_type(value["keyType"]), value=parse_type(value["valueType"]),
                           contains_null=bool(value.get("valueContainsNull", True)))
        if kind == "struct":
            return SqlType("struct", fields=tuple(_field(f) for f in value.get("fields", ())))
        if kind == "udt":
            return SqlType("udt")
    raise ValueError(f"not a Spark type: {str(value)[:100]!r}")


def _field(doc: dict[str, Any]) -> Field:
    name, metadata = str(doc["name"]), dict(doc.get("metadata") or {})
    sql_type = parse_type(doc["type"])
    # Spark writes a string field's collation into its metadata (``__COLLATIONS``: the field's
    # path -> ``spark.UTF8_LCASE``), and its type as plain "string".
    collation = str((metadata.get("__COLLATIONS") or {}).get(name, "")).rpartition(".")[2]
    if sql_type.kind == "string" and collation and collation.upper() != "UTF8_BINARY":
        sql_type = replace(sql_type, collation=collation)
    return Field(name, sql_type, bool(doc.get("nullable", True)), metadata)


def parse_schema(text: str | dict[str, Any]) -> tuple[Field, ...]:
    """A table's columns from Spark's schema JSON (``StructType.json()``)."""
    doc = json.loads(text) if isinstance(text, str) else text
    struct = parse_type(doc)
    if struct.kind != "struct":
        raise ValueError("a table schema is a struct")
    return struct.fields


MAX_DECIMAL_PRECISION = 38


def decimal_precision_scale(value: Decimal) -> tuple[Decimal, int, int]:
    """A finite decimal literal's value, precision and scale as Spark's parser types it
    (java.math.BigDecimal's rules: ``1E+2`` has scale 0, leading zeros do not count,
    precision >= scale, at least 1)."""
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int), "a finite value"
    if exponent > 0:
        value = value.quantize(Decimal(1), context=Context(prec=400))
        _, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)
    scale = -exponent
    return value, max(len(digits), scale, 1), scale


def decimal_type_of(text: str) -> tuple[Decimal, int, int]:
    """Value, precision and scale Spark's parser gives the decimal literal ``text``
    (java.math.BigDecimal precision; precision >= scale; no negative scale)."""
    try:
        value = Decimal(text.strip())
    except (InvalidOperation, AttributeError):
        raise PlanInvalid(f"query plan has a bad decimal literal {text!r}") from None
    if not value.is_finite():
        raise PlanInvalid(f"query plan has a bad decimal literal {text!r}")
    value, precision, scale = decimal_precision_scale(value)
    if precision > MAX_DECIMAL_PRECISION:
        raise SqlInvalid(f"decimal literal {text!r}: precision {precision} exceeds max precision 38")
    return value, precision, scale
