"""One MySQL connection: mysql-mimic's Session (SET, SELECT @@var, SHOW VARIABLES, USE,
BEGIN/COMMIT, KILL) for the session's own state; every other statement is the statement
service's (SHOW/DESC, information_schema, SELECTs), its answer streamed to the client as it
is read. Every failure is a MySQL error; the connection stays usable."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import timezone
from zoneinfo import ZoneInfo

from mysql_mimic import Session
from mysql_mimic.errors import ErrorCode, MysqlError
from mysql_mimic.variables import GlobalVariables, SessionVariables, parse_timezone
from sqlglot import exp

from starscan.core.errors import DatabaseNotFound
from starscan.planner.mysql import results
from starscan.planner.mysql.auth import client_address, login_refused
from starscan.planner.mysql.errors import log, to_mysql
from starscan.planner.statements import Statement, StatementService, admin_show
from starscan.planner.statements.catalog_view import INFORMATION_SCHEMA
from starscan.planner.statements.show import SESSION_KINDS

DOOR = "mysql"
# sql_select_limit's default (MySQL's 2**64 - 1): no limit.
_NO_LIMIT = 1 << 63


@dataclass
class PortContext:
    """What every session shares."""

    statements: StatementService
    variables: GlobalVariables


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

    def _view(self):
        assert self.username is not None
        return self.ctx.statements.view(self.username)

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
            if admin_show.match(sql)[0]:  # StarRocks' own syntax, which mysql-mimic's parser does not know
                return await self._answer(None, sql)
            return await super().handle_query(sql, attrs)
        except BaseException as exc:  # noqa: BLE001 - every failure becomes a MySQL error
            if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise
            err = to_mysql(exc)
            log.info("MySQL %s: %s -> error %d %s (%.3f s)", self.username, sql[:200], err.code, err.msg,
                     time.monotonic() - started)
            raise err from None

    async def use(self, database: str) -> None:
        if database.lower() == INFORMATION_SCHEMA:
            self.database = INFORMATION_SCHEMA
            return
        if not await asyncio.to_thread(self._view().database_visible, database):
            raise DatabaseNotFound(database)
        self.database = database

    # ---- everything the statement service answers ----
    async def _show(self, show: exp.Show):
        """SHOW ... (DESC t arrives here as SHOW COLUMNS FROM t)."""
        if show.name.upper() in SESSION_KINDS:
            return await super()._show(show)
        return await self._answer(show, show.sql(dialect="mysql"))

    async def _query_info_schema(self, expression: exp.Expression):
        return await self._answer(expression, expression.sql(dialect="mysql"))

    async def query(self, expression: exp.Expression, sql: str, attrs: dict[str, str]):
        return await self._answer(expression, sql)

    async def _answer(self, expression: exp.Expression | None, sql: str):
        assert self.username is not None
        stmt = Statement(self.username, client_address.get(), DOOR, sql, self.database, expression, self._limit())
        service = self.ctx.statements
        answer = await asyncio.to_thread(service.execute, stmt)
        schema, batches = await asyncio.to_thread(service.rows, answer, stmt.client)
        return results.result_set(schema, batches, to_mysql)

    def _limit(self) -> int | None:
        """``SET sql_select_limit = N``: at most N rows of a SELECT without a LIMIT of its own."""
        limit = self.variables.get("sql_select_limit")
        return limit if isinstance(limit, int) and 0 <= limit < _NO_LIMIT else None
