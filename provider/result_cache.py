"""Result cache for repeated scans (StarRocks' query cache idea, for the external scan).

A repeated scan of the same plan content costs a whole Spark job again: Parquet -> rows ->
Arrow -> text dates, ~120 MB/s on two cores, while the reply bytes of the first scan could be
handed out again at the speed of the socket. So a scan that reaches eos with every row handed
out leaves its get_next replies (Arrow IPC streams, exactly the bytes the first reader got)
in a cache bounded in bytes; a later open_scanner with the same content is answered from
there, without Spark.

What makes two scans "the same content" is everything that decides the reply bytes: the
table's location, version and schema, every requested tablet's files with their size and
mtime (in the requested order), the output columns, the predicate, the batch size and the
server's time zone. The user, the query id and the plan's expiry are not part of it: a plan is
checked (signature, expiry, identity, grants, caps, files) before the cache is asked, so a
hit only ever serves a caller who may read those rows anyway. A new table version changes the
key, and the entries of a table's other versions are dropped as soon as a new one is seen.

Memory: the entries together stay under ``result_cache_max_bytes`` (LRU eviction); one entry
at most ``result_cache_max_entry_bytes``; scans still filling hold their replies against the
same budget, and a fill that would pass it is given up (the scan itself is unaffected).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

from cachetools import LRUCache

from starscan.security.users import grant_matches


@dataclass(frozen=True)
class CachedResult:
    """A scan's replies in order: (rows, IPC stream bytes) per get_next."""

    key: str
    location: str
    version: int
    replies: tuple[tuple[int, bytes], ...]
    rows: int
    nbytes: int


class CacheFill:
    """The replies of one scan on its way to the cache; ``None`` from ``add`` once given up."""

    __slots__ = ("cache", "key", "location", "version", "replies", "rows", "nbytes", "abandoned")

    def __init__(self, cache: ResultCache, key: str, location: str, version: int):
        self.cache, self.key, self.location, self.version = cache, key, location, version
        self.replies: list[tuple[int, bytes]] = []
        self.rows = self.nbytes = 0
        self.abandoned = False

    def add(self, rows: int, data: bytes) -> bool:
        """Keep one reply; False (and the fill is dropped) when it no longer fits."""
        if self.abandoned:
            return False
        if not self.cache._reserve(len(data), self.nbytes):
            self.abandon()
            return False
        self.replies.append((rows, data))
        self.rows += rows
        self.nbytes += len(data)
        return True

    def abandon(self) -> None:
        if not self.abandoned:
            self.abandoned = True
            self.cache._release(self.nbytes)
            self.replies = []

    def complete(self) -> None:
        """The scan reached eos with every row handed out: the entry goes into the cache."""
        if self.abandoned:
            return
        self.abandoned = True  # the fill is done either way
        self.cache._insert(CachedResult(self.key, self.location, self.version, tuple(self.replies), self.rows,
                                        self.nbytes), pending=self.nbytes)
        self.replies = []


