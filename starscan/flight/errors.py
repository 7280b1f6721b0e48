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
from collections.abc import Iterator

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


def to_flight(exc: BaseException, what: str = "a Flight call") -> BaseException:
    """The exception a Flight handler raises for ``exc``; a failure no kind models is logged
    as ``what`` failing, with its traceback, under the id its answer names."""
    if isinstance(exc, flight.FlightError):
        return exc  # type: ignore[no-any-return]  # pyarrow has no annotations
    if not isinstance(exc, E.StarscanError):
        exc = E.internal_error(exc, log, what)
    return pyarrow_internals.bare(_BY_GRPC[exc.grpc_status](f"{exc.message} [{exc.kind}]"))


def as_flight(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches`` for a Flight stream: a failure on the way is its gRPC status (``to_flight``),
    and the batches' generator is closed whatever ends the stream."""
    try:
        yield from batches
    except Exception as exc:  # noqa: BLE001 - every failure is a gRPC status
        raise to_flight(exc) from None
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
