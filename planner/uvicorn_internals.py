"""What the FE reaches inside uvicorn, in one place: its httptools protocol class, which
planner/http_protocol.py subclasses to bound a request's head. uvicorn documents the class
as an ``http=`` choice, not as a base class, so a release may change the hooks used here.

Tested on ``TESTED_ON``: the names and call shapes on both ends of the range (the quick
tier on the lower bound, 0.29, in ``./quickstart.sh test-minimum``; the whole suite, with
the 431 answer to an endless head, on the newest). ``check()`` says which hook is not what
it was: the FE refuses to start on it (``require()``) and the unit tests fail on it, instead
of an FE whose bound silently stops working.
"""

from __future__ import annotations

import inspect

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from starscan.core.library_internals import call_shape_problems, refuse_untested

__all__ = ["HttpToolsProtocol", "TESTED_ON", "check", "require"]

TESTED_ON = ">=0.29,<0.56"

#: The hooks the bounded protocol overrides, with their parameters: httptools' parser calls
#: the first two, asyncio the third; ``connection_made`` sets ``self.transport``.
_HOOKS = (
    (HttpToolsProtocol, "on_message_begin", ("self",)),
    (HttpToolsProtocol, "on_headers_complete", ("self",)),
    (HttpToolsProtocol, "data_received", ("self", "data")),
    (HttpToolsProtocol, "connection_made", ("self", "transport")),
)


def check() -> list[str]:
    """What the FE needs of uvicorn's httptools protocol that the installed one lacks."""
    problems = call_shape_problems(_HOOKS)
    try:
        source = inspect.getsource(HttpToolsProtocol.connection_made)
    except (OSError, TypeError):  # an install without sources: the call shapes above must do
        source = None
    if source is not None and "self.transport = transport" not in source:
        problems.append("HttpToolsProtocol.connection_made no longer keeps the connection as self.transport")
    return problems


def require() -> None:
    """Refuse to start an FE on a uvicorn whose protocol hooks differ from what it relies on."""
    refuse_untested("uvicorn", TESTED_ON, "FE", check())
