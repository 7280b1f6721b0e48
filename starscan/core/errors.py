"""Every error kind starscan reports, modelled once.

Each kind carries the HTTP status the FE answers with and the ``TStatusCode`` name the
BE answers with. Rendering to the wire happens in exactly two places:
``starscan.planner.errors`` (HTTP) and ``starscan.provider.status`` (Thrift).
Only status codes the StarRocks Java SDK knows are ever used (docs/protocol.md section 3).
"""

from __future__ import annotations


class StarscanError(Exception):
    """Base of all domain errors. ``message`` is what the person at the client reads."""

    http_status: int = 500
    status_code: str = "INTERNAL_ERROR"

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

    status_code = "CONFIGURATION_ERROR"


class JavaMissingError(StarscanError):
    """No usable Java runtime for Spark."""


# ---- FE / request validation -------------------------------------------------------
class BadRequest(StarscanError):
    http_status = 400
    status_code = "INVALID_ARGUMENT"


class Unauthorized(StarscanError):
    """Missing or wrong credentials, or no SELECT grant: HTTP 401 in the auth shape."""

    http_status = 401
    status_code = "NOT_AUTHORIZED"


class SelectPrivilegeMissing(Unauthorized):
    """The user may not read the table (no SELECT grant): 401 in the auth shape, as
    StarRocks' FE answers."""


class DatabaseNotFound(StarscanError):
    http_status = 404
    status_code = "NOT_FOUND"

    def __init__(self, db: str):
        super().__init__(f"Database [{db}] does not exists")
        self.db = db


class TableNotFound(StarscanError):
    http_status = 404
    status_code = "NOT_FOUND"

    def __init__(self, table: str):
        super().__init__(f"Table [{table}] does not exists")
        self.table = table


class SqlInvalid(StarscanError):
    """Parse/analysis failure. The message starts with StarRocks' own text, ``The Sql is
    invalid``, so anything matching it still does, and goes on with the reason
    (``The Sql is invalid: unknown column 'x' in db.t``). ``detail`` is the reason alone;
    it names only what the SQL and the table's schema say, never a path or a secret."""

    http_status = 500
    status_code = "ANALYSIS_ERROR"
    PREFIX = "The Sql is invalid"

    def __init__(self, detail: str = ""):
        super().__init__(f"{self.PREFIX}: {detail}" if detail else self.PREFIX)
        self.detail = detail


class TableUnreadable(StarscanError):
    """A table whose files or folders Spark cannot read as they are (a file name Hadoop
    cannot open, an empty partition value, an unreadable footer). Refused at plan time, so
    a reader never gets part of a table."""

    http_status = 500
    status_code = "INTERNAL_ERROR"


# ---- plans ------------------------------------------------------------------------
class PlanInvalid(StarscanError):
    """The opaque plan is not ours, was altered, or has expired."""

    http_status = 400
    status_code = "INVALID_ARGUMENT"


class PlanExpired(PlanInvalid):
    """The plan's time ran out (``plan_ttl_s``): ask the FE for a new one."""


# ---- BE / scanning -----------------------------------------------------------------
class InvalidArgument(StarscanError):
    http_status = 400
    status_code = "INVALID_ARGUMENT"


class NotFound(StarscanError):
    http_status = 404
    status_code = "NOT_FOUND"


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

    http_status = 400
    status_code = "INVALID_ARGUMENT"


class NotAuthorized(StarscanError):
    http_status = 403
    status_code = "NOT_AUTHORIZED"


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
    http_status = 429
    status_code = "TOO_MANY_TASKS"


class ScanCancelled(StarscanError):
    status_code = "CANCELLED"


class ServerShuttingDown(ScanCancelled):
    """The server stops: open the scanner again when it is back (or on another BE)."""


class ScanTimeout(StarscanError):
    status_code = "TIMEOUT"


class MemLimitExceeded(StarscanError):
    status_code = "MEM_LIMIT_EXCEEDED"


class SnapshotGone(StarscanError):
    """A file of the planned table version no longer exists (or changed)."""

    http_status = 410
    status_code = "NOT_FOUND"


class ScanFailed(StarscanError):
    """Spark failed while running a scan."""

    status_code = "INTERNAL_ERROR"


class SparkUnavailable(StarscanError):
    """This process's Spark is gone (its JVM died or the context stopped): a new SparkSession
    is starting (health answers RECOVERING), or none could be started (health answers 503
    and starscan must be restarted). Retryable: a reader reads again, here or elsewhere."""

    http_status = 503
    status_code = "SERVICE_UNAVAILABLE"


class NoLiveBackend(StarscanError):
    """Every configured BE failed its last health probes: a plan would route readers
    nowhere."""

    http_status = 503
    status_code = "SERVICE_UNAVAILABLE"


class VersionUnknown(StarscanError):
    """A ``since_version`` this server never observed for the table, or one older than the
    versions it keeps."""

    http_status = 404
    status_code = "INVALID_ARGUMENT"


class TableRewritten(StarscanError):
    """Files present at ``since_version`` were removed or rewritten since: what changed is
    not only appended rows, so an incremental read cannot be exact."""

    http_status = 409
    status_code = "INVALID_ARGUMENT"


class PositionBehind(StarscanError):
    """A consumer commit of a version earlier than the one it committed: positions never
    move back (the consumer would be served rows it already had)."""

    http_status = 409
    status_code = "INVALID_ARGUMENT"


class StorageUnavailable(StarscanError):
    """The store that holds the tables does not answer, or its bucket or folder is gone."""

    http_status = 503
    status_code = "SERVICE_UNAVAILABLE"


class StorageDenied(StarscanError):
    """The store refused starscan's credentials (wrong keys, no permission): an operator
    must fix the ``s3_*`` configuration; the reader cannot."""

    http_status = 403
    status_code = "NOT_AUTHORIZED"


class InternalError(StarscanError):
    status_code = "INTERNAL_ERROR"


# ---- limits -------------------------------------------------------------------------
class TooManyRequests(StarscanError):
    """A rate limit (plan requests per user, failed logins) was hit: HTTP 429."""

    http_status = 429
    status_code = "TOO_MANY_TASKS"

    def __init__(self, message: str, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestTooLarge(StarscanError):
    """An HTTP body or SQL text over its configured maximum."""

    http_status = 413
    status_code = "INVALID_ARGUMENT"


class ConfigChangeRefused(StarscanError):
    """POST /api/update_config with an unknown key, a key fixed until a restart, or a bad value."""

    http_status = 400
    status_code = "INVALID_ARGUMENT"


def unexpected_error_message(exc: BaseException) -> str:
    """What a client reads when something failed that no error kind models: the kind of
    failure only. Its text (a JVM stack trace, file paths) goes to the server log."""
    return f"internal error ({type(exc).__name__}); the server log has the details"
