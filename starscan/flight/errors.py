"""starscan errors -> gRPC statuses: the one place the Flight SQL front maps them.

The status carries the message the REST path gives, then `` [<Kind>]`` (the error's kind, as
the HTTP header names it), so a client tells kinds apart without reading words. pyarrow's
Flight server turns ``ArrowInvalid`` into INVALID_ARGUMENT and ``ArrowKeyError`` into
NOT_FOUND; the other codes have Flight exceptions of their own.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.flight as flight

from starscan.core import errors as E


def to_flight(exc: BaseException) -> BaseException:
    """The exception a Flight handler raises for ``exc``."""
    if not isinstance(exc, E.StarscanError):
        if isinstance(exc, flight.FlightError):
            return exc  # type: ignore[no-any-return]  # pyarrow has no annotations
        internal: BaseException = flight.FlightServerError(f"{type(exc).__name__}: {exc}"[:2000])
        return internal
    error: BaseException = _flight_class(exc)(f"{exc.message} [{exc.kind}]")
    return error


def _flight_class(exc: E.StarscanError) -> type[BaseException]:
    if isinstance(exc, E.Unauthorized) and not isinstance(exc, E.SelectPrivilegeMissing):
        return flight.FlightUnauthenticatedError  # type: ignore[no-any-return]
    if isinstance(exc, (E.SelectPrivilegeMissing, E.NotAuthorized)):
        return flight.FlightUnauthorizedError  # type: ignore[no-any-return]
    if isinstance(exc, (E.DatabaseNotFound, E.TableNotFound, E.NotFound)):
        return pa.ArrowKeyError  # type: ignore[no-any-return]
    if isinstance(exc, (E.BadRequest, E.SqlInvalid, E.InvalidArgument, E.PlanInvalid, E.InvalidInput)):
        return pa.ArrowInvalid  # type: ignore[no-any-return]
    if isinstance(exc, (E.SparkUnavailable, E.NoLiveBackend, E.TooManyTasks, E.TooManyRequests, E.ServerShuttingDown,
                        E.StorageUnavailable)):
        return flight.FlightUnavailableError  # type: ignore[no-any-return]
    if isinstance(exc, E.ScanTimeout):
        return flight.FlightTimedOutError  # type: ignore[no-any-return]
    if isinstance(exc, E.ScanCancelled):
        return flight.FlightCancelledError  # type: ignore[no-any-return]
    return flight.FlightServerError  # type: ignore[no-any-return]
