"""starscan errors as MySQL errors: each kind's number and SQLSTATE from the one table
(starscan.core.errors.WIRES), the words MySQL clients know for the kinds they know."""

from __future__ import annotations

import logging

from mysql_mimic import errors as mimic_errors
from mysql_mimic.errors import ErrorCode, MysqlError
from sqlglot.errors import ParseError, TokenError

from starscan.core import errors as E
from starscan.planner.sql import syntax_error

log = logging.getLogger("starscan.mysql")

def to_mysql(exc: BaseException) -> MysqlError:
    """The MySQL error a client sees for ``exc``: the error number of its kind
    (starscan.core.errors.WIRES), with StarRocks' words for the kinds MySQL clients know."""
    if isinstance(exc, MysqlError):
        return exc
    if isinstance(exc, (ParseError, TokenError)):
        return MysqlError(f"You have an error in your SQL syntax: {syntax_error(exc)}", code=ErrorCode.PARSE_ERROR)
    if isinstance(exc, RecursionError):
        return MysqlError("statement nested too deeply", code=ErrorCode.PARSE_ERROR)
    if not isinstance(exc, E.StarscanError):
        exc = E.internal_error(exc, log, "a MySQL statement")
    code = exc.mysql_error[0]
    if isinstance(exc, E.DatabaseNotFound):
        return MysqlError(f"Unknown database '{exc.db}'", code=code)
    if isinstance(exc, E.TableNotFound):
        return MysqlError(f"Table '{exc.table}' doesn't exist", code=code)
    if isinstance(exc, E.SqlInvalid):
        return MysqlError(f"Getting analyzing error. Detail message: {exc.detail or exc.message}.", code=code)
    return MysqlError(exc.message, code=code)


def _register_sqlstates() -> None:
    """mysql-mimic writes the SQLSTATE of an error number from its own table: each kind's
    SQLSTATE (WIRES) is added to it."""
    for wires in E.WIRES.values():
        mimic_errors.SQLSTATES.setdefault(wires.mysql, wires.sqlstate.encode("ascii"))


_register_sqlstates()
