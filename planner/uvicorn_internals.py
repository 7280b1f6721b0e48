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
from importlib.metadata import version

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from starscan.core.errors import ConfigError

__all__ = ["HttpToolsProtocol", "TESTED_ON", "check", "require"]

TESTED_ON = ">=0.29,<0.55"

#: The hooks the bounded protocol overrides, with their parameters: httptools' parser calls
#: the first two, asyncio the third; ``connection_made`` sets ``self.transport``.
_HOOKS = (
    ("on_message_begin", ("self",)),
    ("on_headers_complete", ("self",)),
    ("data_received", ("self", "data")),
    ("connection_made", ("self", "transport")),
)


def check() -> list[str]:
    """What the FE needs of uvicorn's httptools protocol that the installed one lacks."""
    problems = []
    for name, params in _HOOKS:
        method = getattr(HttpToolsProtocol, name, None)
        if method is None:
            problems.append(f"HttpToolsProtocol.{name} is gone")
            continue
        found = tuple(inspect.signature(method).parameters)
        if found != params:
            problems.append(f"HttpToolsProtocol.{name} takes {found}, not {params}")
    try:
        source = inspect.getsource(HttpToolsProtocol.connection_made)
    except (OSError, TypeError):  # an install without sources: the call shapes above must do
        source = None
    if source is not None and "self.transport = transport" not in source:
        problems.append("HttpToolsProtocol.connection_made no longer keeps the connection as self.transport")
    return problems


def require() -> None:
    """Refuse to start an FE on a uvicorn whose protocol hooks differ from what it relies on."""
    problems = check()
    if problems:
        raise ConfigError(f"uvicorn {version('uvicorn')} is not what the FE was tested on ({TESTED_ON}): "
                          f"{'; '.join(problems)}; install a tested release: pip install 'uvicorn{TESTED_ON}'")
