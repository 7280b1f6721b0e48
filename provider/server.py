"""The BE Thrift server: unframed TBinaryProtocol on be_port, a thread per connection.

Per connection, in its own thread (so a slow or hostile peer never holds up accept()):
the optional TLS handshake, the peer address for audit lines, and a read limit that
refuses any field declaring more than ``max_thrift_message_bytes`` before the bytes are
read (the Cython reader would otherwise allocate and wait for whatever length it is told).
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading

from thriftpy2.protocol import TCyBinaryProtocolFactory
from thriftpy2.server import TThreadedServer
from thriftpy2.thrift import TProcessor
from thriftpy2.transport import TCyBufferedTransport, TServerSocket, TSocket, TTransportException

from starscan.provider.peer import set_peer
from starscan.provider.request_protocol import request_protocol_factory
from starscan.thrift_defs import wire

log = logging.getLogger("starscan.provider")

HANDSHAKE_TIMEOUT_S = 10.0


class ReadLimitExceeded(TTransportException):
    pass


class _LimitedSocket(TSocket):
    """TSocket whose reads may not ask for more than ``limit`` bytes at once.

    TCyBufferedTransport asks its socket for (about) the size of the largest field it has
    to read, so a forged string length shows up here as a huge read request."""

    def __init__(self, sock, limit: int):
        super().__init__(sock=sock)
        self.limit = limit

    def read(self, sz):
        if sz > self.limit:
            raise ReadLimitExceeded(
                type=TTransportException.UNKNOWN,
                message=f"a request field declares {sz} bytes, more than max_thrift_message_bytes={self.limit}")
        return super().read(sz)


class _Server(TThreadedServer):
    def __init__(self, *args, max_read: int, ssl_context: ssl.SSLContext | None, client_timeout_s: float | None, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_read = max_read
        self.ssl_context = ssl_context
        self.client_timeout_s = client_timeout_s

    def handle(self, client: TSocket) -> None:  # type: ignore[override]
        raw = client.sock
        try:
            address = raw.getpeername()[0]
        except OSError:
            address = "unknown"
        set_peer(address)
        try:
            if self.ssl_context is not None:
                raw.settimeout(HANDSHAKE_TIMEOUT_S)
                try:
                    raw = self.ssl_context.wrap_socket(raw, server_side=True)
                except (ssl.SSLError, OSError) as exc:
                    log.info("BE TLS handshake with %s failed: %s", address, exc)
                    _close(raw)
                    return
            raw.settimeout(self.client_timeout_s)
            trans = TCyBufferedTransport(_LimitedSocket(raw, self.max_read))
            iprot = self.iprot_factory.get_protocol(trans)
            oprot = self.oprot_factory.get_protocol(trans)
            try:
                while True:
                    self.processor.process(iprot, oprot)
            except ReadLimitExceeded as exc:
                log.warning("BE dropped a connection from %s: %s", address, exc.message)
            except TTransportException:
                pass  # the peer went away
            except Exception as exc:  # noqa: BLE001 - garbage on the wire: drop this connection only
                log.info("BE dropped a connection from %s: %s: %s", address, type(exc).__name__, exc)
            trans.close()
        finally:
            set_peer("")


def _close(sock) -> None:
    try:
        sock.close()
    except OSError:
        pass


class _ExclusiveServerSocket(TServerSocket):
    """thriftpy2's server socket sets SO_REUSEPORT, which lets a second server bind the same
    port without an error and the kernel then splits the connections between the two: a
    reader's get_next could land on a BE that never saw its open_scanner. A port in use must
    fail the start instead (SO_REUSEADDR stays: restarts do not wait out TIME_WAIT)."""

    def _init_sock(self):
        super()._init_sock()
        if hasattr(socket, "SO_REUSEPORT") and self.sock.family in (socket.AF_INET, socket.AF_INET6):
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 0)


class ThriftServer:
    def __init__(self, handler: object, host: str, port: int, client_timeout_s: float | None = None,
                 max_read_bytes: int = 64 << 20, ssl_context: ssl.SSLContext | None = None):
        self.socket = _ExclusiveServerSocket(host=host, port=port)  # timeouts are set per connection
        self.tls = ssl_context is not None
        self.server = _Server(
            TProcessor(wire.TStarrocksExternalService, handler),
            self.socket,
            # Java's TBinaryProtocol.Factory default: strict write, lenient read (docs/protocol.md 3),
            # so old-style requests without the 0x8001 version word are served too.
            iprot_factory=request_protocol_factory(),
            oprot_factory=TCyBinaryProtocolFactory(strict_read=False, strict_write=True),
            daemon=True,
            max_read=max_read_bytes,
            ssl_context=ssl_context,
            # None = a reader may pause between calls as long as it likes.
            client_timeout_s=client_timeout_s,
        )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.socket.sock.getsockname()[1]

    def start(self) -> None:
        self.socket.listen()
        self.server.trans.listen = lambda: None  # type: ignore[method-assign]  # already listening (port known before serve)
        self._thread = threading.Thread(target=self.server.serve, name="be-thrift-accept", daemon=True)
        self._thread.start()
        log.info("BE thrift listening on %s:%d%s", self.socket.host, self.port, " (TLS)" if self.tls else "")

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
