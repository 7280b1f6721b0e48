"""How far behind each consumer of an incremental read is (starscan.tables.consumers): the versions
and bytes appended to its table after the version it committed. The admin page lists them
and ``/metrics`` exports them as gauges, both computed when asked (a consumer's lag is only
as fresh as the table's listing).

A lag that cannot be told is said so instead of guessed: ``rewritten`` when the table was
rewritten after the committed version (the consumer must read it whole again), ``unknown``
when the committed version can no longer be placed (expired), or the error that stopped it
(the table is gone, its store does not answer).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

from cachetools import LRUCache
from prometheus_client.core import GaugeMetricFamily

from starscan.core.errors import StarscanError, TableRewritten, VersionUnknown
from starscan.tables.catalog import TableSnapshot, Warehouse
from starscan.tables.consumers import ConsumerPositions


@dataclass(frozen=True)
class ConsumerLag:
    table: str                    # db.table
    consumer: str
    committed_version: int
    table_version: int | None     # None: the table could not be read
    lag_versions: int | None      # versions appended after the committed one
    lag_bytes: int | None         # bytes of the data files appended after it
    committed_at: float           # seconds since the epoch
    state: str                    # "ok", "rewritten", "unknown", or what stopped it

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


_LAGS: LRUCache[tuple[str, str, int, int], tuple[int | None, int | None, str]] = LRUCache(maxsize=4096)
_LAGS_LOCK = threading.Lock()


def consumer_lags(warehouse: Warehouse, positions: ConsumerPositions) -> list[ConsumerLag]:
    out = []
    for p in positions.every():
        db, _, name = p.table.partition(".")
        current: int | None = None
        versions = nbytes = None
        try:
            snap = warehouse.snapshot(db, name)
            current = snap.version
            key = (p.location, p.consumer, p.version, current)
            with _LAGS_LOCK:
                known = _LAGS.get(key)
            if known is None:  # a lag is computed once per committed and current version
                known = _lag(warehouse, snap, p.version)
                with _LAGS_LOCK:
                    _LAGS[key] = known
            versions, nbytes, state = known
        except StarscanError as exc:
            state = exc.message[:200]
        except Exception as exc:  # noqa: BLE001 - one table's trouble must not hide the others' lag
            state = f"{type(exc).__name__}: {str(exc)[:200]}"
        out.append(ConsumerLag(p.table, p.consumer, p.version, current, versions, nbytes, p.committed_at, state))
    return out


def _lag(warehouse: Warehouse, snap: TableSnapshot, committed: int) -> tuple[int | None, int | None, str]:
    """(versions, bytes, state) of a consumer at ``committed`` behind the table in ``snap``."""
    try:
        added = warehouse.files_added_since(snap, committed)
    except TableRewritten:
        return None, None, "rewritten"
    except VersionUnknown:
        return None, None, "unknown"
    changes = warehouse.changes(snap)
    now, then = changes.order(snap.version), changes.order(committed)
    versions = now - then if now is not None and then is not None else None
    return versions, sum(f.size for f in added), "ok"


class ConsumerLagMetrics:
    """``starscan_consumer_lag_versions`` and ``starscan_consumer_lag_bytes`` per table and
    consumer, read at scrape time (consumers whose lag cannot be told are left out, and
    counted in ``starscan_consumers_lag_unknown``)."""

    def __init__(self, lags: Callable[[], list[ConsumerLag]]):
        self.lags = lags

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lags = self.lags()
        versions = GaugeMetricFamily("starscan_consumer_lag_versions",
                                     "Table versions appended after the consumer's committed version",
                                     labels=["table", "consumer"])
        nbytes = GaugeMetricFamily("starscan_consumer_lag_bytes",
                                   "Bytes of the data files appended after the consumer's committed version",
                                   labels=["table", "consumer"])
        unknown = GaugeMetricFamily("starscan_consumers_lag_unknown",
                                    "Consumers whose lag cannot be told (table rewritten, version expired, table gone)")
        for lag in lags:
            if lag.lag_versions is not None:
                versions.add_metric([lag.table, lag.consumer], lag.lag_versions)
            if lag.lag_bytes is not None:
                nbytes.add_metric([lag.table, lag.consumer], lag.lag_bytes)
        unknown.add_metric([], sum(1 for lag in lags if lag.state != "ok"))
        yield versions
        yield nbytes
        yield unknown
