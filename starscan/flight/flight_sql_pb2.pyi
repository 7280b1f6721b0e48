from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class SqlInfo(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FLIGHT_SQL_SERVER_NAME: _ClassVar[SqlInfo]
    FLIGHT_SQL_SERVER_VERSION: _ClassVar[SqlInfo]
    FLIGHT_SQL_SERVER_ARROW_VERSION: _ClassVar[SqlInfo]
    FLIGHT_SQL_SERVER_READ_ONLY: _ClassVar[SqlInfo]
    FLIGHT_SQL_SERVER_SQL: _ClassVar[SqlInfo]
    FLIGHT_SQL_SERVER_SUBSTRAIT: _ClassVar[SqlInfo]
    FLIGHT_SQL_SERVER_TRANSACTION: _ClassVar[SqlInfo]
    FLIGHT_SQL_SERVER_CANCEL: _ClassVar[SqlInfo]
    SQL_DDL_CATALOG: _ClassVar[SqlInfo]
    SQL_DDL_SCHEMA: _ClassVar[SqlInfo]
    SQL_DDL_TABLE: _ClassVar[SqlInfo]
    SQL_IDENTIFIER_CASE: _ClassVar[SqlInfo]
    SQL_IDENTIFIER_QUOTE_CHAR: _ClassVar[SqlInfo]
    SQL_QUOTED_IDENTIFIER_CASE: _ClassVar[SqlInfo]
    SQL_ALL_TABLES_ARE_SELECTABLE: _ClassVar[SqlInfo]
    SQL_NULL_ORDERING: _ClassVar[SqlInfo]
    SQL_SCHEMA_TERM: _ClassVar[SqlInfo]
    SQL_CATALOG_TERM: _ClassVar[SqlInfo]
    SQL_TRANSACTIONS_SUPPORTED: _ClassVar[SqlInfo]
FLIGHT_SQL_SERVER_NAME: SqlInfo
FLIGHT_SQL_SERVER_VERSION: SqlInfo
FLIGHT_SQL_SERVER_ARROW_VERSION: SqlInfo
FLIGHT_SQL_SERVER_READ_ONLY: SqlInfo
FLIGHT_SQL_SERVER_SQL: SqlInfo
FLIGHT_SQL_SERVER_SUBSTRAIT: SqlInfo
FLIGHT_SQL_SERVER_TRANSACTION: SqlInfo
FLIGHT_SQL_SERVER_CANCEL: SqlInfo
SQL_DDL_CATALOG: SqlInfo
SQL_DDL_SCHEMA: SqlInfo
SQL_DDL_TABLE: SqlInfo
SQL_IDENTIFIER_CASE: SqlInfo
SQL_IDENTIFIER_QUOTE_CHAR: SqlInfo
SQL_QUOTED_IDENTIFIER_CASE: SqlInfo
SQL_ALL_TABLES_ARE_SELECTABLE: SqlInfo
SQL_NULL_ORDERING: SqlInfo
SQL_SCHEMA_TERM: SqlInfo
SQL_CATALOG_TERM: SqlInfo
SQL_TRANSACTIONS_SUPPORTED: SqlInfo

class CommandGetSqlInfo(_message.Message):
    __slots__ = ("info",)
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, info: _Optional[_Iterable[int]] = ...) -> None: ...

class CommandGetXdbcTypeInfo(_message.Message):
    __slots__ = ("data_type",)
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    data_type: int
    def __init__(self, data_type: _Optional[int] = ...) -> None: ...

