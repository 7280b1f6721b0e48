"""Flight SQL's metadata commands, answered from what the user may see (``CatalogView``:
databases and tables with a SELECT grant). The result schemas are the ones Flight SQL
defines for each command. starscan has one catalog, StarRocks'
``default_catalog``; its databases are Flight SQL's "db schemas"."""

from __future__ import annotations

import pyarrow as pa
from google.protobuf import any_pb2

import starscan
from starscan.core.errors import BadRequest
from starscan.flight import flight_sql_pb2 as sql_pb2
from starscan.planner.statements.catalog_view import CatalogView
from starscan.planner.statements.show import like_pattern
from starscan.spark.types import sql_type as spark_sql_type

CATALOG = "default_catalog"
TABLE_TYPES = ("TABLE",)

_UTF8 = pa.utf8()
CATALOGS_SCHEMA = pa.schema([pa.field("catalog_name", _UTF8, False)])
DB_SCHEMAS_SCHEMA = pa.schema([pa.field("catalog_name", _UTF8), pa.field("db_schema_name", _UTF8, False)])
TABLES_SCHEMA = pa.schema([pa.field("catalog_name", _UTF8), pa.field("db_schema_name", _UTF8),
                           pa.field("table_name", _UTF8, False), pa.field("table_type", _UTF8, False)])
TABLES_WITH_SCHEMA = TABLES_SCHEMA.append(pa.field("table_schema", pa.binary(), False))
TABLE_TYPES_SCHEMA = pa.schema([pa.field("table_type", _UTF8, False)])
PRIMARY_KEYS_SCHEMA = pa.schema([
    pa.field("catalog_name", _UTF8), pa.field("db_schema_name", _UTF8), pa.field("table_name", _UTF8, False),
    pa.field("column_name", _UTF8, False), pa.field("key_name", _UTF8), pa.field("key_sequence", pa.int32(), False)])
FOREIGN_KEYS_SCHEMA = pa.schema([
    pa.field("pk_catalog_name", _UTF8), pa.field("pk_db_schema_name", _UTF8), pa.field("pk_table_name", _UTF8, False),
    pa.field("pk_column_name", _UTF8, False), pa.field("fk_catalog_name", _UTF8), pa.field("fk_db_schema_name", _UTF8),
    pa.field("fk_table_name", _UTF8, False), pa.field("fk_column_name", _UTF8, False),
    pa.field("key_sequence", pa.int32(), False), pa.field("fk_key_name", _UTF8), pa.field("pk_key_name", _UTF8),
    pa.field("update_rule", pa.uint8(), False), pa.field("delete_rule", pa.uint8(), False)])

