"""One address in front of several BEs, as a TCP load balancer or a Kubernetes Service puts
it (not imported by starscan).

``TcpBalancer`` listens on 127.0.0.1 and hands each new connection to the next upstream in
turn (round robin), passing over one that refuses it (a BE that died). Bytes are piped both
ways; when either side closes, both are closed: a reader whose BE dies sees its connection
drop, as behind a real balancer. ``routed`` lists the upstream each connection went to.
"""

from __future__ import annotations

import socket
import threading


class TcpBalancer:
    def __init__(self, upstreams: list[tuple[str, int]]):
        self.upstreams = list(upstreams)
        self.routed: list[int] = []  # the upstream index of each connection, in order
        self._next = 0
        self._lock = threading.Lock()
        self._closed = False
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._socks: set[socket.socket] = set()
        threading.Thread(target=self._accept, name="balancer", daemon=True).start()

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        with self._lock:
            start = self._next
            self._next = (self._next + 1) % len(self.upstreams)
        for k in range(len(self.upstreams)):
            index = (start + k) % len(self.upstreams)
            try:
                upstream = socket.create_connection(self.upstreams[index], timeout=5)
            except OSError:
                continue  # that BE is down: the next one
            upstream.settimeout(None)
            with self._lock:
                self.routed.append(index)
                self._socks.update((client, upstream))
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            self._pipe(upstream, client)
            return
        client.close()  # no BE answers

    def _pipe(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            with self._lock:
                self._socks.discard(source)
                self._socks.discard(target)

    def close(self) -> None:
        self._closed = True
        self._server.close()
        with self._lock:
            socks = list(self._socks)
        for sock in socks:
            try:
                sock.close()
            except OSError:
                pass
