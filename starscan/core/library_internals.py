"""What the adapters of libraries' internals share (starscan/core/thriftpy2_internals.py,
planner/uvicorn_internals.py): the check that each method reached below a library's public
API still has the parameters it was tested with, and the refusal to start on one that has
changed (docs/architecture.md "Libraries' internals")."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from importlib.metadata import version

from starscan.core.errors import ConfigError


def call_shape_problems(shapes: Iterable[tuple[type, str, tuple[str, ...]]]) -> list[str]:
    """For each (class, method, parameters): what differs in the installed library."""
    problems = []
    for owner, name, params in shapes:
        method = getattr(owner, name, None)
        if method is None:
            problems.append(f"{owner.__name__}.{name} is gone")
            continue
        found = tuple(inspect.signature(method).parameters)
        if found != params:
            problems.append(f"{owner.__name__}.{name} takes {found}, not {params}")
    return problems


def refuse_untested(library: str, tested_on: str, role: str, problems: list[str]) -> None:
    """Raise a ConfigError naming what changed when there are ``problems``."""
    if problems:
        raise ConfigError(f"{library} {version(library)} is not what the {role} was tested on ({tested_on}): "
                          f"{'; '.join(problems)}; install a tested release: pip install '{library}{tested_on}'")
