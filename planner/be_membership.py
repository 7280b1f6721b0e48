"""Which BEs are alive, for plans' routings: an FE probes every configured BE
(``be_endpoints``) and routes tablets only to the ones that answer.

A probe is a TCP connection to the BE's Thrift port, made every ``be_probe_interval_s``
with that same timeout: a BE process that died (even by SIGKILL) refuses it at once, one on
a host that is gone lets it time out. ``be_probe_failures`` failed probes in a row take a BE
out of the routings (within a few seconds); its next answered probe puts it back. A probe
is not a Thrift call on purpose: the BE's RPC metrics and audit count only readers.

Each tablet's routings list every live BE, starting at a different one per tablet
(``tablet_id`` modulo the number of live BEs), so readers that take the first routing (the
StarRocks connectors) or the least loaded one spread the tablets over all BEs, and a reader
whose BE fails has the others to go on with (StarRocks lists a tablet's replicas the same way).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Sequence

from starscan.core.errors import NoLiveBackend

log = logging.getLogger("starscan.membership")


def tcp_probe(endpoint: str, timeout_s: float) -> bool:
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


class BeMembership:
    def __init__(self, endpoints: Sequence[str], interval_s: float = 1.0, failures: int = 2,
                 probe: Callable[[str, float], bool] = tcp_probe):
        self.endpoints = tuple(endpoints)
        self.interval_s = interval_s
        self.failures = failures
        self._probe = probe
        self._failed = {e: 0 for e in self.endpoints}  # failed probes in a row
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def live(self) -> tuple[str, ...]:
        """The BEs in the routings now, in configured order."""
        with self._lock:
            return tuple(e for e in self.endpoints if self._failed[e] < self.failures)

    def routings_of(self, tablet_id: int, live: tuple[str, ...] | None = None) -> list[str]:
        """Every live BE, starting at the tablet's own one."""
        live = self.live() if live is None else live
        if not live:
            raise self.none_alive()
        start = tablet_id % len(live)
        return list(live[start:] + live[:start])

    def none_alive(self) -> NoLiveBackend:
        return NoLiveBackend(f"no BE answers: {', '.join(self.endpoints)} all failed their last {self.failures} "
                             "probes; start a BE (starscan serve --role be) or check be_endpoints")

    def probe_once(self) -> None:
        for endpoint in self.endpoints:
            ok = self._probe(endpoint, self.interval_s)
            with self._lock:
                before = self._failed[endpoint] < self.failures
                self._failed[endpoint] = 0 if ok else self._failed[endpoint] + 1
                after = self._failed[endpoint] < self.failures
            if before != after:
                log.warning("BE %s %s the routings", endpoint, "is back in" if after else "left")

    def start(self) -> BeMembership:
        self.probe_once()
        self._thread = threading.Thread(target=self._run, name="be-membership", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.probe_once()
            except Exception:  # noqa: BLE001 - the prober must keep going
                log.exception("BE probe failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
