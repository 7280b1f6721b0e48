"""The Thrift server of the external scan protocol (the BE on be_port, the FE's relay on
thrift_relay_port): unframed TBinaryProtocol, a thread per connection.

Per connection, in its own thread (so a slow or hostile peer never holds up accept()):
the optional TLS handshake, the peer address for audit lines, and a read limit that
refuses any field declaring more than ``max_thrift_message_bytes`` before the bytes are
read (the Cython reader would otherwise allocate and wait for whatever length it is told).
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from typing import Any

from starscan.arrow.wire import IpcStream
from starscan.core import thriftpy2_internals
from starscan.core.thrift_defs import wire
from starscan.core.thriftpy2_internals import (
    TApplicationException,
    TCyBinaryProtocolFactory,
    TCyBufferedTransport,
    TCyMemoryBuffer,
    TMessageType,
    TProcessor,
    TServerSocket,
    TSocket,
    TThreadedServer,
    TTransportException,
    socket_of,
)
from starscan.thrift.peer import named_contexts, set_peer
from starscan.thrift.reply_keepalive import ReplyKeepAlive
from starscan.thrift.request_protocol import request_protocol_factory

log = logging.getLogger("starscan.provider")

HANDSHAKE_TIMEOUT_S = 10.0


class ReadLimitExceeded(TTransportException):  # type: ignore[misc]  # thriftpy2 is untyped
    pass


class _LimitedSocket(TSocket):  # type: ignore[misc]
    """TSocket whose reads may not ask for more than ``limit`` bytes at once.

    TCyBufferedTransport asks its socket for (about) the size of the largest field it has
    to read, so a forged string length shows up here as a huge read request."""

    def __init__(self, sock: Any, limit: int) -> None:
        super().__init__(sock=sock)
        self.limit = limit

    def read(self, sz: int) -> Any:
        if sz > self.limit:
            raise ReadLimitExceeded(
                type=TTransportException.UNKNOWN,
                message=f"a request field declares {sz} bytes, more than max_thrift_message_bytes={self.limit}")
        return super().read(sz)


_ROWS_FIELD = struct.Struct(">bhi")  # TScanBatchResult.rows: type STRING (11), field id 3, length
_STOPS = b"\x00\x00"                 # the ends of TScanBatchResult and of get_next's result struct


class _Processor(TProcessor):  # type: ignore[misc]
    """thriftpy2's processor, except that

    * a ``get_next`` reply's rows (the Arrow IPC stream, ~1 MB) go from their buffers to the
      socket in one scatter-gather send. thriftpy2 copies a binary field into its write
      buffer and the buffer into a new bytes object before sending, and the rows were joined
      once before that. Writing lineitem's replies alone took ~165 ms of CPU per million rows
      that way, ~48 ms this way (in a scan, where other stages share the cores, the server's
      CPU fell by ~4 %; bench/RESULTS.md). The bytes on the wire are the same: everything but
      the rows is written by thriftpy2's own writer, and ``rows`` is the struct's last field,
      so it is spliced in where that writer puts it (tests/unit/test_reply_writer.py compares
      the two);
    * a reply not ready within the keep-alive interval is begun early and kept alive with
      fields the reader skips (starscan/thrift/reply_keepalive.py), so a reader's socket read
      timeout does not fire while the BE works on the answer."""

    def __init__(self, service: Any, handler: Any, oprot_factory: Any, keepalive: ReplyKeepAlive | None = None) -> None:
        super().__init__(service, handler)
        self.oprot_factory = oprot_factory
        self.keepalive = keepalive

    def process(self, iprot: Any, oprot: Any) -> Any:
        api, seqid, result, call = self.process_in(iprot)
        if isinstance(result, TApplicationException):
            return self.send_exception(oprot, api, result, seqid)
        assert call is not None
        pending = None
        if self.keepalive is not None:
            pending = self.keepalive.begin(socket_of(oprot.trans), lambda: self._written(
                lambda p: p.write_message_begin(api, TMessageType.REPLY, seqid)))
        try:
            result.success = call()
        except Exception as exc:
            if pending is not None and self.keepalive is not None and self.keepalive.end(pending) is not None:
                raise  # a begun reply cannot become an exception message: the connection is dropped
            pending = None
            if isinstance(exc, TApplicationException):
                return self.send_exception(oprot, api, exc, seqid)
            if not self.handle_exception(exc, result):
                raise
        begun = self.keepalive.end(pending) if pending is not None and self.keepalive is not None else None
        if not result.oneway:
            self.send_result(oprot, api, result, seqid, begun)

    def _written(self, write: Callable[[Any], Any]) -> bytes:
        """What ``write(protocol)`` writes, as bytes (the replies' own writer)."""
        buffer = TCyMemoryBuffer()
        write(self.oprot_factory.get_protocol(buffer))
        return bytes(buffer.getvalue())

    def send_result(self, oprot: Any, api: str, result: Any, seqid: int, begun: bytes | None = None) -> Any:
        """The reply; ``begun``: None, or the reply was begun early (its header sent) and these
        bytes of it are still to go before the rest."""
        batch = result.success if api == "get_next" else None
        rows = getattr(batch, "rows", None)
        sock = socket_of(oprot.trans)
        if (rows is None and begun is None) or sock is None:
            if batch is not None and rows is not None and not isinstance(rows, bytes):
                batch.rows = bytes(rows)
            return super().send_result(oprot, api, result, seqid)
        parts = rows.parts if isinstance(rows, IpcStream) else (rows,) if rows is not None else ()
        if batch is not None:
            batch.rows = None
        try:
            written = self._written(lambda p: (p.write_message_begin(api, TMessageType.REPLY, seqid), result.write(p),
                                               p.write_message_end()))
        finally:
            if batch is not None:
                batch.rows = rows
        if begun is not None:  # the header went out already
            written = begun + written[len(self._written(lambda p: p.write_message_begin(api, TMessageType.REPLY,
                                                                                        seqid))):]
        oprot.trans.flush()  # nothing is pending between calls; if it were, it goes first
        if rows is None:
            send_parts(sock, (written,))
            return
        assert written.endswith(_STOPS)
        send_parts(sock, (written[:-2] + _ROWS_FIELD.pack(11, 3, len(rows)), *parts, _STOPS))


def send_parts(sock: Any, parts: Any) -> None:
    """Every byte of ``parts`` in order: scatter-gather sends, again after a partial one (a
    socket with a timeout may send less). TLS sockets have no sendmsg: one send per part."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    if not hasattr(sock, "sendmsg") or isinstance(sock, ssl.SSLSocket):
        for view in views:
            sock.sendall(view)
        return
    while views:
        sent = sock.sendmsg(views)
        while sent:
            if sent >= views[0].nbytes:
                sent -= views[0].nbytes
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


class _Server(TThreadedServer):  # type: ignore[misc]
    def __init__(self, *args: Any, max_read: int, ssl_context: ssl.SSLContext | None, client_timeout_s: float | None,
                 on_connection_closed: Callable[[set[str]], None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_connection_closed = on_connection_closed  # called with the scanners the connection named
        self.max_read = max_read
        self.ssl_context = ssl_context
        self.client_timeout_s = client_timeout_s

    def handle(self, client: TSocket) -> None:
        raw = socket_of(client)
        if raw is None:  # closed before it was served: nothing to do
            return
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
            if self.on_connection_closed is not None:
                self.on_connection_closed(named_contexts())
        finally:
            set_peer("")


def _close(sock: Any) -> None:
    try:
        sock.close()
    except OSError:
        pass


class _ExclusiveServerSocket(TServerSocket):  # type: ignore[misc]
    """thriftpy2's server socket sets SO_REUSEPORT, which lets a second server bind the same
    port without an error and the kernel then splits the connections between the two: a
    reader's get_next could land on a BE that never saw its open_scanner. A port in use must
    fail the start instead (SO_REUSEADDR stays: restarts do not wait out TIME_WAIT)."""

    def _init_sock(self) -> None:
        super()._init_sock()
        sock = socket_of(self)
        if sock is not None and hasattr(socket, "SO_REUSEPORT") and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 0)


class ThriftServer:
    def __init__(self, handler: object, host: str, port: int, client_timeout_s: float | None = None,
                 max_read_bytes: int = 64 << 20, ssl_context: ssl.SSLContext | None = None,
                 reply_keepalive_s: float = 0.0, on_reply_begun: Callable[[], None] | None = None,
                 on_connection_closed: Callable[[set[str]], None] | None = None, role: str = "BE"):
        thriftpy2_internals.require()  # its subclassed internals as they were tested, or no BE
        self.socket = _ExclusiveServerSocket(host=host, port=port)  # timeouts are set per connection
        self.tls = ssl_context is not None
        self.role = role  # in its log lines
        # Java's TBinaryProtocol.Factory default: strict write, lenient read (docs/protocol.md 3),
        # so old-style requests without the 0x8001 version word are served too.
        replies = TCyBinaryProtocolFactory(strict_read=False, strict_write=True)
        self.keepalive = ReplyKeepAlive(reply_keepalive_s, on_reply_begun)
        self.server = _Server(
            _Processor(wire.TStarrocksExternalService, handler, replies, self.keepalive),
            self.socket,
            iprot_factory=request_protocol_factory(),
            oprot_factory=replies,
            daemon=True,
            max_read=max_read_bytes,
            ssl_context=ssl_context,
            # None = a reader may pause between calls as long as it likes.
            client_timeout_s=client_timeout_s,
            on_connection_closed=on_connection_closed,
        )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        sock = socket_of(self.socket)
        assert sock is not None  # bound in __init__'s listen
        return int(sock.getsockname()[1])

    def start(self) -> None:
        self.socket.listen()
        self.server.trans.listen = lambda: None  # already listening (port known before serve)
        self._thread = threading.Thread(target=self.server.serve, name=f"{self.role.lower().replace(' ', '-')}-thrift-accept",
                                        daemon=True)
        self._thread.start()
        log.info("%s thrift listening on %s:%d%s", self.role, self.socket.host, self.port, " (TLS)" if self.tls else "")

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
