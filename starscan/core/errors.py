"""Every error kind starscan reports, modelled once.

What each kind answers on every wire (its HTTP status, Thrift ``TStatusCode`` name, gRPC
status and MySQL error number with its SQLSTATE) is one table, ``WIRES``, at the end: each
front renders an error from the attributes it sets (``starscan.planner.errors`` for HTTP,
``starscan.thrift.status`` for Thrift, ``starscan.flight.errors`` for gRPC,
``starscan.planner.mysql.errors`` for MySQL), and a kind missing from it fails the unit
tests. Only status codes the StarRocks Java SDK knows are ever used (docs/protocol.md
section 3). A failure no kind models is answered as ``internal_error``: an id on the wire,
the details in the server's log only.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass


class StarscanError(Exception):
    """Base of all domain errors. ``message`` is what the person at the client reads."""

    # Set from WIRES below, the one table of what each kind answers on every wire.
    http_status: int = 500
    status_code: str = "INTERNAL_ERROR"
    grpc_status: str = "UNKNOWN"
    mysql_error: tuple[int, str] = (1105, "HY000")

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    @property
    def kind(self) -> str:
        """The error's kind as the wire names it to clients that ask (the class's name): an
        HTTP header and an opt-in Thrift status entry (starscan.core.protocol_extensions),
        so a client tells kinds apart without reading the words of a message."""
        return type(self).__name__


# ---- configuration / startup ------------------------------------------------------
class ConfigError(StarscanError):
    """A configuration key is unknown or has a bad value (raised at start)."""



class JavaMissingError(StarscanError):
    """No usable Java runtime for Spark."""


# ---- FE / request validation -------------------------------------------------------
class BadRequest(StarscanError):
    """A request or statement starscan does not answer as written (its shape, a read-only refusal)."""


class NoDatabaseSelected(BadRequest):
    """A statement names a table without its database, and none is current."""


class Unauthorized(StarscanError):
    """Missing or wrong credentials, or no SELECT grant: HTTP 401 in the auth shape."""



class SelectPrivilegeMissing(Unauthorized):
    """The user may not read the table (no SELECT grant): 401 in the auth shape, as
    StarRocks' FE answers."""


class DatabaseNotFound(StarscanError):

    def __init__(self, db: str):
        super().__init__(f"Database [{db}] does not exists")
        self.db = db


class TableNotFound(StarscanError):

    def __init__(self, table: str):
        super().__init__(f"Table [{table}] does not exists")
        self.table = table


class SqlInvalid(StarscanError):
    """Parse/analysis failure. The message starts with StarRocks' own text, ``The Sql is
    invalid``, so anything matching it still does, and goes on with the reason
    (``The Sql is invalid: unknown column 'x' in db.t``). ``detail`` is the reason alone;
    it names only what the SQL and the table's schema say, never a path or a secret."""

    PREFIX = "The Sql is invalid"

    def __init__(self, detail: str = ""):
        super().__init__(f"{self.PREFIX}: {detail}" if detail else self.PREFIX)
        self.detail = detail


class TableUnreadable(StarscanError):
    """A table whose files or folders Spark cannot read as they are (a file name Hadoop
    cannot open, an empty partition value, an unreadable footer). Refused at plan time, so
    a reader never gets part of a table."""



# ---- plans ------------------------------------------------------------------------
class PlanInvalid(StarscanError):
    """The opaque plan is not ours, was altered, or has expired."""



class PlanExpired(PlanInvalid):
    """The plan's time ran out (``plan_ttl_s``): ask the FE for a new one."""


# ---- BE / scanning -----------------------------------------------------------------
class InvalidArgument(StarscanError):
    """A BE call's argument cannot be used (a ticket, a tablet, a property)."""


class NotFound(StarscanError):
    """What a call names is not there."""


class UnknownUser(NotFound):
    """A users-file command names a user the file does not hold."""

    def __init__(self, user: str):
        super().__init__(f"no user {user!r}")
        self.user = user


class ContextNotFound(NotFound):
    """No scanner of that context id on this BE: closed, reaped, or opened before the BE
    restarted (its scan is gone with it)."""


class InvalidInput(StarscanError):
    """A command's input cannot be used as given (a name, a format, a grant, a source
    that is not there); nothing was changed."""



class NotAuthorized(StarscanError):
    """The caller may not do this (credentials or a grant the call needs)."""


class CredentialsRejected(NotAuthorized):
    """The BE refuses the plan's user: another user's plan, a user no longer in the users
    file, a wrong password, a lockout."""


