"""The Thrift IDLs of idl/, loaded once with thriftpy2, when first used.

``wire`` (StarRocks' external scan service, the wire contract) and ``plan`` (starscan's
own opaque plan) are loaded on first access: importing thriftpy2 and parsing the IDL
take about 60 ms, which a reader that only plans and reads files directly (the client's
direct reads) never needs to spend."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

IDL_DIR = resources.files("starscan.idl")

_MODULES = {"wire": ("StarrocksExternalService.thrift", "starscan_wire_thrift"),
            "plan": ("starscan_plan.thrift", "starscan_plan_thrift")}


@functools.cache
def _load(name: str) -> Any:
    import thriftpy2

    idl, module_name = _MODULES[name]
    return thriftpy2.load(str(IDL_DIR / idl), module_name=module_name)


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return _load(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def transport_errors() -> tuple[type[BaseException], ...]:
    """What a broken BE connection raises (for ``except transport_errors():``, which is
    evaluated only when something was raised, so thriftpy2 is not loaded before)."""
    from thriftpy2.transport import TTransportException

    return (TTransportException, OSError, EOFError)
