"""The Thrift IDLs of idl/, loaded once with thriftpy2, when first used.

``wire`` (StarRocks' external scan service, the wire contract) and ``plan`` (starscan's
own opaque plan) are loaded on first access: importing thriftpy2 and parsing the IDL
take about 60 ms, which a reader that only plans and reads files directly (the client's
direct reads) never needs to spend."""

from __future__ import annotations

import functools
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
                _parse_with_kept_tables(str(IDL_DIR / idl), module_name)
                loaded = thriftpy2.load(str(IDL_DIR / idl), module_name=module_name)
            except OSError as exc:  # a broken installation, not a network failure
                raise RuntimeError(f"starscan's Thrift IDL {idl} cannot be loaded: {exc}") from exc
            globals()[name] = loaded  # later accesses find it without coming here
    return loaded


def _parse_with_kept_tables(path: str, module_name: str) -> None:
    """Parse the IDL into thriftpy2's cache of parsed modules (which ``thriftpy2.load`` then
    answers from) with a parser whose LALR tables are kept in the user's cache folder.
    thriftpy2 has ply build the tables in every process and keeps none: 30-60 ms of a new
    reader process's first BE call (a CLI read, a job's first scan), against 5 ms to read them
    back. Anything amiss (no cache folder, another ply, a grammar that changed: ply checks
    the tables' signature and builds them again) leaves the plain load to parse as before."""
    parser = _kept_tables_parser()
    if parser is None:
        return
    try:
        from thriftpy2.parser import parse

        parse(path, module_name, parser=parser)  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - an optimisation only: thriftpy2.load parses as it always did
        return


@functools.cache
def _kept_tables_parser() -> Any:
    """thriftpy2's ply parser built once per process from the kept tables (both IDLs use it;
    thriftpy2's parse lock keeps them from using it at once); None where it cannot be."""
    try:
        import ply
        import thriftpy2
        from ply import yacc
        from thriftpy2.parser import parser as grammar

        folder = _cache_folder()
        folder.mkdir(parents=True, exist_ok=True)
        tables = folder / f"thriftpy2-{thriftpy2.__version__}-ply-{ply.__version__}-tables.pickle"
        return yacc.yacc(module=grammar, debug=False, write_tables=True, picklefile=str(tables),
                         errorlog=yacc.NullLogger())
    except Exception:  # noqa: BLE001 - an optimisation only
        return None


def _cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "starscan"


def transport_errors() -> tuple[type[BaseException], ...]:
    """What a broken BE connection raises (for ``except transport_errors():``, which is
    evaluated only when something was raised, so thriftpy2 is not loaded before)."""
    from thriftpy2.transport import TTransportException

    return (TTransportException, OSError, EOFError)
