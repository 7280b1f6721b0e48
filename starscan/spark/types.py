"""Spark type -> StarRocks type: the one mapping used by `_schema` and by the plan's column
list (docs/protocol.md section 5.2). The Arrow types on the wire come from
starscan.core.sql_types, which needs no Spark."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import types as T

from starscan.core.sql_types import (
    SqlType,
    decimal_precision_scale,  # noqa: F401  (re-exported: the planner uses it)
    parse_type,
)

# TPrimitiveType values (docs/protocol.md section 3).
# The range of each SQL integer type (Spark's and StarRocks' alike).
INTEGER_RANGES: dict[str, tuple[int, int]] = {
    "tinyint": (-(2**7), 2**7 - 1), "smallint": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1), "bigint": (-(2**63), 2**63 - 1),
}
INT_MIN, INT_MAX = INTEGER_RANGES["int"]
LONG_MIN, LONG_MAX = INTEGER_RANGES["bigint"]
SPARK_INTEGER_RANGES: dict[type, tuple[int, int]] = {
    T.ByteType: INTEGER_RANGES["tinyint"], T.ShortType: INTEGER_RANGES["smallint"],
    T.IntegerType: INTEGER_RANGES["int"], T.LongType: INTEGER_RANGES["bigint"],
}


PRIMITIVE = {
    "INVALID_TYPE": 0, "NULL_TYPE": 1, "BOOLEAN": 2, "TINYINT": 3, "SMALLINT": 4, "INT": 5,
    "BIGINT": 6, "FLOAT": 7, "DOUBLE": 8, "DATE": 9, "DATETIME": 10, "BINARY": 11,
    "DECIMAL": 12, "CHAR": 13, "LARGEINT": 14, "VARCHAR": 15, "HLL": 16, "DECIMALV2": 17,
    "TIME": 18, "OBJECT": 19, "PERCENTILE": 20, "DECIMAL32": 21, "DECIMAL64": 22,
    "DECIMAL128": 23, "JSON": 24, "FUNCTION": 25, "VARBINARY": 26,
}

DECIMAL_TYPES = {"DECIMAL", "DECIMALV2", "DECIMAL32", "DECIMAL64", "DECIMAL128"}

# MySQL-style DATA_TYPE spellings (information_schema) for later use by the MySQL port.
_SCALARS: dict[type, str] = {
    T.BooleanType: "BOOLEAN",
    T.ByteType: "TINYINT",
    T.ShortType: "SMALLINT",
    T.IntegerType: "INT",
    T.LongType: "BIGINT",
    T.FloatType: "FLOAT",
    T.DoubleType: "DOUBLE",
    T.DateType: "DATE",
    T.TimestampType: "DATETIME",
    T.TimestampNTZType: "DATETIME",
    T.StringType: "VARCHAR",
    T.BinaryType: "VARBINARY",
    T.NullType: "NULL_TYPE",
}


@dataclass(frozen=True)
class StarRocksType:
    """How one Spark column appears to StarRocks clients."""

    name: str                 # FE type name (`_schema` "type"), e.g. DECIMAL64, VARCHAR, INVALID_TYPE
    primitive: int            # TPrimitiveType value in selected_columns
    precision: int | None = None
    scale: int | None = None
    column_size: int | None = None  # varchar/char length when declared

    @property
    def is_decimal(self) -> bool:
        return self.name in DECIMAL_TYPES


def decimal_type_name(precision: int) -> str:
    if precision <= 9:
        return "DECIMAL32"
    if precision <= 18:
        return "DECIMAL64"
    return "DECIMAL128"


def starrocks_type(field: T.StructField) -> StarRocksType:
    """Map one Spark field (with its char/varchar metadata) to its StarRocks type."""
    dt = field.dataType
    declared = (field.metadata or {}).get("__CHAR_VARCHAR_TYPE_STRING", "")
    if isinstance(dt, T.StringType) and declared:
        kind, _, rest = declared.partition("(")
        length = int(rest.rstrip(")")) if rest else None
        name = "CHAR" if kind.lower() == "char" else "VARCHAR"
        return StarRocksType(name, PRIMITIVE[name], column_size=length)
    if isinstance(dt, (T.CharType, T.VarcharType)):
        name = "CHAR" if isinstance(dt, T.CharType) else "VARCHAR"
        return StarRocksType(name, PRIMITIVE[name], column_size=dt.length)
    if isinstance(dt, T.DecimalType):
        name = decimal_type_name(dt.precision)
        return StarRocksType(name, PRIMITIVE[name], precision=dt.precision, scale=dt.scale)
    if isinstance(dt, (T.ArrayType, T.MapType, T.StructType)):
        return StarRocksType("INVALID_TYPE", PRIMITIVE["INVALID_TYPE"])
    scalar = _SCALARS.get(type(dt))
    if scalar is None:  # intervals, variant, ...: readable by nobody
        return StarRocksType("INVALID_TYPE", PRIMITIVE["INVALID_TYPE"])
    return StarRocksType(scalar, PRIMITIVE[scalar])


def is_supported(dt: T.DataType) -> bool:
    """Can the BE turn values of this Spark type into Arrow for a StarRocks client?"""
    if isinstance(dt, T.ArrayType):
        return is_supported(dt.elementType)
    if isinstance(dt, T.MapType):
        return is_supported(dt.keyType) and is_supported(dt.valueType)
    if isinstance(dt, T.StructType):
        return all(is_supported(f.dataType) for f in dt.fields)
    return isinstance(dt, (T.DecimalType, T.CharType, T.VarcharType)) or type(dt) in _SCALARS


# ---- information_schema.COLUMNS (the MySQL port) ------------------------------------
# StarRocks' spellings: DATA_TYPE is ``Type.toMysqlDataTypeString`` (lower-case type name,
# BOOLEAN -> tinyint, every decimal -> decimal), COLUMN_TYPE is ``toMysqlColumnTypeString``,
# COLUMN_SIZE is ``Type.getColumnSize`` (numeric precision, or char/varchar length) and
# DECIMAL_DIGITS is ``Type.getDecimalDigits`` (0 for integers, 7/15 for float/double, the
# decimal scale); types without one get NULL.
STRING_LENGTH = 65533  # StarRocks' STRING is VARCHAR(65533)

_MYSQL_NUMERIC: dict[str, tuple[str, int | None, int]] = {
    # name: (COLUMN_TYPE, COLUMN_SIZE, DECIMAL_DIGITS)
    "BOOLEAN": ("tinyint(1)", None, 0),
    "TINYINT": ("tinyint(4)", 3, 0),
    "SMALLINT": ("smallint(6)", 5, 0),
    "INT": ("int(11)", 10, 0),
    "BIGINT": ("bigint(20)", 19, 0),
    "FLOAT": ("float", 7, 7),
    "DOUBLE": ("double", 15, 15),
}


@dataclass(frozen=True)
class MysqlColumnType:
    """How one column reads in StarRocks' information_schema.COLUMNS."""

    data_type: str            # DATA_TYPE
    column_type: str          # COLUMN_TYPE (also DESC's Type)
    column_size: int | None   # COLUMN_SIZE
    decimal_digits: int | None  # DECIMAL_DIGITS


