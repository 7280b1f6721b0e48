"""starscan errors -> gRPC statuses: what the Flight fronts raise for a failure.

The status is the error kind's gRPC code (starscan.core.errors.WIRES) with the message the
REST path gives, then `` [<Kind>]`` (the error's kind, as the HTTP header names it), so a
client tells kinds apart without reading words. pyarrow's Flight server turns
``ArrowInvalid`` into INVALID_ARGUMENT and ``ArrowKeyError`` into NOT_FOUND; the other codes
have Flight exceptions of their own. No status carries a traceback (pyarrow_internals) or a
failure's own text: a failure no kind models is answered by its id (``internal_error``).
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.flight as flight

from starscan.core import errors as E
from starscan.flight import pyarrow_internals

log = logging.getLogger("starscan.flight")

pyarrow_internals.install()

#: gRPC's status codes as pyarrow's exceptions raise them.
_BY_GRPC: dict[str, type[BaseException]] = {
    "INVALID_ARGUMENT": pa.ArrowInvalid,
    "NOT_FOUND": pa.ArrowKeyError,
    "UNAUTHENTICATED": flight.FlightUnauthenticatedError,
    "PERMISSION_DENIED": flight.FlightUnauthorizedError,
    "UNAVAILABLE": flight.FlightUnavailableError,
    "DEADLINE_EXCEEDED": flight.FlightTimedOutError,
    "CANCELLED": flight.FlightCancelledError,
    "UNKNOWN": flight.FlightServerError,
}


def to_flight(exc: BaseException) -> BaseException:
    """The exception a Flight handler raises for ``exc``."""
    if isinstance(exc, flight.FlightError):
        return exc  # type: ignore[no-any-return]  # pyarrow has no annotations
    if not isinstance(exc, E.StarscanError):
        exc = E.internal_error(exc, log, "a Flight call")
    return pyarrow_internals.bare(_BY_GRPC[exc.grpc_status](f"{exc.message} [{exc.kind}]"))