class CommandGetCatalogs(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CommandGetDbSchemas(_message.Message):
    __slots__ = ("catalog", "db_schema_filter_pattern")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DB_SCHEMA_FILTER_PATTERN_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    db_schema_filter_pattern: str
    def __init__(self, catalog: _Optional[str] = ..., db_schema_filter_pattern: _Optional[str] = ...) -> None: ...

class CommandGetTables(_message.Message):
    __slots__ = ("catalog", "db_schema_filter_pattern", "table_name_filter_pattern", "table_types", "include_schema")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DB_SCHEMA_FILTER_PATTERN_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FILTER_PATTERN_FIELD_NUMBER: _ClassVar[int]
    TABLE_TYPES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    db_schema_filter_pattern: str
    table_name_filter_pattern: str
    table_types: _containers.RepeatedScalarFieldContainer[str]
    include_schema: bool
    def __init__(self, catalog: _Optional[str] = ..., db_schema_filter_pattern: _Optional[str] = ..., table_name_filter_pattern: _Optional[str] = ..., table_types: _Optional[_Iterable[str]] = ..., include_schema: _Optional[bool] = ...) -> None: ...

class CommandGetTableTypes(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CommandGetPrimaryKeys(_message.Message):
    __slots__ = ("catalog", "db_schema", "table")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DB_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    db_schema: str
    table: str
    def __init__(self, catalog: _Optional[str] = ..., db_schema: _Optional[str] = ..., table: _Optional[str] = ...) -> None: ...

class CommandGetExportedKeys(_message.Message):
    __slots__ = ("catalog", "db_schema", "table")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DB_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    db_schema: str
    table: str
    def __init__(self, catalog: _Optional[str] = ..., db_schema: _Optional[str] = ..., table: _Optional[str] = ...) -> None: ...

class CommandGetImportedKeys(_message.Message):
    __slots__ = ("catalog", "db_schema", "table")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DB_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    db_schema: str
    table: str
    def __init__(self, catalog: _Optional[str] = ..., db_schema: _Optional[str] = ..., table: _Optional[str] = ...) -> None: ...

class CommandGetCrossReference(_message.Message):
    __slots__ = ("pk_catalog", "pk_db_schema", "pk_table", "fk_catalog", "fk_db_schema", "fk_table")
    PK_CATALOG_FIELD_NUMBER: _ClassVar[int]
    PK_DB_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PK_TABLE_FIELD_NUMBER: _ClassVar[int]
    FK_CATALOG_FIELD_NUMBER: _ClassVar[int]
    FK_DB_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    FK_TABLE_FIELD_NUMBER: _ClassVar[int]
    pk_catalog: str
    pk_db_schema: str
    pk_table: str
    fk_catalog: str
    fk_db_schema: str
    fk_table: str
    def __init__(self, pk_catalog: _Optional[str] = ..., pk_db_schema: _Optional[str] = ..., pk_table: _Optional[str] = ..., fk_catalog: _Optional[str] = ..., fk_db_schema: _Optional[str] = ..., fk_table: _Optional[str] = ...) -> None: ...

class CommandStatementQuery(_message.Message):
    __slots__ = ("query", "transaction_id")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    query: str
    transaction_id: bytes
    def __init__(self, query: _Optional[str] = ..., transaction_id: _Optional[bytes] = ...) -> None: ...

class TicketStatementQuery(_message.Message):
    __slots__ = ("statement_handle",)
    STATEMENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    statement_handle: bytes
    def __init__(self, statement_handle: _Optional[bytes] = ...) -> None: ...

class ActionCreatePreparedStatementRequest(_message.Message):
    __slots__ = ("query", "transaction_id")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    query: str
    transaction_id: bytes
    def __init__(self, query: _Optional[str] = ..., transaction_id: _Optional[bytes] = ...) -> None: ...

class ActionCreatePreparedStatementResult(_message.Message):
    __slots__ = ("prepared_statement_handle", "dataset_schema", "parameter_schema")
    PREPARED_STATEMENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    DATASET_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    prepared_statement_handle: bytes
    dataset_schema: bytes
    parameter_schema: bytes
    def __init__(self, prepared_statement_handle: _Optional[bytes] = ..., dataset_schema: _Optional[bytes] = ..., parameter_schema: _Optional[bytes] = ...) -> None: ...

class ActionClosePreparedStatementRequest(_message.Message):
    __slots__ = ("prepared_statement_handle",)
    PREPARED_STATEMENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    prepared_statement_handle: bytes
    def __init__(self, prepared_statement_handle: _Optional[bytes] = ...) -> None: ...

class CommandPreparedStatementQuery(_message.Message):
    __slots__ = ("prepared_statement_handle",)
    PREPARED_STATEMENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    prepared_statement_handle: bytes
    def __init__(self, prepared_statement_handle: _Optional[bytes] = ...) -> None: ...

class CommandStatementUpdate(_message.Message):
    __slots__ = ("query", "transaction_id")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    query: str
    transaction_id: bytes
    def __init__(self, query: _Optional[str] = ..., transaction_id: _Optional[bytes] = ...) -> None: ...

class CommandPreparedStatementUpdate(_message.Message):
    __slots__ = ("prepared_statement_handle",)
    PREPARED_STATEMENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    prepared_statement_handle: bytes
    def __init__(self, prepared_statement_handle: _Optional[bytes] = ...) -> None: ...

class DoPutUpdateResult(_message.Message):
    __slots__ = ("record_count",)
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    record_count: int
    def __init__(self, record_count: _Optional[int] = ...) -> None: ...