def mysql_column_type(field: T.StructField) -> MysqlColumnType:
    dt = field.dataType
    if isinstance(dt, (T.ArrayType, T.MapType, T.StructType)):
        kind = {T.ArrayType: "array", T.MapType: "map", T.StructType: "struct"}[type(dt)]
        return MysqlColumnType(kind, _complex_sql(dt), None, None)
    srt = starrocks_type(field)
    name = srt.name
    if name in _MYSQL_NUMERIC:
        column_type, size, digits = _MYSQL_NUMERIC[name]
        return MysqlColumnType("tinyint" if name == "BOOLEAN" else name.lower(), column_type, size, digits)
    if srt.is_decimal:
        return MysqlColumnType("decimal", f"decimal({srt.precision},{srt.scale})", srt.precision, srt.scale)
    if name in ("CHAR", "VARCHAR"):
        length = srt.column_size if srt.column_size is not None else STRING_LENGTH
        return MysqlColumnType(name.lower(), f"{name.lower()}({length})", length, None)
    if name in ("DATE", "DATETIME", "VARBINARY", "NULL_TYPE"):
        return MysqlColumnType(name.lower(), name.lower(), None, None)
    return MysqlColumnType("unknown", "unknown", None, None)


def _complex_sql(dt: T.DataType) -> str:
    if isinstance(dt, T.ArrayType):
        return f"array<{_complex_sql(dt.elementType)}>"
    if isinstance(dt, T.MapType):
        return f"map<{_complex_sql(dt.keyType)},{_complex_sql(dt.valueType)}>"
    if isinstance(dt, T.StructType):
        return "struct<" + ", ".join(f"{f.name} {_complex_sql(f.dataType)}" for f in dt.fields) + ">"
    return mysql_column_type(T.StructField("_", dt)).column_type


def sql_type(dt: T.DataType) -> SqlType:
    """A Spark type in the Spark-free model the Arrow readers and the wire conversion use."""
    return parse_type(dt.jsonValue())
