"""Domain errors -> TStatus: the only place BE replies get their status codes (each kind's
from starscan.core.errors.WIRES)."""

from __future__ import annotations

import logging
from typing import Any

from starscan.core.errors import StarscanError, internal_error
from starscan.core.protocol_extensions import ERROR_KIND_PREFIX
from starscan.core.thrift_defs import wire

log = logging.getLogger("starscan.provider")

# Codes the StarRocks Java SDK knows (docs/protocol.md 3); anything else would crash it.
SDK_CODES = frozenset(list(range(0, 23)) + list(range(30, 48)) + [50])


def ok() -> Any:
    return wire.TStatus(status_code=wire.TStatusCode.OK)


def from_error(err: BaseException, with_kind: bool = False) -> Any:
    """The status of a failure; ``with_kind`` (the reader asked for it): the error's kind as
    a second ``error_msgs`` entry (starscan.core.protocol_extensions)."""
    if not isinstance(err, StarscanError):
        err = internal_error(err, log, "a BE call")
    code = getattr(wire.TStatusCode, err.status_code, wire.TStatusCode.INTERNAL_ERROR)
    message, kind = err.message, err.kind
    if code not in SDK_CODES:
        code = wire.TStatusCode.INTERNAL_ERROR
    return wire.TStatus(status_code=code, error_msgs=[message, ERROR_KIND_PREFIX + kind] if with_kind else [message])
