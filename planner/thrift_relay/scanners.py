"""The FE's Thrift relay: which BE each relayed scanner is on, and where it goes when that
BE is lost.

A reader that reaches only the FE (outside a Kubernetes cluster, behind a firewall) gets
plans whose routings name the FE's relay ports, one per BE (``thrift_relay_port`` + i for
``be_endpoints[i]``), so the StarRocks connectors still group tablets per BE and read them in
parallel. Each call to a relay port is sent on to a BE over a connection of the scanner's
own, and the BE's reply goes back unchanged (its rows are not decoded).

When the BE a scanner is on is lost (its connection fails or times out, or it no longer
knows the scanner), the relay sends the reader's ``get_next`` (the same offset) to the next
BE: a BE of the deployment resumes any scanner from the record its BE wrote in the shared
state_dir, at that offset (provider/resumable.py). The reader sees one slower reply: no
connector's retry, restart or routing is needed. An unknown context id (the FE restarted,
or another FE opened it) is looked for on the BEs the same way.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starscan.client.errors import is_lost
from starscan.client.protocol import thrift_client
from starscan.core.errors import BackendLost, NoLiveBackend
from starscan.core.protocol_extensions import ERROR_KIND_PROPERTY, asked
from starscan.core.thrift_defs import transport_errors, wire
from starscan.planner.thrift_relay.read_ahead import ReadAhead
from starscan.thrift import status

log = logging.getLogger("starscan.relay")


@dataclass
class RelayedScanner:
    """One reader's scanner as the relay sends it on: the BE it is on now and the
    connection to it that only this scanner's calls use."""

    context_id: str
    be: str
    conn: Any
    kinds: bool = False  # the reader asked for error kinds in its statuses (protocol_extensions)
    ahead: ReadAhead = field(default_factory=ReadAhead)
    lock: threading.Lock = field(default_factory=threading.Lock)
    moves: int = 0  # BEs it was resumed on after its BE was lost


Connect = Callable[[str], Any]


