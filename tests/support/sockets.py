"""What a writer puts on a real socket, read back by a thread at the other end."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


def sent_bytes(write: Callable[[socket.socket], object], recv_size: int = 1 << 16,
               send_timeout_s: float | None = None) -> bytes:
    """Every byte ``write(sock)`` sends on one end of a socket pair, until it returns; the
    other end is read ``recv_size`` bytes at a time (small: the sender's buffer fills)."""
    ours, theirs = socket.socketpair()
    ours.settimeout(send_timeout_s)
    got = bytearray()

    def drain():
        while chunk := theirs.recv(recv_size):
            got.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        write(ours)
    finally:
        ours.close()
        reader.join(10)
        theirs.close()
    return bytes(got)


def closed_without_a_word(s: socket.socket) -> bool:
    """The peer closed the connection sending nothing (a reset counts: data was unread)."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    finally:
        s.close()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the peer sends until it closes (a reset ends it too)."""
    data = bytearray()
    try:
        while chunk := sock.recv(65536):
            data.extend(chunk)
    except (ConnectionResetError, OSError):
        pass
    return bytes(data)
