"""Fault injection for the reliability tests and `bench/soak.py` (not imported by starscan).

``FaultProxy`` is a TCP proxy on 127.0.0.1 in front of the BE's Thrift port. A reader that
connects through it can lose its connection for real:

- ``cut_next_reply()``: the next reply the BE sends (on any connection) is swallowed and both
  sides of that connection are closed. The BE has sent its reply and advanced; the reader never
  got it: a lost reply.
- ``cut_probability``: every chunk the BE sends is, with this probability, cut: a random prefix
  of it is delivered, then both sides are closed (drops anywhere, also in the middle of a reply).

Counters: ``connections``, ``cuts``. Stop with ``close()``.
"""

from __future__ import annotations

import random
import socket
import threading


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], cut_probability: float = 0.0, seed: int | None = None):
        self.upstream = upstream
        self.cut_probability = cut_probability
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._armed = 0
        self._closed = False
        self._socks: set[socket.socket] = set()
        self.connections = 0
        self.cuts = 0
        self.cut_event = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._thread.start()

    # ---- control ----
    def cut_next_reply(self, count: int = 1) -> None:
        with self._lock:
            self._armed += count
            self.cut_event.clear()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks = list(self._socks)
        try:
            self._listener.close()
        except OSError:
            pass
        for s in socks:
            _kill(s)
        self._thread.join(5)

    # ---- plumbing ----
    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream, timeout=30)
                up.settimeout(None)
                for end in (client, up):  # forward each write at once, as the direct path would
                    end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                _kill(client)
                continue
            with self._lock:
                if self._closed:
                    _kill(client), _kill(up)
                    return
                self.connections += 1
                self._socks.update((client, up))
            pair = (client, up)
            threading.Thread(target=self._pump, args=(client, up, pair, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, client, pair, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, pair, from_server: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_server:
                    with self._lock:
                        cut = self._armed > 0
                        if cut:
                            self._armed -= 1
                            keep = 0
                        elif self.cut_probability and self._rng.random() < self.cut_probability:
                            cut, keep = True, self._rng.randrange(len(data))
                    if cut:
                        if keep:
                            dst.sendall(data[:keep])
                        with self._lock:
                            self.cuts += 1
                        self.cut_event.set()
                        break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in pair:
                _kill(s)
            with self._lock:
                self._socks.difference_update(pair)


def _kill(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), as a killed process's socket would. shutdown() first:
    a plain close() neither wakes another thread blocked in recv() nor reaches the peer."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
