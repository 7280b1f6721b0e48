"""What the BE reaches inside thriftpy2, in one place: the server, processor and socket
classes it subclasses and the binary reader's ``skip`` it wraps (provider/server.py,
provider/request_protocol.py). thriftpy2 documents none of these as overridable, so a
release may change them without notice.

Tested on ``TESTED_ON``: the whole suite on its lower bound, which is also the newest
release (0.7.1). ``check()`` says which name or call shape the BE relies on is not what it
was: the BE refuses to start on it (``require()``) and the unit tests fail on it, instead of
a server that serves wrong bytes or silently drops its guards. The client uses thriftpy2's
public client API only (starscan.client.protocol) and is not bound by this range.
"""

from __future__ import annotations

import inspect

from thriftpy2.protocol import TCyBinaryProtocolFactory, binary
from thriftpy2.protocol.exc import TProtocolException
from thriftpy2.server import TThreadedServer
from thriftpy2.thrift import TApplicationException, TMessageType, TProcessor, TType
from thriftpy2.transport import TCyBufferedTransport, TCyMemoryBuffer, TServerSocket, TSocket, TTransportException

from starscan.core.library_internals import call_shape_problems, refuse_untested

__all__ = [
    "TApplicationException", "TCyBinaryProtocolFactory", "TCyBufferedTransport", "TCyMemoryBuffer", "TMessageType",
    "TProcessor", "TProtocolException", "TServerSocket", "TSocket", "TThreadedServer", "TTransportException", "TType",
    "binary", "check", "require",
]

TESTED_ON = ">=0.7.1,<0.8"

#: (owner, method, its parameters as the BE calls or overrides it).
_CALL_SHAPES = (
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
    problems = call_shape_problems(_CALL_SHAPES)
    if "sock" not in inspect.signature(TSocket.__init__).parameters:
        problems.append("TSocket no longer takes an accepted socket (sock=)")
    # The bounded skip (provider/request_protocol.py) replaces the module's ``skip``, which
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
