"""One MySQL connection: mysql-mimic's Session (SET, SELECT @@var, SHOW VARIABLES, USE,
BEGIN/COMMIT, KILL) with starscan's catalog, grants, SHOW/DESC, information_schema and
plain SELECTs on Spark. Every failure is a MySQL error; the connection stays usable."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from datetime import timezone
from typing import Any
from zoneinfo import ZoneInfo

from mysql_mimic import Session
from mysql_mimic.errors import ErrorCode, MysqlError
from mysql_mimic.variables import GlobalVariables, SessionVariables, parse_timezone
from sqlglot import exp

from starscan.planner import sql_queries
from starscan.planner.mysql import info_schema, select
from starscan.planner.mysql.auth import client_address, login_refused
from starscan.planner.mysql.catalog_view import INFORMATION_SCHEMA, CatalogView, describe
from starscan.planner.mysql.errors import log, no_database, no_such_table, not_supported, to_mysql, unknown_database
from starscan.security.users import UserStore
from starscan.spark.schemas import SchemaResolver
from starscan.tables.catalog import Warehouse


@dataclass
class PortContext:
    """What every session shares."""

    warehouse: Warehouse
    schemas: SchemaResolver
    users: UserStore
    spark: Any
    variables: GlobalVariables
    max_rows: int


class StarscanSession(Session):
    database: str | None  # the current database (mysql-mimic's Session attribute)

    def __init__(self, ctx: PortContext):
        super().__init__(SessionVariables(ctx.variables))
        self.ctx = ctx

    # ---- lifecycle ----
    async def init(self, connection) -> None:
        await super().init(connection)
        if self.username is None:
            # mysql-mimic goes on to the command phase after a refused login: end it here.
            connection.stream.writer.close()
            return
        if self.database and not await asyncio.to_thread(self._view().database_visible, self.database):
            log.info("MySQL login of %s asked for unknown database %r: none selected", self.username, self.database)
            self.database = None

    async def reset(self) -> None:
        """After a COM_CHANGE_USER (mysql-mimic has answered it already). A refused change
        ends the connection, as MySQL does, instead of leaving the old user logged in."""
        await super().reset()
        if login_refused.get():
            self.username = None
            self.connection.stream.writer.close()

    def _view(self) -> CatalogView:
        assert self.username is not None
        return CatalogView(self.ctx.warehouse, self.ctx.schemas, self.ctx.users, self.username)

    def timezone(self) -> timezone:
        tz = str(self.variables.get("time_zone"))
        try:
            return parse_timezone(tz)
        except MysqlError:
            try:
                return ZoneInfo(tz)  # type: ignore[return-value]
            except Exception:  # noqa: BLE001 - ZoneInfo raises several kinds for a bad name
                raise MysqlError(f"Unknown or incorrect time zone: '{tz}'", code=ErrorCode.WRONG_VALUE_FOR_VAR) from None

    async def handle_query(self, sql: str, attrs: dict[str, str]):
        if self.username is None:
            raise MysqlError("Access denied", code=ErrorCode.ACCESS_DENIED_ERROR)
        started = time.monotonic()
        try:
            return await super().handle_query(sql, attrs)
        except BaseException as exc:  # noqa: BLE001 - every failure becomes a MySQL error
            if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise
            err = to_mysql(exc)
            log.info("MySQL %s: %s -> error %d %s (%.3f s)", self.username, sql[:200], err.code, err.msg,
                     time.monotonic() - started)
            raise err from None

    # ---- USE ----
    async def use(self, database: str) -> None:
        if database.lower() == INFORMATION_SCHEMA:
            self.database = INFORMATION_SCHEMA
            return
        if not await asyncio.to_thread(self._view().database_visible, database):
            raise unknown_database(database)
        self.database = database

    # ---- SHOW / DESC ----
    async def _show(self, show: exp.Show):
        """SHOW ... (DESC t arrives here as SHOW COLUMNS FROM t)."""
        kind = show.name.upper()
        view = self._view()
        if kind == "DATABASES":
            names = [INFORMATION_SCHEMA] + await asyncio.to_thread(view.databases)
            return [(n,) for n in names if _like(show, n)], ["Database"]
        if kind == "TABLES":
            db = show.text("db") or self.database
            if not db:
                raise no_database()
            if db.lower() == INFORMATION_SCHEMA:
                names = sorted(info_schema.SCHEMA[INFORMATION_SCHEMA])
            else:
                if not await asyncio.to_thread(view.database_visible, db):
                    raise unknown_database(db)
                names = await asyncio.to_thread(view.tables, db)
            rows: list[tuple] = [(n, "BASE TABLE") if show.args.get("full") else (n,) for n in names if _like(show, n)]
            header = [f"Tables_in_{db}"] + (["Table_type"] if show.args.get("full") else [])
            return rows, header
        if kind == "COLUMNS":
            db, table = await self._visible_table(show.text("db"), show.text("target"))
            columns = await asyncio.to_thread(view.columns, db, table)
            return describe([c for c in columns if _like(show, c.name)], bool(show.args.get("full")))
        if kind == "CREATE TABLE":
            db, table = await self._visible_table(show.text("db"), show.text("target"))
            return [(table, await asyncio.to_thread(self._create_table, db, table))], ["Table", "Create Table"]
        if kind in ("VARIABLES", "STATUS", "WARNINGS", "ERRORS"):
            return await super()._show(show)
        if kind in ("ENGINES", "CHARSET", "COLLATION", "PROCESSLIST", "GRANTS", "INDEX", "KEYS", "TABLE STATUS"):
            return await self._show_simple(kind)
        raise not_supported(f"SHOW {kind} is not supported by starscan")

    async def _show_simple(self, kind: str):
        if kind == "ENGINES":
            return [("StarRocks", "YES", "Default storage engine of StarRocks", "NO", "NO", "NO")], [
                "Engine", "Support", "Comment", "Transactions", "XA", "Savepoints"]
        if kind == "CHARSET":
            return [("utf8", "UTF-8 Unicode", "utf8_general_ci", 3)], ["Charset", "Description", "Default collation", "Maxlen"]
        if kind == "COLLATION":
            return [("utf8_general_ci", "utf8", 33, "Yes", "Yes", 1)], [
                "Collation", "Charset", "Id", "Default", "Compiled", "Sortlen"]
        if kind == "GRANTS":
            grants = self.ctx.users.users().get(self.username or "", [])
            return [(_grant_statement(g, self.username or ""),) for g in grants], [f"Grants for {self.username}@%"]
        if kind == "PROCESSLIST":
            return [], ["Id", "User", "Host", "db", "Command", "Time", "State", "Info"]
        return [], ["Table", "Non_unique", "Key_name", "Seq_in_index", "Column_name"]

    async def _visible_table(self, db: str | None, table: str) -> tuple[str, str]:
        db = db or self.database
        if not db:
            raise no_database()
        if not table:
            raise MysqlError("Table name is missing", code=ErrorCode.PARSE_ERROR)
        view = self._view()
        # A table without a grant reads as missing: grants hide tables.
        visible = await asyncio.to_thread(lambda: view.can_select(db, table) and view.warehouse.has_table(db, table))
        if not visible:
            raise no_such_table(db, table)
        return db, table

    def _create_table(self, db: str, table: str) -> str:
        view = self._view()
        snap = view.warehouse.snapshot(db, table)
        lines = [f"  `{c.name}` {c.column_type} {'NULL' if c.nullable else 'NOT NULL'} COMMENT {_quote(c.comment)}"
                 for c in view.columns(db, table)]
        ddl = f"CREATE TABLE `{table}` (\n" + ",\n".join(lines) + "\n) ENGINE=StarRocks"
        if snap.partition_columns:
            ddl += "\nPARTITION BY (" + ", ".join(f"`{c}`" for c in snap.partition_columns) + ")"
        ddl += (f"\nCOMMENT {_quote('Parquet table served by starscan')}"
                f"\nPROPERTIES (\n\"starscan.version\" = \"{snap.version}\",\n\"starscan.tables.tablets\" = \"{len(snap.tablets)}\"\n);")
        return ddl

    # ---- information_schema ----
    async def _query_info_schema(self, expression: exp.Expression):
        return await asyncio.to_thread(info_schema.query, expression, self._view())

    # ---- everything else: queries on Spark ----
    async def query(self, expression: exp.Expression, sql: str, attrs: dict[str, str]):
        if isinstance(expression, exp.Select) and select.is_plain(expression):
            view = self._view()
            prepared = await asyncio.to_thread(select.prepare, expression, self.database, view, self._row_cap())
            return await asyncio.to_thread(select.run, self.ctx.spark, prepared, view)
        if sql_queries.is_query(expression):
            return await asyncio.to_thread(self._general_query, expression)
        if isinstance(expression, exp.Describe):
            raise not_supported("EXPLAIN is not supported by starscan")
        kind = type(expression).__name__.upper()
        first = sql.strip().split(None, 1)[0].upper() if sql.strip() else kind
        raise not_supported(f"{first} statements are not supported: starscan's MySQL port is read-only "
                            "(metadata, SHOW/DESC/USE and queries)")

    def _general_query(self, expression: exp.Expression):
        """Aggregates, joins, CTEs, window functions (planner/sql_queries.py), capped at the
        row limit like every answer of this port."""
        view = self._view()
        prepared = sql_queries.prepare(expression, self.database, view, client_address.get())
        df = sql_queries.dataframe(self.ctx.spark, prepared, view)
        return select.collect_rows(self.ctx.spark, df, list(df.columns), self._row_cap(),
                                   f"{prepared.description} ({view.user})")

    def _row_cap(self) -> int:
        cap = self.ctx.max_rows
        limit = self.variables.get("sql_select_limit")
        if isinstance(limit, int) and 0 <= limit < cap:
            cap = limit
        return cap


def _like(show: exp.Show, value: str) -> bool:
    pattern = show.text("like")
    if not pattern:
        return True
    regex, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            regex.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        regex.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.fullmatch("".join(regex), value, re.IGNORECASE | re.DOTALL) is not None


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _grant_statement(grant: str, user: str) -> str:
    """A users-file grant as StarRocks' SHOW GRANTS writes one (DIRECT_READ is starscan's own)."""
    from starscan.security.users import GRANT_PREFIX

    if grant.startswith(GRANT_PREFIX):
        return f"GRANT DIRECT_READ ON {grant[len(GRANT_PREFIX):]} TO '{user}'@'%'"
    return f"GRANT SELECT ON {grant} TO '{user}'@'%'"
