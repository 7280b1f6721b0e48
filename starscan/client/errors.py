"""One exception class per kind of failure of a read, each with the server's own message:
what a caller does next depends on the kind (fix the password, ask for a grant, fix the
query, plan again, or try again later), never on parsing the text."""

from __future__ import annotations

import json
from typing import Any

from starscan.core import thrift_defs


class ReadError(Exception):
    """A read failed. ``message`` is the server's (or the connection's) own words; ``status``
    the HTTP status or the Thrift status code's name."""

    def __init__(self, message: str, status: str | int | None = None):
        super().__init__(message)
        self.message = message
        self.status = status


class NetworkError(ReadError):
    """The FE or every BE of a tablet cannot be reached (after the retries and failovers),
    or the server is unavailable for now (503, 429): try again later."""


class AuthenticationError(ReadError):
    """The user or password (or token) is refused."""


class PermissionDenied(ReadError):
    """The user is known but may not read this table (no SELECT grant)."""


class QueryError(ReadError):
    """The query cannot be answered as written: an unknown table or column, bad SQL, a
    filter the server does not accept, a limit it exceeds."""


class SnapshotGoneError(ReadError):
    """What the read was planned on is gone: the table's files changed since the plan, the
    plan expired, or an incremental read's version was rewritten or expired. Plan again."""


class DirectReadError(ReadError):
    """With ``direct=True``: a tablet cannot be read from its files (the FE marked it not
    direct, its file changed since the plan, or the storage refused this reader). With
    ``direct="auto"`` such a tablet is read through the BE instead."""


def from_http(status: int, body: str) -> ReadError:
    """The error of a refused FE call (``_query_plan``, ``_schema``)."""
    try:
        doc = json.loads(body)
        message = str(doc.get("exception") or doc.get("msg") or doc.get("message") or body)
    except (ValueError, AttributeError):
        message = body
    lowered = message.lower()
    if status in (401, 403):
        if "privilege" in lowered or "grant" in lowered or status == 403:
            return PermissionDenied(message, status)
        return AuthenticationError(message, status)
    if status in (409, 410):
        return SnapshotGoneError(message, status)
    if status in (429, 502, 503, 504):
        return NetworkError(message, status)
    if status == 404 and "version" in lowered:
        return SnapshotGoneError(message, status)
    return QueryError(message, status)


def from_scan_error(exc: Any) -> ReadError:
    """``from_status`` for a ``protocol.ScanError``."""
    return from_status(exc.call, exc.status_code, exc.messages)


def from_status(call: str, code: int, error_msgs: list[str] | None) -> ReadError:
    """The error of a BE call that answered with a status other than OK."""
    codes = thrift_defs.wire.TStatusCode
    name = codes._VALUES_TO_NAMES.get(code, str(code))
    message = f"{call}: " + "; ".join(error_msgs or [name])
    lowered = message.lower()
    if code == codes.NOT_AUTHORIZED:
        if "privilege" in lowered or "grant" in lowered:
            return PermissionDenied(message, name)
        return AuthenticationError(message, name)
    if "is gone" in lowered or "expired" in lowered:
        return SnapshotGoneError(message, name)
    if code == codes.NOT_FOUND and "context" in lowered:
        return NetworkError(message, name)  # the BE lost the scanner (a restart, the reaper)
    if code in (codes.SERVICE_UNAVAILABLE, codes.TIMEOUT, codes.CANCELLED, codes.TOO_MANY_TASKS):
        return NetworkError(message, name)
    return QueryError(message, name)
