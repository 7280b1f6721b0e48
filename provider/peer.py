"""The client address of the Thrift connection the current thread serves (for audit lines
and per-address login limits). Set by the server's connection thread."""

from __future__ import annotations

import threading

_local = threading.local()


def current_peer() -> str:
    return getattr(_local, "address", "")


def set_peer(address: str) -> None:
    _local.address = address
