"""The push connection between a Spark task and the BE: how a task hands its split's rows
to the scanner that asked for them, with the JVM out of the data path.

Each task of a scan opens one connection to the BE's push listener and says hello:
the scan's secret token (random, per scan, carried only inside the task's closure), the
split (partition) it reads and its attempt. The BE answers one byte: ``G`` (go on) or
``S`` (nothing to send: the scan ended, or this split was delivered already). A task of the
``arrow`` engine names no split (``ANY_SPLIT``): the BE picks the next split nobody reads
and answers ``G`` and its number (4 bytes), or ``S`` when none is left; the task reads that
split, and asks again on a new connection when the split is done (provider/push/task.py),
then naming ``KEEP_SPLIT`` during its turn on its Spark slot and ``NEXT_SPLIT`` after: the
BE's scheduler (provider/scheduler.py) decides which split each gets, and answers ``S`` to
``NEXT_SPLIT`` while another scan's job waits for a Spark slot, so the task ends and its slot
goes round.
Then the task sends frames, each a kind byte and a 4-byte length before the payload:

* ``B``: one Arrow record batch in the wire types (an IPC message without the schema;
  the BE knows the scan's schema);
* ``E``: the split is done; the payload is the 8-byte count of rows the task sent in all,
  then the 8-byte count of rows it read from the split's files (before the predicate:
  starscan.arrow.read_stats; 0 when the task's reader does not count them);
* ``X``: the task failed; the payload is the reason in UTF-8 (the task raises as well).

At any time the BE may send one byte back: ``S`` (stop: the scan was closed or failed) or
``Y`` (yield: the reader has not read for a while and this task holds a Spark slot others
need; the split is read again later, skipping what was delivered). The task looks for it
before every frame and then ends normally, so a closed scan leaves no error in Spark's log.
The socket's flow control is the backpressure: when the scanner's queue is full the BE
stops reading, and the task blocks in ``send``.

The connection is TCP, or a Unix socket when the BE offers one and the task can reach it
(Spark runs on the BE's own machine): the same frames, about a third less kernel CPU per
byte (a local TCP connection costs ~90 ms of CPU per 200 MB, a Unix socket ~65; lineitem is
~200 bytes a row in the wire types).

Runs inside Spark's Python workers as well as in the BE: standard library and pyarrow only.
"""

from __future__ import annotations

import os
import select
import socket
import struct

import pyarrow as pa

MAGIC = b"SSPUSH1\n"
TOKEN_BYTES = 32
HELLO = struct.Struct(">8s32sII")   # magic, token, split, attempt
FRAME = struct.Struct(">cI")        # kind, payload length
ROWS = struct.Struct(">Q")
ROWS_AND_READ = struct.Struct(">QQ")  # an end frame: rows sent, rows read from files

ANY_SPLIT = 0xFFFFFFFF               # the hello's split: the BE assigns one
NEXT_SPLIT = 0xFFFFFFFE              # the same, from a task whose turn on its slot is over
KEEP_SPLIT = 0xFFFFFFFD              # the same, from a task still in its turn: never handed over
ASSIGNED = (ANY_SPLIT, NEXT_SPLIT, KEEP_SPLIT)  # the hellos the BE picks a split for
SPLIT_NO = struct.Struct(">I")      # the split the BE assigned

BATCH, END, ERROR = b"B", b"E", b"X"
GO, STOP, YIELD = b"G", b"S", b"Y"

CONNECT_TIMEOUT_S = 30.0


class PushUnreachable(ConnectionError):
    """A task could not connect to the BE's push address: the scan fails with this message."""


class PushStopped(Exception):
    """The BE said stop or yield: the task ends its split early, normally."""


def recv_exact(sock: socket.socket, n: int) -> bytearray | None:
    """Exactly ``n`` bytes, or None when the peer closed before sending them."""
    buf = bytearray(n)
    return buf if _recv_into(sock, memoryview(buf), n) else None


