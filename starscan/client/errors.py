"""One exception tree for every failure of a read, each with the server's own message: what
a caller does next depends on the class (fix the password, ask for a grant, fix the query,
plan again, or try again later), never on parsing the text. ``except ReadError`` catches
them all.

A starscan server names each error's kind (starscan.core.protocol_extensions: an HTTP
header, an opt-in Thrift status entry) and the classes follow the kind; from a StarRocks
server, which names none, they follow the HTTP status or Thrift status code. Every raise
site of starscan.client (``connect``'s reader, ``StarscanClient``'s own calls, the direct
reader, the options) raises one of these classes: a connection's failure too is wrapped
(``NetworkError``), never passed on as httpx's or thriftpy2's."""

from __future__ import annotations

import json
from typing import Any

from starscan.core import thrift_defs
from starscan.core.protocol_extensions import ERROR_KIND_PREFIX


class ReadError(Exception):
    """A read failed. ``message`` is the server's (or the connection's) own words; ``status``
    the HTTP status or the Thrift status code's name; ``kind`` the server's name of the
    error's kind (None from a server that names none); ``call`` the protocol call that
    failed (``_query_plan``, ``_schema``, ``open_scanner``, ``get_next``, an admin path), None
    when no call did (an option, a file of a direct read)."""

    def __init__(self, message: str, status: str | int | None = None, kind: str | None = None,
                 call: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind
        self.call = call


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


class DirectReadDenied(PermissionDenied, DirectReadError):
    """A direct plan was refused: the user lacks DIRECT_READ on the table. The same read
    without ``direct`` goes through the BE (``direct="auto"`` does that by itself)."""


class ServerError(ReadError):
    """The server failed to answer a query it accepted: Spark's scan failed (a corrupt or
    unreadable file, a lost executor it could not recover from), or an internal error. The
    message says what; reading again may succeed, or an operator must look."""


class OptionError(ReadError, ValueError):
    """A read option or argument of the client is not valid (also a ``ValueError``)."""


class ScanIntegrityError(ReadError):
    """The server's end-of-scan row count differs from the rows this client received."""

    def __init__(self, context_id: str, received: int, reported: int, message: str | None = None):
        super().__init__(message or (
            f"scan {context_id} ended with {received} rows received but the server produced {reported}: "
            f"{abs(reported - received)} rows {'missing' if reported > received else 'too many'}; "
            "the result is incomplete, read it again"))
        self.context_id, self.received, self.reported = context_id, received, reported


class FailoverMismatch(ScanIntegrityError):
    """After a failover, the new BE's scan ended with fewer rows than were already handed out
    from the lost one: the two do not hold the same rows, and the result cannot be finished."""

    def __init__(self, context_id: str, handed: int, produced: int):
        super().__init__(context_id, handed, produced,
                         f"scan {context_id} on the next routing produced {produced} rows, fewer than the "
                         f"{handed} already handed out from the lost BE: they disagree; read again")


#: Kinds a starscan server names (starscan.core.errors' class names), by what a caller does
#: next. Every kind is named here (a test enumerates the server's classes); a kind the client
#: does not know (a newer server) is classified by its status code.
_BY_KIND: dict[str, type[ReadError]] = {
    **dict.fromkeys(("Unauthorized", "CredentialsRejected"), AuthenticationError),
    **dict.fromkeys(("SelectPrivilegeMissing", "PrivilegeMissing", "NotAuthorized", "StorageDenied"), PermissionDenied),
    "DirectReadDenied": DirectReadDenied,
    **dict.fromkeys(("SnapshotGone", "PlanExpired", "TableRewritten", "VersionUnknown", "PositionBehind"),
                    SnapshotGoneError),
    **dict.fromkeys(("ContextNotFound", "ServerShuttingDown", "SparkUnavailable", "NoLiveBackend", "BackendLost", "StorageUnavailable",
                     "TooManyRequests", "TooManyTasks", "ScanTimeout", "ScanCancelled"), NetworkError),
    **dict.fromkeys(("BadRequest", "DatabaseNotFound", "TableNotFound", "SqlInvalid", "PlanInvalid", "InvalidArgument",
                     "NotFound", "UnknownUser", "InvalidInput", "MemLimitExceeded", "RequestTooLarge", "ResultTooLarge",
                     "NoDatabaseSelected",
                     "ConfigChangeRefused"), QueryError),
    **dict.fromkeys(("StarscanError", "InternalError", "ScanFailed", "TableUnreadable", "ConfigError",
                     "JavaMissingError"), ServerError),
}

#: Lost scanners: the BE no longer holds it, or cannot scan now; it may go on on another routing.
LOST_KINDS = frozenset({"ContextNotFound", "ServerShuttingDown", "SparkUnavailable", "BackendLost"})


def from_http(status: int, body: str, kind: str | None = None, call: str = "_query_plan") -> ReadError:
    """The error of a refused FE call (``_query_plan``, ``_schema``, an admin call): by the
    kind the server named, else by the HTTP status."""
    try:
        doc = json.loads(body)
        message = str(doc.get("exception") or doc.get("msg") or doc.get("message") or body)
    except (ValueError, AttributeError):
        message = body
    cls = _BY_KIND.get(kind or "")
    if cls is None:
        if status == 401:
            cls = AuthenticationError
        elif status == 403:
            cls = PermissionDenied
        elif status in (409, 410):
            cls = SnapshotGoneError
        elif status in (429, 502, 503, 504):
            cls = NetworkError
        elif status >= 500:
            cls = ServerError
        else:
            cls = QueryError
    return cls(message, status, kind, call)


def status_kind(status: Any) -> str | None:
    """The kind a starscan BE named in a Thrift status (the opt-in entry), None if none."""
    return next((m[len(ERROR_KIND_PREFIX):] for m in status.error_msgs or [] if m.startswith(ERROR_KIND_PREFIX)), None)


def from_reply(call: str, status: Any) -> ReadError:
    """The error of a BE call whose reply's ``TStatus`` is not OK."""
    return from_status(call, status.status_code, status.error_msgs, status_kind(status))


def from_status(call: str, code: int, error_msgs: list[str] | None, kind: str | None = None) -> ReadError:
    """The error of a BE call that answered with a status other than OK: by the kind the
    server named, else by the status code (a NOT_FOUND at get_next: the BE lost the scanner)."""
    codes = thrift_defs.wire.TStatusCode
    name = codes._VALUES_TO_NAMES.get(code, str(code))
    message = f"{call}: " + "; ".join([m for m in error_msgs or [] if not m.startswith(ERROR_KIND_PREFIX)] or [name])
    cls = _BY_KIND.get(kind or "")
    if cls is None:
        if code == codes.NOT_AUTHORIZED:
            cls = AuthenticationError
        elif code in (codes.SERVICE_UNAVAILABLE, codes.TIMEOUT, codes.CANCELLED, codes.TOO_MANY_TASKS) or (
                kind is None and code == codes.NOT_FOUND and call == "get_next"):
            cls = NetworkError
        elif code == codes.INTERNAL_ERROR:
            cls = ServerError
        else:
            cls = QueryError
    return cls(message, name, kind, call)


def is_lost(call: str, status: Any) -> bool:
    """A status that says the BE lost the scanner rather than that the scan is wrong: the
    scanner is not there (closed by a restart, or never known to a BE that answers no kind)
    or the BE cannot scan now (shutting down, no Spark)."""
    codes = thrift_defs.wire.TStatusCode
    kind = status_kind(status)
    if kind is not None:
        return kind in LOST_KINDS
    return status.status_code == codes.SERVICE_UNAVAILABLE or (status.status_code == codes.NOT_FOUND and call == "get_next")