class ScanRelay:
    """``backends``: the BEs in configured order (a relay port's index is its BE's);
    ``live``: the ones the FE's probes find up now."""

    def __init__(self, backends: Sequence[str], live: Callable[[], Sequence[str]], connect: Connect):
        self.backends = tuple(backends)
        self._live = live
        self._connect = connect
        self._scanners: dict[str, RelayedScanner] = {}
        self._lock = threading.Lock()

    # ---- the three calls ----
    def open(self, port_index: int, params: Any) -> Any:
        """open_scanner on the port's BE, else the next live one that answers."""
        tried: list[str] = []
        for be in self._order(port_index):
            try:
                conn = self._connect(be)
                res = conn.open_scanner(params)
            except transport_errors() as exc:
                tried.append(f"{be} ({type(exc).__name__})")
                continue
            if res.status.status_code == wire.TStatusCode.SERVICE_UNAVAILABLE:
                _close(conn)
                tried.append(f"{be} (unavailable)")
                continue
            if res.status.status_code == wire.TStatusCode.OK and res.context_id:
                with self._lock:
                    self._scanners[res.context_id] = RelayedScanner(res.context_id, be, conn, asked(params.properties, ERROR_KIND_PROPERTY))
            else:
                _close(conn)
            return res
        error = NoLiveBackend(f"the FE's Thrift relay reached no BE for open_scanner: tried {', '.join(tried) or 'none'}"
                              " (be_endpoints)")
        return wire.TScanOpenResult(status=status.from_error(error, asked(params.properties, ERROR_KIND_PROPERTY)), context_id="",
                                    selected_columns=[])

    def next(self, port_index: int, params: Any) -> Any:
        context_id = params.context_id
        scanner = self._scanners.get(context_id) if isinstance(context_id, str) else None
        if scanner is None:
            return self._found(port_index, params)
        with scanner.lock:
            kept = scanner.ahead.kept(params.offset)
            if kept is not None:
                return kept  # the reader asks again for the reply it had
            ahead = scanner.ahead.take(params.offset)
            try:
                res = ahead.result() if ahead is not None else scanner.conn.get_next(params)
            except transport_errors() as exc:
                res = self._moved(port_index, scanner, params, f"{type(exc).__name__}: {exc}")
            else:
                if is_lost("get_next", res.status):
                    res = self._moved(port_index, scanner, params, "; ".join(res.status.error_msgs or []) or "lost")
            scanner.ahead.had(params.offset, res, scanner.conn, scanner.context_id)
            return res

    def close(self, params: Any) -> Any:
        context_id = params.context_id
        with self._lock:
            scanner = self._scanners.pop(context_id, None) if isinstance(context_id, str) else None
        if scanner is not None:
            with scanner.lock:
                scanner.ahead.drain()
                try:
                    scanner.conn.close_scanner(params)
                except transport_errors():
                    self._close_elsewhere(scanner.be, params)  # its record goes from every BE's view
                _close(scanner.conn)
        return wire.TScanCloseResult(status=status.ok())

    def abandoned(self, context_ids: set[str]) -> None:
        """The reader's connection to the relay ended with these scanners open: their BE
        connections end too, so that each BE sees its reader go (abandoned_scan_keep_alive_s);
        a reader that reconnects is found again on the BE (``_found``)."""
        with self._lock:
            gone = [self._scanners.pop(c) for c in context_ids if c in self._scanners]
        for scanner in gone:
            with scanner.lock:
                _close(scanner.conn)

    def stop(self) -> None:
        self.abandoned(set(self._scanners))

    # ---- where a scanner goes ----
    def _order(self, port_index: int, without: str | None = None) -> list[str]:
        """The live BEs, starting at the port's own one (then the others in configured order:
        as the plans' routings list them)."""
        live = set(self._live())
        ring = self.backends[port_index:] + self.backends[:port_index]
        order = [be for be in ring if be in live and be != without]
        return order or [be for be in ring if be != without]  # no probe answered, but a BE may

    def _moved(self, port_index: int, scanner: RelayedScanner, params: Any, why: str) -> Any:
        """The scanner's BE is lost: its get_next goes to the next BE, which resumes the scan
        from its record at the reader's offset."""
        lost = scanner.be
        _close(scanner.conn)
        log.warning("relay: the BE %s of context_id=%s is lost (%s): resuming it on another BE at offset %s", lost,
                    scanner.context_id, why, params.offset)
        for be in [*self._order(port_index, without=lost), lost]:  # the same BE last: a dropped connection
            try:
                conn = self._connect(be)
                res = conn.get_next(params)
            except transport_errors():
                continue
            if is_lost("get_next", res.status):
                _close(conn)
                continue
            scanner.be, scanner.conn, scanner.moves = be, conn, scanner.moves + 1
            log.info("relay: context_id=%s goes on on the BE %s at offset %s", scanner.context_id, be, params.offset)
            return res
        with self._lock:
            self._scanners.pop(scanner.context_id, None)
        error = BackendLost(f"context_id={scanner.context_id}: its BE {lost} was lost ({why}) and no other BE resumed "
                            "it: the BEs need resumable_scans on and one shared state_dir")
        return wire.TScanBatchResult(status=status.from_error(error, scanner.kinds))

    def _found(self, port_index: int, params: Any) -> Any:
        """A get_next for a scanner the relay does not hold: the first BE that holds it (or
        resumes it) answers."""
        last = None
        for be in self._order(port_index):
            try:
                conn = self._connect(be)
                res = conn.get_next(params)
            except transport_errors():
                continue
            if res.status.status_code == wire.TStatusCode.OK:
                found = RelayedScanner(params.context_id, be, conn)
                with found.lock:
                    with self._lock:
                        self._scanners[params.context_id] = found
                    found.ahead.had(params.offset, res, conn, found.context_id)
                return res
            _close(conn)
            last = res
            if not is_lost("get_next", res.status):
                return res  # the BE knows the scanner and refuses the call
        if last is not None:
            return last
        error = NoLiveBackend(f"context_id={params.context_id}: the FE's Thrift relay reached no BE (be_endpoints)")
        return wire.TScanBatchResult(status=status.from_error(error))

    def _close_elsewhere(self, lost: str, params: Any) -> None:
        for be in self._order(0, without=lost):
            try:
                conn = self._connect(be)
            except transport_errors():
                continue
            try:
                conn.close_scanner(params)
                return
            except transport_errors():
                continue
            finally:
                _close(conn)


def connector(timeout_s: float, ssl_context: ssl.SSLContext | None) -> Connect:
    """A new connection to a BE ``host:port`` (reads time out after ``timeout_s`` of silence;
    BEs keep slow replies alive far more often)."""

    def connect(be: str) -> Any:
        host, _, port = be.rpartition(":")
        return thrift_client(host, int(port), timeout_s, ssl_context, connect_timeout_s=min(timeout_s, 5.0))

    return connect


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a broken connection
        pass

