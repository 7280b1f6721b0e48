"""The warehouse: databases, tables, their files, tablets and versions.

Layout is Spark's own (``spark.sql.warehouse.dir``): database ``d`` is ``<warehouse>/d.db``,
table ``t`` of it is ``<warehouse>/d.db/t`` (the ``default`` database lives in the root),
so a table written by any Spark job (``saveAsTable`` or ``write.parquet`` into that path)
is served as it is. The directory tree is the persistent catalog.

Tablets are splits of the table's files (starscan.tables.tablets): small files of a partition packed
together, a large file cut into runs of row groups; their ids are stable hashes of the files'
identities. A table's version is a 31-bit hash of its file set: it changes whenever a file is
added, removed or rewritten.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

from starscan.core.collector import collector_paused
from starscan.core.errors import (
    DatabaseNotFound,
    StarscanError,
    StorageUnavailable,
    TableNotFound,
    TableRewritten,
    TableUnreadable,
)
from starscan.storage.files import is_hidden
from starscan.storage.hadoop_paths import partition_of
from starscan.storage.stores import Storage, local_path, open_storage
from starscan.tables.catalog_tables import CatalogTable, TableCatalog
from starscan.tables.changes import FolderChanges, TableChanges
from starscan.tables.delta import DELTA_LOG, DeltaChanges, read_delta
from starscan.tables.folder_files import DataFile, FolderFiles, Partition, list_folder_table, list_table_files
from starscan.tables.iceberg import IcebergTables
from starscan.tables.snapshot import TableSnapshot

if TYPE_CHECKING:
    from starscan.arrow.nested import FileName
    from starscan.settings.config import Settings
from starscan.tables.file_columns import RELEASE_FILES, release_unused
from starscan.tables.tablets import FOOTERS, DataFileLike, RowGroup, Sizing, Tablet, split_files, split_partitions
from starscan.tables.versions import VersionHistory

log = logging.getLogger("starscan.tables.catalog")

#: A listing's files are stat'ed again (for rewrites in place) at most once per this many
#: times the last such pass took: a tenth of a core at most. A table's folders are checked
#: at every listing. A million files' pass took 6 s on a slow 2-core machine, longer than
#: the listing TTL: every file was stat'ed again and again, and a caller waited for it.
FILES_CHECK_SPACING = 10

_stopwatch = time.monotonic  # times those passes (tests replace it alone)

__all__ = ["DataFile", "Tablet", "TableSnapshot", "Warehouse", "list_table_files", "partition_of"]

DEFAULT_DB = "default"
DB_SUFFIX = ".db"


@dataclass(frozen=True)
class _Listing:
    stamp: int            # the table directory's mtime when listed
    listed_at: float      # the warehouse clock (time.monotonic())
    snapshot: TableSnapshot
    folders: FolderFiles | None = None  # a local folder table: its folders and their files, for the next listing
    files_checked: float = 0.0  # when every file was last stat'ed (the warehouse clock): by a full walk or a check
    check_s: float = 0.0        # seconds that took


class Warehouse:
    """Finds databases and tables in the warehouse (a local folder or an object-store
    location, starscan.storage.stores); caches file listings (``listing_ttl_s``; 0 disables the
    cache). ``clock`` tells the time for the TTL (tests move it instead of sleeping)."""

    def __init__(self, root: Path | str, listing_ttl_s: float = 5.0, sizing: Sizing | None = None,
                 clock: Callable[[], float] = time.monotonic, storage: Storage | None = None,
                 catalogs: Sequence[TableCatalog] = (), history: VersionHistory | None = None):
        self.storage = storage or open_storage(str(root))
        self.history = history or VersionHistory(None)  # folder tables' versions (incremental reads)
        self.catalogs = list(catalogs)  # catalogs whose databases are served beside the folders
        self._catalog_snapshots: LRUCache[tuple[str, str], tuple[CatalogTable, TableSnapshot]] = LRUCache(maxsize=1024)
        self.location = str(Path(local_path(str(root))).resolve()) if self.storage.is_local else str(root).rstrip("/")
        self.sizing = sizing or Sizing()
        self._lock = threading.Lock()
        self._ttl_s = listing_ttl_s
        self._clock = clock
        self._listings: LRUCache[str, _Listing] = LRUCache(maxsize=4096)  # table location -> _Listing
        self._refreshing: dict[str, threading.Event] = {}  # table location -> set when listed
        self._generation = 0  # counts invalidations
        # Called with a folder table's location, new version, files (in path order) and
        # storage as soon as it is listed, before its tablets are cut (the schema's footer
        # read starts there: starscan.spark.schemas.SchemaResolver.prefetch).
        self.listed: list[Callable[[str, int, list[DataFile], Storage], None]] = []

    @classmethod
    def of(cls, settings: Settings, listing_ttl_s: float | None = None,
           extra_catalogs: Sequence[TableCatalog] = ()) -> Warehouse:
        """The warehouse a configuration names, reached with its storage options."""
        storage = open_storage(settings.warehouse_location, settings.storage_options)
        ttl = settings.listing_cache_ttl_s if listing_ttl_s is None else listing_ttl_s
        catalogs: list[TableCatalog] = list(extra_catalogs)
        if settings.iceberg_catalog:
            catalogs.append(IcebergTables(settings.iceberg_catalog, settings.iceberg_namespaces,
                                          settings.storage_options, ttl))
        return cls(settings.warehouse_location, ttl, Sizing.of(settings), storage=storage, catalogs=catalogs,
                   history=VersionHistory(settings.state_path, settings.version_history_max))

    def _catalog_of(self, db: str) -> TableCatalog | None:
        """The catalog that serves ``db``, or None for the warehouse's folders."""
        for catalog in self.catalogs:
            if catalog.serves(db):
                return catalog
        return None

    @property
    def root(self) -> Path:
        """The warehouse folder, when it is local (what writers with a local path need)."""
        if not self.storage.is_local:
            raise StorageUnavailable(f"the warehouse {self.location} is not a local folder")
        return Path(self.location)

    # ---- names ----
    def _database_location(self, db: str) -> str:
        if db == DEFAULT_DB:
            return self.location
        if not db or "/" in db or "\\" in db or db in (".", "..") or is_hidden(db):
            raise DatabaseNotFound(db)
        return self.storage.join(self.location, f"{db}{DB_SUFFIX}")

    def table_location(self, db: str, table: str) -> str:
        return self.storage.join(self._database_location(db), table)

    def database_path(self, db: str) -> Path:
        self._database_location(db)  # checks the name
        return self.root if db == DEFAULT_DB else self.root / f"{db}{DB_SUFFIX}"

    def table_path(self, db: str, table: str) -> Path:
        return self.database_path(db) / table

    def databases(self) -> list[str]:
        names = []
        if self.storage.is_dir(self.location):
            names = [DEFAULT_DB] if self.tables(DEFAULT_DB) else []
            for entry in self.storage.list_dir(self.location):
                if entry.is_dir and entry.name.endswith(DB_SUFFIX) and not is_hidden(entry.name):
                    names.append(entry.name[: -len(DB_SUFFIX)])
        for catalog in self.catalogs:
            names += [db for db in catalog.databases() if db not in names]
        return names

    def has_database(self, db: str) -> bool:
        if self._catalog_of(db) is not None:
            return True
        try:
            location = self._database_location(db)
        except DatabaseNotFound:
            return False
        return self.storage.is_dir(location) and (db != DEFAULT_DB or bool(self.tables(DEFAULT_DB)))

    def tables(self, db: str) -> list[str]:
        catalog = self._catalog_of(db)
        if catalog is not None:
            return catalog.tables(db)
        location = self._database_location(db)
        out = []
        for entry in self.storage.list_dir(location):
            if not entry.is_dir or is_hidden(entry.name):
                continue
            if db == DEFAULT_DB and entry.name.endswith(DB_SUFFIX):
                continue
            out.append(entry.name)
        return out

    @staticmethod
    def _table_name_ok(db: str, table: str) -> bool:
        if not table or "/" in table or "\\" in table or table in (".", "..") or is_hidden(table):
            return False
        return not (db == DEFAULT_DB and table.endswith(DB_SUFFIX))

    def has_table(self, db: str, table: str) -> bool:
        catalog = self._catalog_of(db)
        if catalog is not None:
            return catalog.has_table(db, table)
        if not self._table_name_ok(db, table):
            return False
        try:
            return self.storage.is_dir(self.table_location(db, table))
        except DatabaseNotFound:
            return False

    def require_table(self, db: str, table: str) -> str:
        catalog = self._catalog_of(db)
        if catalog is not None:
            if not catalog.has_table(db, table):
                raise TableNotFound(table)
            return catalog.snapshot(db, table).location
        if not self.has_database(db):
            self._check_root()
            raise DatabaseNotFound(db)
        if not self.has_table(db, table):
            raise TableNotFound(table)
        return self.table_location(db, table)

    def _check_root(self) -> None:
        """A remote warehouse whose bucket or prefix is gone says so, rather than that every
        database is missing."""
        if not self.storage.is_local and not self.storage.is_dir(self.location):
            raise StorageUnavailable(f"the warehouse {self.location} is not there (its bucket or folder is gone)")

    # ---- snapshots ----
    def snapshot(self, db: str, table: str) -> TableSnapshot:
        catalog = self._catalog_of(db)
        if catalog is not None:
            return self._catalog_snapshot(catalog, db, table)
        # One stat in the common case (a plan's hot path): an existing table folder means
        # its database exists too. Otherwise require_table says which is missing.
        location = self.table_location(db, table) if self._table_name_ok(db, table) else self.require_table(db, table)
        key = location
        if not self.storage.is_local and self._ttl_s > 0:
            # An object store has no folder stamps, and every question costs a request: a
            # listing is used for the TTL, as it is.
            with self._lock:
                cached = self._listings.get(key)
                if cached is not None and self._clock() - cached.listed_at < self._ttl_s:
                    return cached.snapshot
        stamp = self.storage.dir_stamp(location)
        if stamp is None:
            self.require_table(db, table)
            raise TableNotFound(table)  # it was there a moment ago
        if self._ttl_s <= 0:
            with collector_paused():
                return self._build_snapshot(db, table, location)[0]
        # A cached listing is used while the table directory itself is unchanged (files
        # added or removed at the top level, or the directory replaced, show at once);
        # changes deeper in partition folders, and files rewritten in place, show when the
        # TTL runs out: a listing that ran out less than a TTL ago is still answered while
        # one caller's thread lists the table again in the background, an older one only
        # after the new listing.
        waited = False
        while True:
            now = self._clock()
            with self._lock:
                at_hand = self._at_hand(db, table, location, stamp, now)
                if at_hand is not None:
                    return at_hand
                cached = self._listings.get(key)
                same = cached if cached is not None and cached.stamp == stamp else None
                if same is not None and waited:
                    return same.snapshot  # listed while this caller waited for it
                refreshing = self._refreshing.get(key)
                if refreshing is None:
                    refreshing = self._refreshing[key] = threading.Event()
                    generation = self._generation
                    break  # this caller lists the table and waits for it
                if same is not None:
                    # Another caller is listing the table again after its TTL: this listing is
                    # as good as it was a moment ago (50 callers listing a 10,000-file table at
                    # once took over a second each).
                    return same.snapshot
            refreshing.wait()  # the directory changed: wait for the one listing under way
            waited = True
        return self._relist(db, table, location, stamp, now, generation, refreshing)

    def _relist(self, db: str, table: str, location: str, stamp: int, now: float, generation: int,
                refreshing: threading.Event) -> TableSnapshot:
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
                    snap, folders = self._build_snapshot(db, table, location,
                                                         before.snapshot if before is not None else None,
                                                         kept if incremental else None)
                if incremental:
                    assert before is not None
                    checked, check_s = before.files_checked, before.check_s
                else:
                    check_s = _stopwatch() - started
            with self._lock:
                if generation == self._generation:  # not invalidated while it was listed
                    self._listings[location] = _Listing(stamp, now, snap, folders, checked, check_s)
            return snap
        finally:
            with self._lock:
                self._refreshing.pop(location, None)
            refreshing.set()

    def _folders_unchanged(self, listed: FolderFiles) -> bool:
        """Whether a local folder table's folders hold the same names as when listed, asked
        with a stat of each: a folder whose entries changed has a new modification time."""
        storage = self.storage
        return all(storage.dir_stamp(folder) == stamp.mtime_ns for folder, stamp in listed.folders.items())

    def _files_unchanged(self, location: str, listing: _Listing) -> bool:
        """Whether every listed file has its listed size and time (a file rewritten in place
        under its name changes no folder): a stat of each instead of a walk. A 10,000-file
        table is checked with a third of a listing's CPU (bench/RESULTS.md, plan_latency)."""
        storage = self.storage
        return all(storage.file_identity(storage.join(location, f.path)) == (f.size, f.mtime_ns)
                   for f in listing.snapshot.files)

    def _relist_behind(self, *args: Any) -> None:
        """``_relist`` on a thread of its own, the callers answered meanwhile (``_refreshing``
        already names the table)."""
        threading.Thread(target=self._relist_quietly, name="starscan-listing", daemon=True, args=args).start()

    def _relist_quietly(self, *args: Any) -> None:
        """``_relist`` in the background: a failure is the next caller's to meet (the
        listing it answered from runs out)."""
        try:
            self._relist(*args)
        except Exception:  # noqa: BLE001 - the next synchronous listing reports it
            log.debug("background listing failed", exc_info=True)

    def fresh_snapshot(self, db: str, table: str) -> TableSnapshot | None:
        """``snapshot`` when a listing at hand answers it (a folder of a local warehouse without
        catalogs, its directory unchanged: one stat; listed less than a TTL ago, or less than
        two, while it is listed again in the background); None when ``snapshot`` would have
        to list and wait, look up a catalog or report an error. It never blocks for long, so
        an event loop may ask it."""
        if self.catalogs or not self.storage.is_local or self._ttl_s <= 0 or not self._table_name_ok(db, table):
            return None
        try:
            location = self.table_location(db, table)
        except StarscanError:
            return None
        stamp = self.storage.dir_stamp(location)
        if stamp is None:
            return None
        with self._lock:
            return self._at_hand(db, table, location, stamp, self._clock())

    def _at_hand(self, db: str, table: str, location: str, stamp: int, now: float) -> TableSnapshot | None:
        """Under the lock: the cached listing when it answers now without anyone waiting. It
        is fresh, or it ran out less than a TTL ago: then it is listed again behind the
        answer (under load, the caller that listed a 10,000-file table itself waited ~0.4 s;
        bench/RESULTS.md, plan_latency)."""
        cached = self._listings.get(location)
        if cached is None or cached.stamp != stamp:
            return None
        age = now - cached.listed_at
        if age >= 2 * self._ttl_s:
            return None
        if age >= self._ttl_s and location not in self._refreshing:
            refreshing = self._refreshing[location] = threading.Event()
            self._relist_behind(db, table, location, stamp, now, self._generation, refreshing)
        return cached.snapshot

    def set_sizing(self, sizing: Sizing) -> None:
        """New tablet sizes: listings are made again (a plan issued before still reads what it
        planned while this process holds its tablet list or the table is unchanged)."""
        with self._lock:
            self.sizing = sizing
            self._generation += 1
            self._listings.clear()

    def invalidate(self, db: str, table: str) -> None:
        """Forget a cached listing (after this process wrote the table)."""
        for catalog in self.catalogs:
            catalog.invalidate(db, table)
        with self._lock:
            self._generation += 1
            self._listings.pop(self.table_location(db, table), None)

    def changes(self, snap: TableSnapshot) -> TableChanges:
        """How the table's versions are told apart (starscan.tables.changes)."""
        if snap.kind == "delta":
            return DeltaChanges(snap.qualified_name, snap.location, snap.storage, snap.version)
        catalog = self._catalog_of(snap.db) if snap.kind != "folder" else None
        found = catalog.changes(snap.db, snap.name) if catalog is not None else None
        return found if found is not None else FolderChanges(self.history, snap.location)

    def files_added_since(self, snap: TableSnapshot, since: int) -> list[DataFileLike]:
        """The data files appended to the table after version ``since`` up to its version in
        ``snap`` (starscan.tables.changes for the errors; a file appended since and compacted away
        is TableRewritten too)."""
        added = set(self.changes(snap).added_since(since, snap.version))
        files = [f for f in snap.files if f.path in added]
        missing = added - {f.path for f in files}
        if missing:
            raise TableRewritten(f"table {snap.qualified_name}: file {sorted(missing)[0]}, appended after version {since}, "
                                 f"is not in version {snap.version} (rewritten or compacted since): a full read is needed")
        return files

    def tablets_added_since(self, snap: TableSnapshot, since: int) -> list[Tablet]:
        """Tablets of the data files appended after version ``since`` (``files_added_since``)."""
        return self._tablets(snap.qualified_name, snap.location, snap.storage, self.files_added_since(snap, since))

    def _tablets(self, name: str, location: str, storage: Storage, files: Sequence[DataFileLike]) -> list[Tablet]:
        """The files as tablets (starscan.tables.tablets), footers read through the table's store."""
        return split_files(name, files, self.sizing, self._row_groups_of(location, storage))

    @staticmethod
    def _row_groups_of(location: str, storage: Storage) -> Callable[[DataFileLike], tuple[RowGroup, ...] | None]:
        return lambda f: FOOTERS.row_groups(storage.join(location, f.path), f.size, f.mtime_ns, storage)

    def _catalog_snapshot(self, catalog: TableCatalog, db: str, table: str) -> TableSnapshot:
        found = catalog.snapshot(db, table)
        with self._lock:
            cached = self._catalog_snapshots.get((db, table))
        if cached is not None and cached[0] is found:
            return cached[1]
        storage = found.storage
        files = [DataFile(path, size, mtime, partition, deletes) for path, size, mtime, partition, deletes in found.files]
        tablets = self._tablets(f"{db}.{table}", found.location, storage, files)
        if found.versions_from_files:  # its changes are known from the file sets observed, as a folder's
            self.history.observe(f"{db}.{table}", found.location, found.version, [f[:3] for f in found.files])
        snap = TableSnapshot(db, table, found.location, found.version, tuple(tablets), found.partition_columns,
                             {t.tablet_id: t for t in tablets}, storage, found.schema_json,
                             partitions_in_folders=found.partitions_in_folders, file_format=found.file_format,
                             kind=found.kind, file_columns=found.file_columns,
                             unread_columns=found.unread_columns)
        with self._lock:
            self._catalog_snapshots[(db, table)] = (found, snap)
        return snap

    def _build_snapshot(self, db: str, table: str, location: str, previous: TableSnapshot | None = None,
                        kept: FolderFiles | None = None) -> tuple[TableSnapshot, FolderFiles | None]:
        """The table as listed now, and a local folder table's listing folder by folder.
        ``previous``: the snapshot of the listing before, answered again when the folder
        holds the same files (no footers looked up, no tablets cut). ``kept``: that
        listing's folders: only the folders changed since are read, and the tablets of the
        partitions whose folders did not change are the ones cut then."""
        storage = self.storage
        version: int | None = None
        schema_json = None
        file_columns: tuple[tuple[str, FileName], ...] = ()
        listed: FolderFiles | None = None
        unchanged: dict[Partition, list[Tablet]] = {}
        if storage.is_dir(storage.join(location, DELTA_LOG)):
            delta = read_delta(f"{db}.{table}", location, storage, list(storage.walk_files(location)))
            files = [DataFile(f.path, f.size, f.mtime_ns, f.partition, f.deletes, f.recorded) for f in delta.files]
            part_cols = list(delta.partition_columns)
            version, schema_json, file_columns = delta.version, delta.schema_json, delta.file_columns
            recorded = delta.partitions_recorded
            if not 0 <= version < 1 << 31:
                raise TableUnreadable(f"table {db}.{table}: Delta version {version} does not fit a plan's version")
        else:
            recorded = False
            listed = list_folder_table(location, storage, kept)
            files, part_cols = listed.files, listed.partition_columns
            version = listed.version
            if previous is not None and previous.kind == "folder" and previous.version == version and \
                    previous.partition_columns == tuple(part_cols):
                _let_columns_go(listed)
                return previous, listed if storage.is_local else None
            for hook in self.listed:
                try:
                    hook(location, version, files, storage)
                except Exception:  # noqa: BLE001 - what the hook prepares is made again when needed
                    log.debug("a hook on a new listing failed", exc_info=True)
            if kept is not None and previous is not None and previous.kind == "folder":
                changed = listed.changed_partitions()
                for tablet in previous.tablets:
                    if tablet.files and tablet.files[0].partition not in changed:
                        unchanged.setdefault(tablet.files[0].partition, []).append(tablet)
        if listed is not None:
            tablets = split_partitions(f"{db}.{table}", listed.by_partition(), self.sizing,
                                       self._row_groups_of(location, storage), unchanged, listed.columns_by_partition())
            _let_columns_go(listed)
        else:
            tablets = self._tablets(f"{db}.{table}", location, storage, files)
        if schema_json is None:
            # A listing made from the one before says what changed since that one's version:
            # the history then needs no pass over every file.
            change = (previous.version, *listed.changes()) \
                if listed is not None and kept is not None and previous is not None else None
            self.history.observe(f"{db}.{table}", location, version, ((f.path, f.size, f.mtime_ns) for f in files),
                                 change=change, count=len(files))
        by_id = {t.tablet_id: t for t in tablets}
        snap = TableSnapshot(db, table, location, version, tuple(tablets), tuple(part_cols), by_id, storage, schema_json,
                             partitions_in_folders=not recorded, kind="folder" if schema_json is None else "delta",
                             file_columns=file_columns)
        if schema_json is None:
            # A folder's listing is every data file once, in path order: what ``files`` would
            # gather again from the tablets (1.2 s for a million files).
            snap.__dict__["files"] = files
        return snap, listed if listed is not None and storage.is_local else None


def _let_columns_go(listed: FolderFiles) -> None:
    """A listing's columns are for cutting its tablets only (starscan.tables.file_columns)."""
    if listed.columns:
        large = sum(len(found) for found in listed.columns.values()) >= RELEASE_FILES
        listed.columns.clear()
        if large:
            release_unused()
