"""The warehouse's cache of its folder tables' listings: when a table is listed again, and who
waits for it.

A cached listing is used while the table directory itself is unchanged (files added or
removed at the top level, or the directory replaced, show at once); changes deeper in
partition folders, and files rewritten in place, show when the TTL runs out. A listing that
ran out less than a TTL ago is still answered while one caller's thread lists the table
again in the background, an older one only after the new listing; callers that come while a
table is listed wait for that one listing. An object store has no folder stamps and every
question costs a request: there a listing is used for the TTL, as it is.

Listing again a local folder table whose folders did not change stats its files instead of
walking (a file rewritten in place changes no folder), and that at most once per
``FILES_CHECK_SPACING`` times the last such pass took; otherwise only the folders that
changed are read again. What a listing is made of is the warehouse's (``build``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import LRUCache

from starscan.core.collector import collector_paused
from starscan.storage.stores import Storage
from starscan.tables.folder_files import FolderFiles
from starscan.tables.snapshot import TableSnapshot

log = logging.getLogger("starscan.tables.catalog")

#: A listing's files are stat'ed again (for rewrites in place) at most once per this many
#: times the last such pass took: a tenth of a core at most. A table's folders are checked
#: at every listing. A million files' pass took 6 s on a slow 2-core machine, longer than
#: the listing TTL: every file was stat'ed again and again, and a caller waited for it.
FILES_CHECK_SPACING = 10

_stopwatch = time.monotonic  # times those passes (tests replace it alone)

#: Lists a table: given the listing before (None: none) and its folders to read again only
#: where they changed (None: a full walk), the new snapshot and its folders.
Build = Callable[[TableSnapshot | None, FolderFiles | None], tuple[TableSnapshot, FolderFiles | None]]


@dataclass(frozen=True)
class Listing:
    stamp: int            # the table directory's mtime when listed
    listed_at: float      # the cache's clock (time.monotonic())
    snapshot: TableSnapshot
    folders: FolderFiles | None = None  # a local folder table: its folders and their files, for the next listing
    files_checked: float = 0.0  # when every file was last stat'ed (the cache's clock): by a full walk or a check
    check_s: float = 0.0        # seconds that took


class ListingCache:
    """Listings of the tables under ``storage`` by location, for ``ttl_s`` seconds of
    ``clock`` (0: never cached)."""

    def __init__(self, storage: Storage, ttl_s: float, clock: Callable[[], float]):
        self.storage = storage
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._listings: LRUCache[str, Listing] = LRUCache(maxsize=4096)  # table location -> Listing
        self.refreshing: dict[str, threading.Event] = {}  # table location -> set when listed
        self._generation = 0  # counts invalidations

    def within_ttl(self, location: str) -> TableSnapshot | None:
        """An object store's table: its listing while younger than the TTL."""
        with self._lock:
            cached = self._listings.get(location)
            if cached is not None and self.clock() - cached.listed_at < self.ttl_s:
                return cached.snapshot
        return None

    def snapshot(self, location: str, stamp: int, build: Build) -> TableSnapshot:
        """The table at ``location`` whose directory has ``stamp``: from the cache, or listed
        (by this caller, or by the one already listing it)."""
        waited = False
        while True:
            now = self.clock()
            with self._lock:
                at_hand = self._at_hand(location, stamp, now, build)
                if at_hand is not None:
                    return at_hand
                cached = self._listings.get(location)
                same = cached if cached is not None and cached.stamp == stamp else None
                if same is not None and waited:
                    return same.snapshot  # listed while this caller waited for it
                refreshing = self.refreshing.get(location)
                if refreshing is None:
                    refreshing = self.refreshing[location] = threading.Event()
                    generation = self._generation
                    break  # this caller lists the table and waits for it
                if same is not None:
                    # Another caller is listing the table again after its TTL: this listing is
                    # as good as it was a moment ago (50 callers listing a 10,000-file table at
                    # once took over a second each).
                    return same.snapshot
            refreshing.wait()  # the directory changed: wait for the one listing under way
            waited = True
        return self._relist(location, stamp, now, generation, refreshing, build)

    def at_hand(self, location: str, stamp: int, build: Build) -> TableSnapshot | None:
        """The cached listing when it answers now without anyone waiting (it never blocks for
        long: an event loop may ask it)."""
        with self._lock:
            return self._at_hand(location, stamp, self.clock(), build)

    def clear(self) -> None:
        """Forget every listing (new tablet sizes); listings under way are not kept."""
        with self._lock:
            self._generation += 1
            self._listings.clear()

    def forget(self, location: str) -> None:
        """Forget one table's listing (this process wrote it); one under way is not kept."""
        with self._lock:
            self._generation += 1
            self._listings.pop(location, None)

    # ---- under the lock, or listing ----
    def _at_hand(self, location: str, stamp: int, now: float, build: Build) -> TableSnapshot | None:
        """Under the lock: the cached listing when it answers now without anyone waiting. It
        is fresh, or it ran out less than a TTL ago: then it is listed again behind the
        answer (under load, the caller that listed a 10,000-file table itself waited ~0.4 s;
        bench/RESULTS.md, plan_latency)."""
        cached = self._listings.get(location)
        if cached is None or cached.stamp != stamp:
            return None
        age = now - cached.listed_at
        if age >= 2 * self.ttl_s:
            return None
        if age >= self.ttl_s and location not in self.refreshing:
            refreshing = self.refreshing[location] = threading.Event()
            threading.Thread(target=self._relist_quietly, name="starscan-listing", daemon=True,
                             args=(location, stamp, now, self._generation, refreshing, build)).start()
        return cached.snapshot

    def _relist_quietly(self, location: str, stamp: int, now: float, generation: int, refreshing: threading.Event,
                        build: Build) -> None:
        """``_relist`` in the background: a failure is the next caller's to meet (the
        listing it answered from runs out)."""
        try:
            self._relist(location, stamp, now, generation, refreshing, build)
        except Exception:  # noqa: BLE001 - the next synchronous listing reports it
            log.debug("background listing failed", exc_info=True)

    def _relist(self, location: str, stamp: int, now: float, generation: int, refreshing: threading.Event,
                build: Build) -> TableSnapshot:
        """List the table, keep the listing unless it was invalidated meanwhile, and wake the
        callers waiting for it."""
        try:
            with self._lock:
                before = self._listings.get(location)
            kept = before.folders if before is not None else None
            due = before is None or now - before.files_checked >= FILES_CHECK_SPACING * before.check_s
            checked, check_s = now, 0.0
            reused = False
            if kept is not None and self._folders_unchanged(kept):
                assert before is not None
                if not due:
                    reused, checked, check_s = True, before.files_checked, before.check_s
                else:
                    started = _stopwatch()
                    reused = self._files_unchanged(location, before)
                    check_s = _stopwatch() - started
            folders: FolderFiles | None
            if reused:
                assert before is not None
                snap, folders = before.snapshot, kept
            else:
                # A full walk stat-s every file; one from the listing before reads only the
                # folders that changed, until every file is due to be stat-ed again.
                incremental = kept is not None and not due
                started = _stopwatch()
                with collector_paused():
                    snap, folders = build(before.snapshot if before is not None else None,
                                          kept if incremental else None)
                if incremental:
                    assert before is not None
                    checked, check_s = before.files_checked, before.check_s
                else:
                    check_s = _stopwatch() - started
            with self._lock:
                if generation == self._generation:  # not invalidated while it was listed
                    self._listings[location] = Listing(stamp, now, snap, folders, checked, check_s)
            return snap
        finally:
            with self._lock:
                self.refreshing.pop(location, None)
            refreshing.set()

    def _folders_unchanged(self, listed: FolderFiles) -> bool:
        """Whether a local folder table's folders hold the same names as when listed, asked
        with a stat of each: a folder whose entries changed has a new modification time."""
        storage = self.storage
        return all(storage.dir_stamp(folder) == stamp.mtime_ns for folder, stamp in listed.folders.items())

    def _files_unchanged(self, location: str, listing: Listing) -> bool:
        """Whether every listed file has its listed size and time (a file rewritten in place
        under its name changes no folder): a stat of each instead of a walk. A 10,000-file
        table is checked with a third of a listing's CPU (bench/RESULTS.md, plan_latency)."""
        storage = self.storage
        return all(storage.file_identity(storage.join(location, f.path)) == (f.size, f.mtime_ns)
                   for f in listing.snapshot.files)
