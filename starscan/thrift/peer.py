"""The Thrift connection the current thread serves: its client address (for audit lines and
per-address login limits) and the scanners its calls named (so the BE knows, when the
connection ends, which scanners its reader may have abandoned). Set by the server's
connection thread, one connection per thread."""

from __future__ import annotations

import threading

_local = threading.local()


def current_peer() -> str:
    return getattr(_local, "address", "")


def set_peer(address: str) -> None:
    """A connection starts (or, with "", ends) on this thread."""
    _local.address = address
    _local.contexts = set()


def named_context(context_id: str | None) -> None:
    """A call on this thread's connection named the scanner ``context_id``."""
    contexts = getattr(_local, "contexts", None)
    if context_id and contexts is not None:
        contexts.add(context_id)


def named_contexts() -> set[str]:
    """The scanners this thread's connection named so far."""
    return set(getattr(_local, "contexts", ()))
