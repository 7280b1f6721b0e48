"""The FE's Thrift relay (``thrift_relay_port``): readers that reach only the FE read the
BEs' scans through it, and a lost BE's scanners go on on another BE (scanners.py)."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Sequence

from starscan.planner.thrift_relay.handler import RelayHandler
from starscan.planner.thrift_relay.scanners import ScanRelay, connector
from starscan.thrift.server import ThriftServer

log = logging.getLogger("starscan.relay")


class ThriftRelay:
    """A relay port per BE of ``backends`` (``ports[i]`` for ``backends[i]``; 0: a free port)."""

    def __init__(self, backends: Sequence[str], live: Callable[[], Sequence[str]], host: str, ports: Sequence[int],
                 timeout_s: float, max_read_bytes: int, reply_keepalive_s: float,
                 server_tls: ssl.SSLContext | None = None, client_tls: ssl.SSLContext | None = None):
        self.relay = ScanRelay(backends, live, connector(timeout_s, client_tls))
        self.servers = [ThriftServer(RelayHandler(self.relay, i), host, port, max_read_bytes=max_read_bytes,
                                     ssl_context=server_tls, reply_keepalive_s=reply_keepalive_s,
                                     on_connection_closed=self.relay.abandoned, role="FE relay")
                        for i, port in enumerate(ports)]

    def start(self, listening: Callable[[int, Callable[[], None]], None]) -> None:
        """Each port started through ``listening(port, start)`` (the node's port errors)."""
        for server, backend in zip(self.servers, self.relay.backends, strict=True):
            listening(server.socket.port, server.start)
            log.info("FE thrift relay port %d -> BE %s", server.port, backend)

    @property
    def ports(self) -> list[int]:
        return [server.port for server in self.servers]

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        self.relay.stop()