class ResultCache:
    def __init__(self, max_bytes: int, max_entry_bytes: int, tables: list[str]):
        self._lock = threading.Lock()
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self.tables = list(tables)
        self._entries: LRUCache = LRUCache(maxsize=max(max_bytes, 1), getsizeof=lambda e: max(e.nbytes, 1))
        self._versions: dict[str, int] = {}  # table location -> newest version seen
        self._pending = 0
        self.hits = self.misses = self.evictions = self.inserts = 0

    # ---- configuration ----
    def configure(self, max_bytes: int, max_entry_bytes: int, tables: list[str]) -> None:
        """New limits (update_config): entries over the new size are evicted, oldest first."""
        with self._lock:
            self.max_bytes, self.max_entry_bytes, self.tables = max_bytes, max_entry_bytes, list(tables)
            old = self._entries
            self._entries = LRUCache(maxsize=max(max_bytes, 1), getsizeof=lambda e: max(e.nbytes, 1))
            if max_bytes > 0:
                for key, entry in list(old.items()):  # oldest first: the newest survive
                    if entry.nbytes <= self._entry_cap():
                        self._entries[key] = entry
            self.evictions += len(old) - len(self._entries)

    def enabled_for(self, db: str, table: str) -> bool:
        return self.max_bytes > 0 and any(grant_matches(p, db, table) for p in self.tables)

    def _entry_cap(self) -> int:
        return min(self.max_entry_bytes, self.max_bytes)

    # ---- lookups ----
    def get(self, key: str, location: str, version: int) -> CachedResult | None:
        with self._lock:
            self._note_version(location, version)
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
            else:
                self.hits += 1
            return entry

    def fill(self, key: str, location: str, version: int) -> CacheFill:
        return CacheFill(self, key, location, version)

    def drop_table(self, location: str) -> int:
        """Forget every entry of a table (its files changed under a scan)."""
        with self._lock:
            keys = [k for k, e in self._entries.items() if e.location == location]
            for k in keys:
                del self._entries[k]
            self.evictions += len(keys)
            return len(keys)

    # ---- numbers ----
    @property
    def nbytes(self) -> int:
        with self._lock:
            return int(self._entries.currsize)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    # ---- internals (CacheFill) ----
    def _note_version(self, location: str, version: int) -> None:
        """A table's version (a hash of its files, starscan/tables/catalog.py) changed: plans made
        from now on carry the new one, so the entries of the other versions go at once."""
        if self._versions.get(location) == version:
            return
        if len(self._versions) > 100_000:
            self._versions.clear()
        self._versions[location] = version
        stale = [k for k, e in self._entries.items() if e.location == location and e.version != version]
        for k in stale:
            del self._entries[k]
        self.evictions += len(stale)

    def _reserve(self, nbytes: int, already: int) -> bool:
        with self._lock:
            if already + nbytes > self._entry_cap() or self._pending + nbytes > self.max_bytes:
                return False
            self._pending += nbytes
            return True

    def _release(self, nbytes: int) -> None:
        with self._lock:
            self._pending -= nbytes

    def _insert(self, entry: CachedResult, pending: int) -> None:
        with self._lock:
            self._pending -= pending
            current = self._versions.get(entry.location)
            if current is not None and entry.version != current:
                return  # the table moved on while this scan ran
            if entry.nbytes > self._entry_cap() or entry.key in self._entries:
                return  # too large for the (new) limits, or a concurrent scan of the same content won
            before = len(self._entries)
            self._entries[entry.key] = entry  # LRUCache evicts the least recently used to make room
            self.inserts += 1
            self.evictions += max(0, before + 1 - len(self._entries))


class CacheMetrics:
    """prometheus-client collector: the cache's numbers at scrape time."""

    def __init__(self, cache_of):
        self.cache_of = cache_of

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        cache = self.cache_of()
        if cache is None:
            return
        for name, doc, value in (("hits", "Scans answered from the result cache", cache.hits),
                                 ("misses", "Cache-eligible scans that ran on Spark", cache.misses),
                                 ("evictions", "Result cache entries dropped (size, newer table version, changed files)",
                                  cache.evictions),
                                 ("inserts", "Completed scans stored in the result cache", cache.inserts)):
            yield CounterMetricFamily(f"starscan_result_cache_{name}", doc, value=value)
        yield GaugeMetricFamily("starscan_result_cache_bytes", "Bytes held by result cache entries", value=cache.nbytes)
        yield GaugeMetricFamily("starscan_result_cache_entries", "Result cache entries", value=len(cache))
        yield GaugeMetricFamily("starscan_result_cache_max_bytes", "result_cache_max_bytes", value=cache.max_bytes)


def cache_key(plan, plan_tablets: list, tablet_ids: list[int], batch_size: int, time_zone: str,
              ordered: bool = False) -> str:
    """Everything that decides a scan's reply bytes, hashed (see the module docstring).
    ``ordered``: rows in a fixed order (protocol_extensions.ORDERED_PROPERTY); an unordered
    scan's replies, in the order its tasks happened to finish, never answer an ordered one."""
    by_id = {t.tablet_id: t for t in plan_tablets}
    files = tuple((tid, tuple((f.path, f.size, f.mtime_ns, f.deletes) for f in by_id[tid].files),
                   by_id[tid].first_row_group, by_id[tid].row_groups) for tid in tablet_ids)
    columns = tuple((c.name, c.source, c.spark_type, c.primitive_type, c.nullable, c.is_slot_ref) for c in plan.columns)
    predicate = None
    if plan.predicate is not None:
        predicate = tuple((n.kind, n.num_children, n.name, n.literal_type, n.literal_value, n.negated, n.type_name)
                          for n in plan.predicate.nodes)
    content = (1, plan.table_location, plan.version, plan.table_schema, plan.schema_hash, files, columns, predicate,
               batch_size, time_zone, ordered)
    return hashlib.sha256(repr(content).encode("utf-8")).hexdigest()