def recv_arrow_buffer(sock: socket.socket, n: int) -> pa.Buffer | None:
    """As ``recv_exact``, into a buffer of Arrow's memory pool, which a batch read from it
    keeps: queued batches then live in that pool, not in the C heap, and the server's peak
    RSS in bench/compare.py fell by 60 MB (docs/architecture.md, "Memory")."""
    buf = pa.allocate_buffer(n)
    return buf if _recv_into(sock, memoryview(buf), n) else None


def _recv_into(sock: socket.socket, view: memoryview, n: int) -> bool:
    got = 0
    while got < n:  # MSG_WAITALL: one call for the whole frame unless a signal interrupts it
        k = sock.recv_into(view[got:], n - got, socket.MSG_WAITALL)
        if k == 0:
            return False
        got += k
    return True


def _connect(host: str, port: int, local_path: str | None) -> socket.socket:
    """The BE's Unix socket at ``local_path`` when this task runs on the BE's machine (the
    path exists here and answers), else TCP to ``host:port``."""
    if local_path is not None and hasattr(socket, "AF_UNIX") and os.path.exists(local_path):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(local_path)
            return sock
        except OSError:
            sock.close()
    try:
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise PushUnreachable(f"this Spark task (on {socket.gethostname()}) cannot reach the BE's push address "
                              f"{host}:{port}: {exc}; the BE's advertise_host and push_port must be reachable "
                              "from every Spark executor") from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class TaskSender:
    """The task side of one push connection."""

    def __init__(self, host: str, port: int, token: bytes, split: int, attempt: int, local_path: str | None = None):
        self.sock = _connect(host, port, local_path)
        self.sock.settimeout(None)  # a full scanner queue may hold a send for long: that is backpressure
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)  # little in flight past the BE's queue
        self.sock.sendall(HELLO.pack(MAGIC, token, split, attempt))
        answer = recv_exact(self.sock, 1)
        self.go = answer == GO
        self.split = split
        if self.go and split in ASSIGNED:
            assigned = recv_exact(self.sock, SPLIT_NO.size)
            self.go = assigned is not None
            if assigned is not None:
                (self.split,) = SPLIT_NO.unpack(assigned)
        self.rows = 0

    def _check(self) -> None:
        readable, _, _ = select.select([self.sock], [], [], 0)
        if readable:
            raise PushStopped(bytes(self.sock.recv(1)))

    def send(self, batch: pa.RecordBatch) -> None:
        """Send one batch; raises PushStopped when the BE wants no more."""
        self._check()
        payload = batch.serialize()
        self.sock.sendall(FRAME.pack(BATCH, payload.size))
        self.sock.sendall(payload)
        self.rows += batch.num_rows

    def end(self, rows_read: int = 0) -> None:
        """Send the split's end (``rows_read``: rows the task read from the split's files) and
        wait until the BE has taken every frame; PushStopped when
        the BE had said stop or yield meanwhile (then it did not count the end, and the task,
        which may go on to another split, must not)."""
        self.sock.sendall(FRAME.pack(END, ROWS_AND_READ.size) + ROWS_AND_READ.pack(self.rows, rows_read))
        said = self._wait_closed()
        for answer in (STOP, YIELD):
            if answer in said:
                raise PushStopped(answer)

    def error(self, reason: str) -> None:
        data = reason.encode("utf-8", "replace")[:8192]
        try:
            self.sock.sendall(FRAME.pack(ERROR, len(data)) + data)
        except OSError:
            pass

    def _wait_closed(self) -> bytes:
        """After the last frame the BE closes the connection: wait for that, so the task
        ends only when the BE has taken every frame (never a split ended in Spark whose
        rows are still in a socket buffer). What the BE sent before closing."""
        said = bytearray()
        try:
            while data := self.sock.recv(64):
                said += data[:16]  # a stop or a yield: one byte each
        except OSError:
            pass
        return bytes(said)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def send_quietly(sock: socket.socket, data: bytes) -> None:
    """Send ``data`` if the peer is still there (a stop or yield to a task that has gone)."""
    try:
        sock.sendall(data)
    except OSError:
        pass


def drain(sock: socket.socket) -> None:
    """Read and drop what the peer still sends until it closes."""
    try:
        while sock.recv(1 << 16):
            pass
    except OSError:
        pass
