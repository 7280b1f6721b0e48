"""Renders domain errors as StarRocks' FE does (docs/protocol.md 2.1 and 2.4)."""

from __future__ import annotations

import logging
import math

from fastapi import Request
from fastapi.responses import JSONResponse

from starscan.core.errors import SqlInvalid, StarscanError, TooManyRequests, Unauthorized
from starscan.core.protocol_extensions import ERROR_KIND_HEADER

log = logging.getLogger("starscan.planner")


def error_response(err: StarscanError) -> JSONResponse:
    """The answer StarRocks' FE gives, plus the error's kind in a header (clients that know it
    tell kinds apart by it; the body stays StarRocks')."""
    if isinstance(err, Unauthorized):
        # The auth shape: status/code/msg/message, plus the Basic challenge.
        return JSONResponse(
            {"status": "FAILED", "code": "1", "msg": err.message, "message": err.message},
            status_code=401,
            headers={"WWW-Authenticate": 'Basic realm=""', ERROR_KIND_HEADER: err.kind},
        )
    if isinstance(err, SqlInvalid) and err.detail:
        log.info("invalid SQL: %s", err.detail)
    headers = {ERROR_KIND_HEADER: err.kind}
    if isinstance(err, TooManyRequests):
        headers["Retry-After"] = str(max(1, math.ceil(err.retry_after_s)))
    return JSONResponse({"status": err.http_status, "exception": err.message}, status_code=err.http_status, headers=headers)


async def handle_starscan_error(request: Request, exc: StarscanError) -> JSONResponse:
    return error_response(exc)