class PrivilegeMissing(NotAuthorized):
    """A grant the call needs is missing: DIRECT_READ for a direct plan, admin for the
    operations pages, SELECT revoked after the plan was issued."""


class DirectReadDenied(PrivilegeMissing):
    """A direct plan asked by a user without DIRECT_READ on the table: the same plan without
    ``direct`` reads through the BE (a reader in ``direct="auto"`` falls back to that)."""


class TooManyTasks(StarscanError):
    """A scanner cap of the BE is reached: open the scanner again later, or on another BE."""


class ScanCancelled(StarscanError):
    """The scan was cancelled (its reader closed it, or the server stops)."""


class ServerShuttingDown(ScanCancelled):
    """The server stops: open the scanner again when it is back (or on another BE)."""


class ScanTimeout(StarscanError):
    """The scan ran past its query timeout."""


class MemLimitExceeded(StarscanError):
    """The scan's queue would pass its memory limit."""


class SnapshotGone(StarscanError):
    """A file of the planned table version no longer exists (or changed)."""



class ScanFailed(StarscanError):
    """Spark failed while running a scan."""



class SparkUnavailable(StarscanError):
    """This process's Spark is gone (its JVM died or the context stopped): a new SparkSession
    is starting (health answers RECOVERING), or none could be started (health answers 503
    and starscan must be restarted). Retryable: a reader reads again, here or elsewhere."""



class NoLiveBackend(StarscanError):
    """Every configured BE failed its last health probes: a plan would route readers
    nowhere."""



class BackendLost(StarscanError):
    """The FE's Thrift relay lost the BE a scanner was on and no other BE took the scanner
    over (none answers, or none can resume it: the BEs' resumable_scans and a shared
    state_dir make them able to)."""


class VersionUnknown(StarscanError):
    """A ``since_version`` this server never observed for the table, or one older than the
    versions it keeps."""



class TableRewritten(StarscanError):
    """Files present at ``since_version`` were removed or rewritten since: what changed is
    not only appended rows, so an incremental read cannot be exact."""



class PositionBehind(StarscanError):
    """A consumer commit of a version earlier than the one it committed: positions never
    move back (the consumer would be served rows it already had)."""



class StorageUnavailable(StarscanError):
    """The store that holds the tables does not answer, or its bucket or folder is gone."""



class StorageDenied(StarscanError):
    """The store refused starscan's credentials (wrong keys, no permission): an operator
    must fix the ``s3_*`` configuration; the reader cannot."""



class InternalError(StarscanError):
    """Something failed that no other kind models: the answer names its id, the server log has the details."""


