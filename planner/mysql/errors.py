"""starscan errors -> MySQL error codes: the one place the MySQL port maps them."""

from __future__ import annotations

import logging

from mysql_mimic.errors import ErrorCode, MysqlError
from sqlglot.errors import ParseError, TokenError

from starscan.core import errors as E
from starscan.core.errors import unexpected_error_message
from starscan.planner.sql import syntax_error

log = logging.getLogger("starscan.mysql")

# MySQL server error numbers mysql-mimic's ErrorCode lacks.
ER_DBACCESS_DENIED = 1044
ER_BAD_DB = 1049
ER_TABLEACCESS_DENIED = 1142
ER_NO_SUCH_TABLE = 1146


def not_supported(message: str) -> MysqlError:
    return MysqlError(message, code=ErrorCode.NOT_SUPPORTED_YET)


def unknown_database(db: str) -> MysqlError:
    return MysqlError(f"Unknown database '{db}'", code=ER_BAD_DB)


def no_such_table(db: str, table: str) -> MysqlError:
    return MysqlError(f"Table '{db}.{table}' doesn't exist", code=ER_NO_SUCH_TABLE)


def select_denied(user: str, table: str) -> MysqlError:
    return MysqlError(f"SELECT command denied to user '{user}' for table '{table}'",
                      code=ER_TABLEACCESS_DENIED)


def no_database() -> MysqlError:
    return MysqlError("No database selected", code=ErrorCode.NO_DB_ERROR)


def to_mysql(exc: BaseException) -> MysqlError:
    """The MySQL error a client sees for ``exc``."""
    if isinstance(exc, MysqlError):
        return exc
    if isinstance(exc, (ParseError, TokenError)):
        return MysqlError(f"You have an error in your SQL syntax: {syntax_error(exc)}", code=ErrorCode.PARSE_ERROR)
    if isinstance(exc, E.DatabaseNotFound):
        return unknown_database(exc.db)
    if isinstance(exc, E.TableNotFound):
        return MysqlError(f"Table '{exc.table}' doesn't exist", code=ER_NO_SUCH_TABLE)
    if isinstance(exc, E.SqlInvalid):
        return MysqlError(f"Getting analyzing error. Detail message: {exc.detail or exc.message}.",
                          code=ErrorCode.PARSE_ERROR)
    if isinstance(exc, E.BadRequest):
        return not_supported(exc.message)
    if isinstance(exc, (E.Unauthorized, E.NotAuthorized)):
        return MysqlError(exc.message, code=ErrorCode.ACCESS_DENIED_ERROR)
    if isinstance(exc, E.StarscanError):
        return MysqlError(exc.message, code=ErrorCode.UNKNOWN_ERROR)
    if isinstance(exc, RecursionError):
        return MysqlError("statement nested too deeply", code=ErrorCode.PARSE_ERROR)
    log.exception("MySQL port: unexpected error", exc_info=exc)
    return MysqlError(unexpected_error_message(exc), code=ErrorCode.UNKNOWN_ERROR)
