"""Everything starscan reaches inside thriftpy2, in one place:

* the BE's server: the server, processor and socket classes it subclasses and the binary
  reader's ``skip`` it wraps (starscan/thrift/server.py, starscan/thrift/request_protocol.py);
* the client's transport (starscan/client/transport.py): the socket of thriftpy2's
  ``TSocket`` (``socket_of``), which it receives a reply's rows from;
* the IDL's parser with its tables kept between processes (``parse_with_kept_tables``, for
  starscan.core.thrift_defs): thriftpy2's ply grammar module.

thriftpy2 documents none of these as overridable, so a release may change them without
notice. Tested on ``TESTED_ON``: the whole suite on its lower bound, which is also the newest
release (0.7.1). ``check()`` says which name or call shape used here is not what it was: the
BE refuses to start on it (``require()``) and the unit tests fail on it, instead of a server
that serves wrong bytes or silently drops its guards. (The kept parser tables are an
optimisation only: should the grammar module change, the IDL is parsed as thriftpy2 does.)
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import socket
from pathlib import Path
from typing import Any

from starscan.core.library_internals import call_shape_problems, refuse_untested

#: thriftpy2's classes and modules the BE builds on, imported when first asked for (module
#: ``__getattr__``): the client takes only ``socket_of`` from here and loads none of them.
_LAZY = {
    "TCyBinaryProtocolFactory": "thriftpy2.protocol", "binary": "thriftpy2.protocol.binary",
    "TProtocolException": "thriftpy2.protocol.exc", "TThreadedServer": "thriftpy2.server",
    "TApplicationException": "thriftpy2.thrift", "TMessageType": "thriftpy2.thrift", "TProcessor": "thriftpy2.thrift",
    "TType": "thriftpy2.thrift", "TCyBufferedTransport": "thriftpy2.transport", "TCyMemoryBuffer": "thriftpy2.transport",
    "TServerSocket": "thriftpy2.transport", "TSocket": "thriftpy2.transport", "TTransportException": "thriftpy2.transport",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "binary":
        return importlib.import_module(module)
    return getattr(importlib.import_module(module), name)

__all__ = [*_LAZY, "check", "parse_with_kept_tables", "require", "socket_of"]

TESTED_ON = ">=0.7.1,<0.8"

def _call_shapes() -> tuple[tuple[type, str, tuple[str, ...]], ...]:
    """(owner, method, its parameters as the BE calls or overrides it)."""
    from thriftpy2.server import TThreadedServer
    from thriftpy2.thrift import TProcessor
    from thriftpy2.transport import TServerSocket, TSocket

    return (
    (TProcessor, "process_in", ("self", "iprot")),            # -> (api, seqid, result, call)
    (TProcessor, "process", ("self", "iprot", "oprot")),
    (TProcessor, "send_result", ("self", "oprot", "api", "result", "seqid")),
    (TProcessor, "send_exception", ("self", "oprot", "api", "exc", "seqid")),
    (TProcessor, "handle_exception", ("self", "e", "result")),
    (TThreadedServer, "handle", ("self", "client")),          # one connection, in its own thread
    (TThreadedServer, "serve", ("self",)),
    (TServerSocket, "_init_sock", ("self",)),                 # where SO_REUSEPORT is set
    (TSocket, "read", ("self", "sz")),
    )


def check() -> list[str]:
    """What the BE needs of thriftpy2 that the installed one does not have (empty: all)."""
    from thriftpy2.protocol import binary
    from thriftpy2.transport import TCyBufferedTransport, TServerSocket, TSocket

    problems = call_shape_problems(_call_shapes())
    if "sock" not in inspect.signature(TSocket.__init__).parameters:
        problems.append("TSocket no longer takes an accepted socket (sock=)")
    else:  # socket_of: a TSocket's, the BE's buffered transport's over it, the server socket's
        with socket.socket() as raw:
            if getattr(TSocket(sock=raw), "sock", None) is not raw:  # type: ignore[no-untyped-call]
                problems.append("TSocket no longer keeps its socket as .sock")
            elif getattr(TCyBufferedTransport(TSocket(sock=raw)), "sock", None) is not raw:  # type: ignore[no-untyped-call]
                problems.append("TCyBufferedTransport no longer gives its socket's .sock")
        server = TServerSocket(host="127.0.0.1", port=0)  # type: ignore[no-untyped-call]
        try:
            server._init_sock()  # type: ignore[no-untyped-call]
            if not isinstance(getattr(server, "sock", None), socket.socket):
                problems.append("TServerSocket no longer keeps its listening socket as .sock")
        finally:
            if isinstance(getattr(server, "sock", None), socket.socket):
                server.sock.close()
    # The bounded skip (starscan/thrift/request_protocol.py) replaces the module's ``skip``, which
    # the pure-Python reader must look up when it calls it, and keeps its depth budget.
    if not hasattr(binary, "DEFAULT_MAX_DEPTH") or tuple(inspect.signature(binary.skip).parameters) != (
            "inbuf", "ftype", "budget"):
        problems.append("thriftpy2.protocol.binary.skip is not skip(inbuf, ftype, budget=DEFAULT_MAX_DEPTH)")
    for reader in ("read_struct", "read_val"):
        code = getattr(getattr(binary, reader, None), "__code__", None)
        if code is None or "skip" not in code.co_names:
            problems.append(f"thriftpy2.protocol.binary.{reader} no longer calls the module's skip")
    return problems


def require() -> None:
    """Refuse to start a BE on a thriftpy2 whose internals differ from what it relies on."""
    refuse_untested("thriftpy2", TESTED_ON, "BE", check())


def socket_of(transport: Any) -> socket.socket | None:
    """The socket of a thriftpy2 ``TSocket``, of the buffered transport over one, or of a
    ``TServerSocket`` (None when it is not open)."""
    sock: socket.socket | None = transport.sock
    return sock


def parse_with_kept_tables(path: str, module_name: str, cache_folder: Path) -> None:
    """Parse the IDL into thriftpy2's cache of parsed modules (which ``thriftpy2.load`` then
    answers from) with a parser whose LALR tables are kept in ``cache_folder``. thriftpy2 has
    ply build the tables in every process and keeps none: 30-60 ms of a new reader process's
    first BE call (a CLI read, a job's first scan), against 5 ms to read them back. Anything
    amiss (no cache folder, another ply, a grammar that changed: ply checks the tables'
    signature and builds them again) leaves the plain load to parse as before."""
    parser = _kept_tables_parser(str(cache_folder))
    if parser is None:
        return
    try:
        from thriftpy2.parser import parse

        parse(path, module_name, parser=parser)  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - an optimisation only: thriftpy2.load parses as it always did
        return


@functools.cache
def _kept_tables_parser(cache_folder: str) -> Any:
    """thriftpy2's ply parser built once per process from the kept tables (both IDLs use it;
    thriftpy2's parse lock keeps them from using it at once); None where it cannot be."""
    try:
        import ply
        import thriftpy2
        from ply import yacc
        from thriftpy2.parser import parser as grammar

        os.makedirs(cache_folder, exist_ok=True)
        tables = Path(cache_folder) / f"thriftpy2-{thriftpy2.__version__}-ply-{ply.__version__}-tables.pickle"
        return yacc.yacc(module=grammar, debug=False, write_tables=True, picklefile=str(tables),
                         errorlog=yacc.NullLogger())
    except Exception:  # noqa: BLE001 - an optimisation only
        return None
