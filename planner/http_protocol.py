"""The FE's HTTP/1.1 connections: uvicorn's httptools protocol, with a bound on a request's head.

httptools (a C parser) costs the FE about a quarter less CPU per `_query_plan` than h11
(bench/RESULTS.md), but unlike h11 it keeps buffering a request line or header that never
ends. Here a request whose head (request line and headers) passes ``MAX_HEAD_BYTES`` is
answered 431 and its connection closed, so one client cannot make the FE hold more than
that (plus one read of the socket) however long it sends.
"""

from __future__ import annotations

from starscan.planner.uvicorn_internals import HttpToolsProtocol

MAX_HEAD_BYTES = 1 << 20


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._in_head = False
        self._head_bytes = 0

    def on_message_begin(self) -> None:
        self._in_head, self._head_bytes = True, 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_head and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse_head()

    def _refuse_head(self) -> None:
        msg = f"request line and headers are larger than {MAX_HEAD_BYTES} bytes".encode("ascii")
        self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                             b"content-type: text/plain; charset=utf-8\r\n"
                             b"content-length: " + str(len(msg)).encode("ascii") + b"\r\n"
                             b"connection: close\r\n\r\n" + msg)
        self.transport.close()
