"""The BE Thrift server: unframed TBinaryProtocol on be_port, a thread per connection."""

from __future__ import annotations

import logging
import socket
import threading

from thriftpy2.protocol import TCyBinaryProtocolFactory
from thriftpy2.server import TThreadedServer
from thriftpy2.thrift import TProcessor
from thriftpy2.transport import TCyBufferedTransportFactory, TServerSocket

from starscan.provider.handler import ExternalServiceHandler
from starscan.thrift_defs import wire

log = logging.getLogger("starscan.provider")


class ThriftServer:
    def __init__(self, handler: ExternalServiceHandler, host: str, port: int, client_timeout_s: float | None = None):
        # client_timeout in ms; None = a reader may pause between calls as long as it likes.
        timeout_ms = int(client_timeout_s * 1000) if client_timeout_s else None
        self.socket = TServerSocket(host=host, port=port, client_timeout=timeout_ms)
        self.server = TThreadedServer(
            TProcessor(wire.TStarrocksExternalService, handler),
            self.socket,
            # Java's TBinaryProtocol.Factory default: strict write, lenient read (PROTOCOL.md 3),
            # so old-style requests without the 0x8001 version word are served too.
            iprot_factory=TCyBinaryProtocolFactory(strict_read=False, strict_write=True),
            itrans_factory=TCyBufferedTransportFactory(),
            daemon=True,
        )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.socket.sock.getsockname()[1]

    def start(self) -> None:
        self.socket.listen()
        self.server.trans.listen = lambda: None  # already listening (port known before serve)
        self._thread = threading.Thread(target=self.server.serve, name="be-thrift-accept", daemon=True)
        self._thread.start()
        log.info("BE thrift listening on %s:%d", self.socket.host, self.port)

    def stop(self) -> None:
        """Stop accepting: wake the blocked accept() with a throw-away connection first, so
        the loop sees `closed` and ends instead of failing on a closed socket."""
        self.server.closed = True
        host = self.socket.host if self.socket.host not in (None, "", "0.0.0.0") else "127.0.0.1"
        try:
            with socket.create_connection((host, self.port), timeout=2):
                pass
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.socket.close()
        except OSError:
            pass
