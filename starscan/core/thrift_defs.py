"""The Thrift IDLs of idl/, loaded once with thriftpy2, when first used.

``wire`` (StarRocks' external scan service, the wire contract) and ``plan`` (starscan's
own opaque plan) are loaded on first access: importing thriftpy2 and parsing the IDL
take about 60 ms, which a reader that only plans and reads files directly (the client's
direct reads) never needs to spend."""

from __future__ import annotations

import os
import threading
from importlib import resources
from pathlib import Path
from typing import Any

IDL_DIR = resources.files("starscan.idl")

_MODULES = {"wire": ("StarrocksExternalService.thrift", "starscan_wire_thrift"),
            "plan": ("starscan_plan.thrift", "starscan_plan_thrift")}
# One load at a time: older thriftpy2 releases (the dependency allows 0.5.2) could parse
# the same IDL into several modules when threads loaded it at once, and the first BE calls
# of a read come from several threads.
_LOADING = threading.Lock()


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _LOADING:
        loaded = globals().get(name)
        if loaded is None:
            import thriftpy2

            idl, module_name = _MODULES[name]
            try:
                # An optimisation only: this parse, with kept parser tables, fills thriftpy2's
                # cache of parsed modules, which the load then answers from; it raises nothing,
                # and where it cannot be made the load parses as it always did.
                from starscan.core.thriftpy2_internals import parse_with_kept_tables

                parse_with_kept_tables(str(IDL_DIR / idl), module_name, _cache_folder())
                loaded = thriftpy2.load(str(IDL_DIR / idl), module_name=module_name)
            except OSError as exc:  # a broken installation, not a network failure
                raise RuntimeError(f"starscan's Thrift IDL {idl} cannot be loaded: {exc}") from exc
            globals()[name] = loaded  # later accesses find it without coming here
    return loaded


def _cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "starscan"


def protocol_errors() -> tuple[type[BaseException], ...]:
    """What a call raises when the answer is not the protocol's: an exception message (an
    unknown method) or bytes thriftpy2 cannot read as the reply, a name that is not UTF-8
    among them (for ``except``, as below)."""
    from thriftpy2.protocol.exc import TProtocolException
    from thriftpy2.thrift import TApplicationException

    return (TApplicationException, TProtocolException, UnicodeDecodeError)


def transport_errors() -> tuple[type[BaseException], ...]:
    """What a broken BE connection raises (for ``except transport_errors():``, which is
    evaluated only when something was raised, so thriftpy2 is not loaded before)."""
    from thriftpy2.transport import TTransportException

    return (TTransportException, OSError, EOFError)
