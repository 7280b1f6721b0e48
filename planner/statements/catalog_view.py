"""What one user may see of the warehouse: databases and tables with a SELECT grant, and
their columns as StarRocks' information_schema and DESC show them."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql import types as T

from starscan.core.errors import DatabaseNotFound, StarscanError
from starscan.security.users import UserStore, grant_matches
from starscan.spark.schemas import SchemaResolver
from starscan.spark.types import mysql_column_type
from starscan.tables.catalog import Warehouse

log = logging.getLogger("starscan.mysql")

INFORMATION_SCHEMA = "information_schema"


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    position: int            # 1-based
    nullable: bool
    data_type: str
    column_type: str
    column_size: int | None
    decimal_digits: int | None
    comment: str


class CatalogView:
    def __init__(self, warehouse: Warehouse, schemas: SchemaResolver, users: UserStore, user: str):
        self.warehouse = warehouse
        self.schemas = schemas
        self.users = users
        self.user = user

    def grants(self) -> list[str]:
        return self.users.users().get(self.user, [])

    def can_select(self, db: str, table: str) -> bool:
        return any(grant_matches(g, db, table) for g in self.grants())

    def database_visible(self, db: str) -> bool:
        if not self.warehouse.has_database(db):
            return False
        grants = self.grants()
        if any(g.partition(".")[0] in ("*", db) and g.partition(".")[2] == "*" for g in grants):
            return True
        return any(self.can_select(db, t) for t in self.warehouse.tables(db))

    def require_database(self, db: str) -> None:
        """DatabaseNotFound unless the user sees ``db`` (a database without a granted table
        reads as missing)."""
        if not self.database_visible(db):
            raise DatabaseNotFound(db)

    def databases(self) -> list[str]:
        return [db for db in self.warehouse.databases() if self.database_visible(db)]

    def tables(self, db: str) -> list[str]:
        if not self.warehouse.has_database(db):
            return []
        return [t for t in self.warehouse.tables(db) if self.can_select(db, t)]

    def columns(self, db: str, table: str) -> list[ColumnInfo]:
        """The table's columns; [] when it has no data files yet (no schema)."""
        snap = self.warehouse.snapshot(db, table)
        if not snap.tablets:
            return []
        try:
            schema = self.schemas.schema(snap)
        except StarscanError as exc:
            log.warning("no schema for %s.%s: %s", db, table, exc.message)
            return []
        return [column_info(i, f) for i, f in enumerate(schema.fields, 1)]


def describe(columns: list[ColumnInfo], full: bool = False) -> tuple[list[tuple], list[str]]:
    """DESC's rows and header (SHOW FULL COLUMNS with ``full``), as StarRocks answers them."""
    rows = []
    for c in columns:
        null = "YES" if c.nullable else "NO"
        rows.append((c.name, c.column_type, None, null, "false", None, "", "", c.comment) if full
                    else (c.name, c.column_type, null, "false", None, ""))
    header = (["Field", "Type", "Collation", "Null", "Key", "Default", "Extra", "Privileges", "Comment"] if full
              else ["Field", "Type", "Null", "Key", "Default", "Extra"])
    return rows, header


def column_info(position: int, field: T.StructField) -> ColumnInfo:
    mt = mysql_column_type(field)
    comment = str((field.metadata or {}).get("comment", ""))
    return ColumnInfo(field.name, position, field.nullable, mt.data_type, mt.column_type, mt.column_size,
                      mt.decimal_digits, comment)