# ---- limits -------------------------------------------------------------------------
class TooManyRequests(StarscanError):
    """A rate limit (plan requests per user, failed logins) was hit: HTTP 429."""


    def __init__(self, message: str, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestTooLarge(StarscanError):
    """An HTTP body or SQL text over its configured maximum."""



class ResultTooLarge(StarscanError):
    """A statement's result has more rows than an operator's limit (``query_max_rows``): the
    statement fails instead of answering fewer rows."""



class ConfigChangeRefused(StarscanError):
    """POST /api/update_config with an unknown key, a key fixed until a restart, or a bad value."""



def internal_error(exc: BaseException, log: logging.Logger, what: str) -> InternalError:
    """The answer to a failure no error kind models: logged with its traceback under an id
    (on ``log``, saying ``what`` failed), and answered on every wire as that id only (its
    text, a JVM stack trace or a file path, stays in the server's log)."""
    error_id = uuid.uuid4().hex[:12]
    log.error("%s failed: internal error %s: %s: %s", what, error_id, type(exc).__name__, exc, exc_info=exc)
    return InternalError(f"internal error (id {error_id}); the server log has the details")


@dataclass(frozen=True)
class Wires:
    """What one error kind answers on each wire."""

    http: int        # the FE's HTTP status
    thrift: str      # the BE's TStatusCode name
    grpc: str        # Flight's gRPC status code name
    mysql: int       # the MySQL port's error number
    sqlstate: str    # ... and its SQLSTATE


_INTERNAL = Wires(500, "INTERNAL_ERROR", "UNKNOWN", 1105, "HY000")
_UNAVAILABLE = Wires(503, "SERVICE_UNAVAILABLE", "UNAVAILABLE", 1105, "HY000")

#: Every kind, and what it answers on each wire: the only place these are set.
WIRES: dict[type[StarscanError], Wires] = {
    StarscanError: _INTERNAL,
    ConfigError: Wires(500, "CONFIGURATION_ERROR", "UNKNOWN", 1105, "HY000"),
    JavaMissingError: _INTERNAL,
    BadRequest: Wires(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", 1235, "42000"),
    NoDatabaseSelected: Wires(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", 1046, "3D000"),
    Unauthorized: Wires(401, "NOT_AUTHORIZED", "UNAUTHENTICATED", 1045, "28000"),
    SelectPrivilegeMissing: Wires(401, "NOT_AUTHORIZED", "PERMISSION_DENIED", 1142, "42000"),
    DatabaseNotFound: Wires(404, "NOT_FOUND", "NOT_FOUND", 1049, "42000"),
    TableNotFound: Wires(404, "NOT_FOUND", "NOT_FOUND", 1146, "42S02"),
    SqlInvalid: Wires(500, "ANALYSIS_ERROR", "INVALID_ARGUMENT", 1064, "42000"),
    TableUnreadable: _INTERNAL,
    PlanInvalid: Wires(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", 1210, "HY000"),
    PlanExpired: Wires(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", 1210, "HY000"),
    InvalidArgument: Wires(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", 1210, "HY000"),
    NotFound: Wires(404, "NOT_FOUND", "NOT_FOUND", 1105, "HY000"),
    UnknownUser: Wires(404, "NOT_FOUND", "NOT_FOUND", 1105, "HY000"),
    ContextNotFound: Wires(404, "NOT_FOUND", "NOT_FOUND", 1105, "HY000"),
    InvalidInput: Wires(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", 1210, "HY000"),
    NotAuthorized: Wires(403, "NOT_AUTHORIZED", "PERMISSION_DENIED", 1045, "28000"),
    CredentialsRejected: Wires(403, "NOT_AUTHORIZED", "PERMISSION_DENIED", 1045, "28000"),
    PrivilegeMissing: Wires(403, "NOT_AUTHORIZED", "PERMISSION_DENIED", 1227, "42000"),
    DirectReadDenied: Wires(403, "NOT_AUTHORIZED", "PERMISSION_DENIED", 1227, "42000"),
    TooManyTasks: Wires(429, "TOO_MANY_TASKS", "UNAVAILABLE", 1226, "42000"),
    ScanCancelled: Wires(500, "CANCELLED", "CANCELLED", 1317, "70100"),
    ServerShuttingDown: Wires(500, "CANCELLED", "UNAVAILABLE", 1053, "08S01"),
    ScanTimeout: Wires(500, "TIMEOUT", "DEADLINE_EXCEEDED", 3024, "HY000"),
    MemLimitExceeded: Wires(500, "MEM_LIMIT_EXCEEDED", "UNKNOWN", 1041, "HY000"),
    SnapshotGone: Wires(410, "NOT_FOUND", "NOT_FOUND", 1105, "HY000"),
    ScanFailed: _INTERNAL,
    SparkUnavailable: _UNAVAILABLE,
    NoLiveBackend: _UNAVAILABLE,
    BackendLost: _UNAVAILABLE,
    VersionUnknown: Wires(404, "INVALID_ARGUMENT", "INVALID_ARGUMENT", 1105, "HY000"),
    TableRewritten: Wires(409, "INVALID_ARGUMENT", "INVALID_ARGUMENT", 1105, "HY000"),
    PositionBehind: Wires(409, "INVALID_ARGUMENT", "INVALID_ARGUMENT", 1105, "HY000"),
    StorageUnavailable: _UNAVAILABLE,
    StorageDenied: Wires(403, "NOT_AUTHORIZED", "PERMISSION_DENIED", 1105, "HY000"),
    InternalError: _INTERNAL,
    TooManyRequests: Wires(429, "TOO_MANY_TASKS", "UNAVAILABLE", 1226, "42000"),
    RequestTooLarge: Wires(413, "INVALID_ARGUMENT", "INVALID_ARGUMENT", 1153, "08S01"),
    ResultTooLarge: Wires(413, "INVALID_ARGUMENT", "INVALID_ARGUMENT", 1104, "42000"),
    ConfigChangeRefused: Wires(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", 1231, "42000"),
}

for _kind, _wires in WIRES.items():
    _kind.http_status, _kind.status_code = _wires.http, _wires.thrift
    _kind.grpc_status, _kind.mysql_error = _wires.grpc, (_wires.mysql, _wires.sqlstate)
