"""The relay port's thriftpy2 handler: its methods match the IDL and hand each call to the
ScanRelay with the port's BE (a port per BE, so connectors still group tablets per BE)."""

from __future__ import annotations

from typing import Any

from starscan.core.thrift_defs import wire
from starscan.planner.thrift_relay.scanners import ScanRelay
from starscan.thrift.peer import named_context


class RelayHandler:
    def __init__(self, relay: ScanRelay, port_index: int):
        self.relay = relay
        self.port_index = port_index

    # A call without its params struct reads as one with every field unset, as on the BE.

    def open_scanner(self, params: Any) -> Any:
        res = self.relay.open(self.port_index, params if params is not None else wire.TScanOpenParams())
        named_context(res.context_id or None)
        return res

    def get_next(self, params: Any) -> Any:
        params = params if params is not None else wire.TScanNextBatchParams()
        named_context(params.context_id if isinstance(params.context_id, str) else None)
        return self.relay.next(self.port_index, params)

    def close_scanner(self, params: Any) -> Any:
        return self.relay.close(params if params is not None else wire.TScanCloseParams())