# GetSqlInfo's value: a dense union whose members Flight SQL fixes, in this order.
_INFO_VALUE = pa.dense_union([
    pa.field("string_value", _UTF8), pa.field("bool_value", pa.bool_()), pa.field("bigint_value", pa.int64()),
    pa.field("int32_bitmask", pa.int32()), pa.field("string_list", pa.list_(pa.field("item", _UTF8))),
    pa.field("int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.field("item", pa.int32())))),
])
SQL_INFO_SCHEMA = pa.schema([pa.field("info_name", pa.uint32(), False), pa.field("value", _INFO_VALUE, False)])

_I = sql_pb2.SqlInfo
# code -> value (str: string_value, bool: bool_value, int: bigint_value)
_SQL_INFO: dict[int, str | bool | int] = {
    _I.FLIGHT_SQL_SERVER_NAME: "starscan",
    _I.FLIGHT_SQL_SERVER_VERSION: starscan.__version__,
    _I.FLIGHT_SQL_SERVER_ARROW_VERSION: pa.__version__,
    _I.FLIGHT_SQL_SERVER_READ_ONLY: True,
    _I.FLIGHT_SQL_SERVER_SQL: True,
    _I.FLIGHT_SQL_SERVER_SUBSTRAIT: False,
    _I.FLIGHT_SQL_SERVER_CANCEL: False,
    _I.SQL_DDL_CATALOG: False,
    _I.SQL_DDL_SCHEMA: False,
    _I.SQL_DDL_TABLE: False,
    _I.SQL_IDENTIFIER_QUOTE_CHAR: "`",
    _I.SQL_ALL_TABLES_ARE_SELECTABLE: False,
    _I.SQL_SCHEMA_TERM: "database",
    _I.SQL_CATALOG_TERM: "catalog",
    _I.SQL_TRANSACTIONS_SUPPORTED: False,
}
_INT32_INFO = {_I.FLIGHT_SQL_SERVER_TRANSACTION: 0}  # int32 values: no transactions


def _like(pattern: str | None, value: str) -> bool:
    """Flight SQL's filter patterns: SQL LIKE (``%``, ``_``), case-sensitive."""
    return like_pattern(pattern, value)


def _catalog_ok(catalog: str | None) -> bool:
    return catalog is None or catalog == CATALOG


def answer(command: any_pb2.Any, view: CatalogView, time_zone: str) -> pa.Table:
    """The result of a metadata command (a packed Flight SQL message)."""
    for message_type, handler in _HANDLERS:
        message = message_type()
        if command.Unpack(message):
            return handler(message, view, time_zone)
    raise BadRequest(f"the command {command.type_url.rsplit('/', 1)[-1]} is not supported by starscan")


def schema_of(command: any_pb2.Any) -> pa.Schema | None:
    """The result schema of a metadata command, None when ``command`` is not one."""
    for message_type, _ in _HANDLERS:
        message = message_type()
        if command.Unpack(message):
            if isinstance(message, sql_pb2.CommandGetTables) and message.include_schema:
                return TABLES_WITH_SCHEMA
            return _SCHEMAS[message_type]
    return None


def _catalogs(_msg, _view, _tz) -> pa.Table:
    return pa.table({"catalog_name": [CATALOG]}, schema=CATALOGS_SCHEMA)


def _db_schemas(msg, view: CatalogView, _tz) -> pa.Table:
    catalog = msg.catalog if msg.HasField("catalog") else None
    pattern = msg.db_schema_filter_pattern if msg.HasField("db_schema_filter_pattern") else None
    names = [db for db in sorted(view.databases()) if _like(pattern, db)] if _catalog_ok(catalog) else []
    return pa.table({"catalog_name": [CATALOG] * len(names), "db_schema_name": names}, schema=DB_SCHEMAS_SCHEMA)


def _tables(msg, view: CatalogView, time_zone: str) -> pa.Table:
    catalog = msg.catalog if msg.HasField("catalog") else None
    db_pattern = msg.db_schema_filter_pattern if msg.HasField("db_schema_filter_pattern") else None
    table_pattern = msg.table_name_filter_pattern if msg.HasField("table_name_filter_pattern") else None
    types = set(msg.table_types)
    rows: list[tuple[str, str]] = []
    if _catalog_ok(catalog) and (not types or types & set(TABLE_TYPES)):
        for db in sorted(view.databases()):
            if _like(db_pattern, db):
                rows += [(db, t) for t in sorted(view.tables(db)) if _like(table_pattern, t)]
    columns: dict[str, list] = {"catalog_name": [CATALOG] * len(rows), "db_schema_name": [r[0] for r in rows],
                                "table_name": [r[1] for r in rows], "table_type": ["TABLE"] * len(rows)}
    if not msg.include_schema:
        return pa.table(columns, schema=TABLES_SCHEMA)
    columns["table_schema"] = [table_schema(view, db, t, time_zone).serialize().to_pybytes() for db, t in rows]
    return pa.table(columns, schema=TABLES_WITH_SCHEMA)


def table_schema(view: CatalogView, db: str, table: str, time_zone: str) -> pa.Schema:
    """The table's columns in the Arrow types its scans send (Spark's, as the BE streams them)."""
    snap = view.warehouse.snapshot(db, table)
    if not snap.tablets:
        return pa.schema([])
    fields = []
    for f in view.schemas.schema(snap).fields:
        sql_type = spark_sql_type(f.dataType)
        meta = {b"ARROW:FLIGHT:SQL:CATALOG_NAME": CATALOG.encode(), b"ARROW:FLIGHT:SQL:DB_SCHEMA_NAME": db.encode(),
                b"ARROW:FLIGHT:SQL:TABLE_NAME": table.encode(),
                b"ARROW:FLIGHT:SQL:TYPE_NAME": sql_type.simple_string().encode()}
        fields.append(pa.field(f.name, sql_type.spark_arrow_type(time_zone), f.nullable, metadata=meta))
    return pa.schema(fields)


def _table_types(_msg, _view, _tz) -> pa.Table:
    return pa.table({"table_type": list(TABLE_TYPES)}, schema=TABLE_TYPES_SCHEMA)


def _no_keys(schema: pa.Schema):
    return lambda _msg, _view, _tz: schema.empty_table()


def _sql_info(msg, _view, _tz) -> pa.Table:
    wanted = list(msg.info) or sorted(set(_SQL_INFO) | set(_INT32_INFO))
    codes, type_ids, offsets = [], [], []
    members: list[list] = [[], [], [], [], [], []]
    for code in wanted:
        value: str | bool | int
        if code in _INT32_INFO:
            member, value = 3, _INT32_INFO[code]
        elif code in _SQL_INFO:
            value = _SQL_INFO[code]
            member = 1 if isinstance(value, bool) else 0 if isinstance(value, str) else 2
        else:
            continue  # a code starscan has no answer for is left out, as the spec allows
        codes.append(code)
        type_ids.append(member)
        offsets.append(len(members[member]))
        members[member].append(value)
    children = [pa.array(values, type=_INFO_VALUE.field(i).type) for i, values in enumerate(members)]
    union = pa.UnionArray.from_dense(pa.array(type_ids, pa.int8()), pa.array(offsets, pa.int32()), children,
                                     [_INFO_VALUE.field(i).name for i in range(_INFO_VALUE.num_fields)])
    return pa.Table.from_arrays([pa.array(codes, pa.uint32()), union], schema=SQL_INFO_SCHEMA)


_HANDLERS = [
    (sql_pb2.CommandGetCatalogs, _catalogs),
    (sql_pb2.CommandGetDbSchemas, _db_schemas),
    (sql_pb2.CommandGetTables, _tables),
    (sql_pb2.CommandGetTableTypes, _table_types),
    (sql_pb2.CommandGetSqlInfo, _sql_info),
    (sql_pb2.CommandGetPrimaryKeys, _no_keys(PRIMARY_KEYS_SCHEMA)),
    (sql_pb2.CommandGetExportedKeys, _no_keys(FOREIGN_KEYS_SCHEMA)),
    (sql_pb2.CommandGetImportedKeys, _no_keys(FOREIGN_KEYS_SCHEMA)),
    (sql_pb2.CommandGetCrossReference, _no_keys(FOREIGN_KEYS_SCHEMA)),
]
_SCHEMAS = {
    sql_pb2.CommandGetCatalogs: CATALOGS_SCHEMA, sql_pb2.CommandGetDbSchemas: DB_SCHEMAS_SCHEMA,
    sql_pb2.CommandGetTables: TABLES_SCHEMA, sql_pb2.CommandGetTableTypes: TABLE_TYPES_SCHEMA,
    sql_pb2.CommandGetSqlInfo: SQL_INFO_SCHEMA, sql_pb2.CommandGetPrimaryKeys: PRIMARY_KEYS_SCHEMA,
    sql_pb2.CommandGetExportedKeys: FOREIGN_KEYS_SCHEMA, sql_pb2.CommandGetImportedKeys: FOREIGN_KEYS_SCHEMA,
    sql_pb2.CommandGetCrossReference: FOREIGN_KEYS_SCHEMA,
}
