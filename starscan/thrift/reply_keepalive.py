"""Replies begun before they are ready, so a reader's socket read timeout never fires while
the BE works on its answer.

Readers of the external scan protocol put a read timeout on their socket: the StarRocks
Flink connector uses ``scan.connect.timeout-ms`` (1 s by default, no retry) as Java's
``SO_TIMEOUT``, which bounds the wait for the *next bytes*, not a call's length. Any call
that takes a second (a first ``get_next`` while Spark starts, a filter that has found no
row yet, a machine loaded by other work) failed the reader's whole job. An empty batch
cannot stand in for rows not ready: the Flink connector ends its read at a batch without
rows.

So a call whose reply is not ready ``interval_s`` after it arrived has its reply begun: the
message header, then every ``interval_s`` one field of the result struct that no version
of the IDL has (``KEEPALIVE_FIELD_ID``, a bool). Thrift's rule for fields a reader does not
know is to skip them: the generated code of every language (Java's ``TProtocolUtil.skip``,
Apache Thrift's and thriftpy2's Python) passes over it. When the call returns, the rest of
the reply follows: the fields it would have had, in the same bytes. The reader receives
one valid reply, later; no row is held back or lost, and a reply that is ready in time is
not changed by a byte.

One thread (``ReplyKeepAlive``) sends for every connection whose call is slow; the
connection's own thread is the only writer once its call has returned (``Pending.finish``).
Sends from the keep-alive thread never block: what a full socket buffer does not take now
is sent before the rest of the reply.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("starscan.provider")

#: A field id in no version of the external-service IDL: readers skip it (docs/protocol.md).
KEEPALIVE_FIELD_ID = 32000
_BOOL = 2
KEEPALIVE_FIELD = struct.pack(">bhb", _BOOL, KEEPALIVE_FIELD_ID, 0)


class Pending:
    """One call in progress on one connection: what of its reply was sent early."""

    __slots__ = ("sock", "header", "due", "lock", "begun", "unsent", "done", "broken", "sent_fields")

    def __init__(self, sock: Any, header: Callable[[], bytes], due: float):
        self.sock = sock
        self.header = header
        self.due = due
        self.lock = threading.Lock()
        self.begun = False       # the header went out (or is in ``unsent``): the reply is committed
        self.unsent = b""        # bytes of the begun reply a full socket did not take yet
        self.done = False
        self.broken = False      # the peer is gone: nothing more is sent early
        self.sent_fields = 0

    def tick(self) -> None:
        """Send the header (first time) and one skippable field; called by the keep-alive thread."""
        with self.lock:
            if self.done or self.broken:
                return
            data = self.unsent + (KEEPALIVE_FIELD if self.begun else self.header() + KEEPALIVE_FIELD)
            self.begun = True
            self.sent_fields += 1
            left = _send_now(self.sock, data)
            if left is None:
                self.broken = True
            self.unsent = left or b""

    def finish(self) -> bytes | None:
        """The call returned: no more early sends. None when nothing was begun (the reply is
        written as usual), else the bytes of the begun reply still to be sent before its rest."""
        with self.lock:
            self.done = True
            if not self.begun:
                return None
            return self.unsent


def _send_now(sock: Any, data: bytes) -> bytes | None:
    """Send what the socket takes without waiting; the rest, or None when the peer is gone."""
    try:
        if isinstance(sock, ssl.SSLSocket):
            sock.sendall(data)  # a TLS socket has no non-blocking flag per call; these are a few bytes
            return b""
        sent = sock.send(data, socket.MSG_DONTWAIT)
        return data[sent:]
    except (BlockingIOError, InterruptedError):
        return data
    except OSError:
        return None


class ReplyKeepAlive:
    """The thread that begins slow replies and keeps them alive (module docstring).
    ``interval_s`` 0: off (``begin`` returns None)."""

    def __init__(self, interval_s: float, on_begun: Callable[[], None] | None = None):
        self.interval_s = interval_s
        self.on_begun = on_begun  # called as each begun reply is finished (a metric)
        self._calls: dict[int, Pending] = {}
        self._lock = threading.Lock()
        self._work = threading.Event()
        self._thread: threading.Thread | None = None
        self.replies_begun = 0  # calls whose reply was begun early (a metric's source)

    def begin(self, sock: Any, header: Callable[[], bytes]) -> Pending | None:
        """A call starts on ``sock``; ``header()``: its reply's message header, as it will be written."""
        if self.interval_s <= 0 or sock is None:
            return None
        pending = Pending(sock, header, time.monotonic() + self.interval_s)
        with self._lock:
            self._calls[id(pending)] = pending
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="be-reply-keepalive", daemon=True)
                self._thread.start()
            self._work.set()
        return pending

    def end(self, pending: Pending) -> bytes | None:
        """The call returned: see ``Pending.finish``."""
        with self._lock:
            self._calls.pop(id(pending), None)
        unsent = pending.finish()
        if unsent is not None:
            self.replies_begun += 1
            if self.on_begun is not None:
                self.on_begun()
        return unsent

    def _run(self) -> None:
        while True:
            self._work.wait()
            time.sleep(max(self.interval_s, 0.01) / 4)
            now = time.monotonic()
            with self._lock:
                if not self._calls:
                    self._work.clear()
                    continue
                due = [p for p in self._calls.values() if p.due <= now]
            for pending in due:
                pending.due = now + self.interval_s
                try:
                    pending.tick()
                except Exception:  # noqa: BLE001 - one connection's trouble is its own
                    log.debug("reply keep-alive failed", exc_info=True)
                    pending.broken = True


__all__ = ["KEEPALIVE_FIELD_ID", "Pending", "ReplyKeepAlive"]
