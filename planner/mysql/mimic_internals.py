"""What the MySQL port reaches inside mysql-mimic, in one place: the connection's writer of a
text result, so that a streamed result is written a batch at a time and drained as it goes.

mysql-mimic writes a result that is a list through its fast row encoder, but one that
streams (an async iterable) a row at a time through three async generators, and buffers
every row's packet without draining the socket until the last: a 6 M row SELECT would sit
whole in the port's memory before the client saw its end. ``StreamingConnection`` writes a
``StreamedResultSet`` batch by batch with the fast encoder and waits for the socket after
each batch (the client's reading is the back-pressure). Prepared statements (the binary
protocol) take the result's rows one by one, as mysql-mimic writes them, draining each.

The connection class is replaced where mysql-mimic's server makes connections
(``mysql_mimic.server.Connection``). Tested on ``TESTED_ON``: ``check()`` says what differs
in the installed release; the port refuses to start on it (``require()``) and the unit tests
fail on it.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import AsyncIterator

from mysql_mimic import packets
from mysql_mimic import server as mimic_server
from mysql_mimic.connection import Connection
from mysql_mimic.results import ResultSet
from mysql_mimic.stream import MysqlStream

from starscan.core.library_internals import call_shape_problems, refuse_untested

TESTED_ON = ">=3.0.2,<3.1"
WRITE_ROWS = 8192   # rows encoded into the send buffer before it is drained

_SHAPES = (
    (Connection, "write_text_resultset", ("self", "result_set")),
    (Connection, "deprecate_eof", ("self",)),
    (Connection, "ok_or_eof", ("self", "affected_rows", "last_insert_id", "warnings", "flags")),
    (MysqlStream, "write_text_rows", ("self", "rows", "columns")),
    (MysqlStream, "write_many", ("self", "packets")),
)


# The batches of each streamed result, by the result's row iterator (mysql-mimic's ResultSet
# is compiled: it takes no subclass and no attribute).
_BATCHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def streamed_result(rows: AsyncIterator[tuple], batches: AsyncIterator[list], columns: list) -> ResultSet:
    """A result whose rows come in batches (lists of rows): ``batches`` for the text
    protocol, ``rows`` (the same rows one by one) for the binary one; one of them is read."""
    _BATCHES[rows] = batches
    return ResultSet(rows=rows, columns=columns)


class StreamingConnection(Connection):
    async def write_text_resultset(self, result_set: ResultSet) -> None:
        batches = _BATCHES.pop(result_set.rows, None) if not isinstance(result_set.rows, (list, tuple)) else None
        if batches is None:
            await super().write_text_resultset(result_set)
            return
        header = [packets.make_column_count(capabilities=self.capabilities, column_count=len(result_set.columns))]
        header += [packets.make_column_definition_41(server_charset=self.server_charset, name=column.name,
                                                     column_type=column.type, character_set=column.character_set)
                   for column in result_set.columns]
        if not self.deprecate_eof():
            header.append(self.eof())
        self.stream.write_many(header)
        columns = result_set.columns
        sent = 0
        async for batch in batches:
            for start in range(0, len(batch), WRITE_ROWS):
                self.stream.write_text_rows(batch[start:start + WRITE_ROWS], columns)
                await self.stream.drain()
            sent += len(batch)
        await self.stream.write(self.ok_or_eof(affected_rows=sent), drain=False)
        await self.stream.drain()


def check() -> list[str]:
    """What the port needs of mysql-mimic that the installed release lacks."""
    problems = call_shape_problems(_SHAPES)
    if not inspect.iscoroutinefunction(getattr(MysqlStream, "drain", None)) and \
            not callable(getattr(MysqlStream, "drain", None)):
        problems.append("MysqlStream.drain is gone")  # compiled: its parameters are not listed
    made = getattr(mimic_server, "Connection", None)
    if made is not Connection and made is not StreamingConnection:
        problems.append("mysql_mimic.server no longer makes its connections with mysql_mimic.connection.Connection")
    try:
        source = inspect.getsource(mimic_server.MysqlServer._client_connected_cb)
    except (OSError, TypeError):  # an install without sources: the names above must do
        source = None
    if source is not None and "Connection(" not in source:
        problems.append("MysqlServer._client_connected_cb no longer calls Connection(...)")
    return problems


def require() -> None:
    """Refuse to start the port on a mysql-mimic whose internals differ, then make the
    server's connections stream."""
    refuse_untested("mysql-mimic", TESTED_ON, "MySQL port", check())
    mimic_server.Connection = StreamingConnection
