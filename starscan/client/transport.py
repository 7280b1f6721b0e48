"""The client's Thrift transport to a BE: a ``get_next`` reply's rows arrive straight in a
buffer of Arrow's memory pool.

thriftpy2's Cython transport reads a binary field of a reply through its read buffer: the
socket's bytes object, copied into the buffer (grown to the field's size), copied out into
a scratch area and copied again into the bytes object the field becomes. A reply carries
~0.8 MB of Arrow for 4,096 rows of TPC-H lineitem, so a scan of a million rows copied about
600 MB in the reader's process besides the kernel's own copy. Here a read larger than
``DIRECT_READ_BYTES`` goes from the socket into one ``pa.allocate_buffer`` buffer, which the
field then is when it holds Arrow IPC: ``pa.ipc.open_stream`` reads its batch from it
without another copy. Smaller
reads (the message and field headers, the status) come from a read buffer, as before.

It runs under thriftpy2's pure-Python binary protocol (the Cython protocol reads only from
Cython transports), which passes a binary field on as the transport returned it. The calls
of a scan are few and small, so the Python protocol costs microseconds per call.

Imported by ``starscan.client.protocol.thrift_client`` only, with thriftpy2, under one lock
(a direct reader never loads thriftpy2).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from thriftpy2.transport import TTransportException

from starscan.core.thriftpy2_internals import socket_of

#: Reads at least this large bypass the read buffer (a reply's rows; headers are bytes).
DIRECT_READ_BYTES = 64 << 10
IPC_CONTINUATION = b"\xff\xff\xff\xff"
READ_BUFFER_BYTES = 64 << 10


class ArrowReadTransport:
    """A buffered transport over thriftpy2's ``TSocket`` (``trans``); the same errors as
    thriftpy2's own transports for a closed or broken connection."""

    def __init__(self, trans: Any):
        self._trans = trans
        self._rbuf = bytearray(READ_BUFFER_BYTES)
        self._rview = memoryview(self._rbuf)
        self._start = self._end = 0  # unread bytes: _rbuf[_start:_end]
        self._wbuf = bytearray()

    # ---- the transport interface thriftpy2's client and protocol use ----
    def is_open(self) -> bool:
        return bool(self._trans.is_open())

    def open(self) -> None:
        self._trans.open()

    def close(self) -> None:
        self._start = self._end = 0
        self._trans.close()

    def write(self, data: bytes) -> None:
        self._wbuf += data

    def flush(self) -> None:
        data, self._wbuf = bytes(self._wbuf), bytearray()
        self._trans.write(data)

    def read(self, size: int) -> bytes | pa.Buffer:
        if size >= DIRECT_READ_BYTES:
            return self._read_direct(size)
        while self._end - self._start < size:
            self._fill()
        out = bytes(self._rview[self._start:self._start + size])
        self._start += size
        return out

    # ---- internals ----
    def _fill(self) -> None:
        """Receive what the socket has into the read buffer, after what is unread there."""
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == len(self._rbuf):  # move the unread bytes to the front
            unread = self._end - self._start
            self._rview[:unread] = self._rview[self._start:self._end]
            self._start, self._end = 0, unread
        self._end += self._recv_into(self._rview[self._end:])

    def _read_direct(self, size: int) -> bytes | pa.Buffer:
        out = pa.allocate_buffer(size)
        view = memoryview(out).cast("B")  # a writable Arrow buffer, as bytes
        have = min(size, self._end - self._start)
        view[:have] = self._rview[self._start:self._start + have]
        self._start += have
        while have < size:
            have += self._recv_into(view[have:])
        # Arrow IPC (a reply's rows) opens with the continuation marker 0xFFFFFFFF, which no
        # UTF-8 text does: anything else (a long status message) is bytes, which the protocol
        # decodes as text.
        return out if bytes(view[:4]) == IPC_CONTINUATION else out.to_pybytes()

    def _recv_into(self, view: memoryview) -> int:
        """Socket errors and timeouts pass as thriftpy2's TSocket lets them; a closed
        connection is its END_OF_FILE."""
        sock = socket_of(self._trans)
        if sock is None:
            raise TTransportException(type=TTransportException.NOT_OPEN, message="Transport not open")
        got = sock.recv_into(view)
        if got == 0:
            raise TTransportException(type=TTransportException.END_OF_FILE, message="TSocket read 0 bytes")
        return int(got)


class ArrowReadTransportFactory:
    def get_transport(self, trans: Any) -> ArrowReadTransport:
        return ArrowReadTransport(trans)
