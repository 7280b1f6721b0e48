"""What starscan reaches below pyarrow's public Flight API, in one place: an error a Flight
handler raises reaches the client without the server's Python traceback.

pyarrow's Flight server answers a handler's ``ArrowInvalid`` or ``ArrowKeyError`` (the only
way to send gRPC's INVALID_ARGUMENT and NOT_FOUND from Python) with the exception's
traceback in the status, formatted by ``traceback.format_exception`` when the status is
sent: the server's install path, its code and line numbers on every refusal. An exception
starscan marks (``bare``) is formatted as nothing there; every other exception, and every
traceback the server logs, is formatted as before.
"""

from __future__ import annotations

import traceback
from typing import Any

_MARK = "_starscan_bare"
_original = traceback.format_exception


def bare(exc: BaseException) -> BaseException:
    """``exc``, marked to reach a Flight client without its traceback."""
    setattr(exc, _MARK, True)
    return exc


def _format_exception(exc: Any, /, *args: Any, **kwargs: Any) -> list[str]:
    """``traceback.format_exception``, called either way (the exception, or its type, value
    and traceback), with nothing for a marked exception."""
    value = args[0] if args else kwargs.get("value", exc)
    if getattr(value, _MARK, False) or getattr(exc, _MARK, False):
        return []
    return _original(exc, *args, **kwargs)


def install() -> None:
    """Format marked exceptions as nothing (idempotent)."""
    if traceback.format_exception is not _format_exception:
        traceback.format_exception = _format_exception
