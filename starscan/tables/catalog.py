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
from pathlib import Path
from typing import TYPE_CHECKING

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
from starscan.tables.listing_cache import Build, ListingCache
from starscan.tables.snapshot import TableSnapshot

if TYPE_CHECKING:
    from starscan.arrow.nested import FileName
    from starscan.settings.config import Settings
from starscan.tables.file_columns import RELEASE_FILES, release_unused
from starscan.tables.tablets import FOOTERS, DataFileLike, RowGroup, Sizing, Tablet, split_files, split_partitions
from starscan.tables.versions import VersionHistory

log = logging.getLogger("starscan.tables.catalog")

__all__ = ["DataFile", "Tablet", "TableSnapshot", "Warehouse", "list_table_files", "partition_of"]

DEFAULT_DB = "default"
DB_SUFFIX = ".db"


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
        self.listings = ListingCache(self.storage, listing_ttl_s, clock)  # the folder tables' listings
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
        if not self.storage.is_local and self._ttl_s > 0:
            cached = self.listings.within_ttl(location)
            if cached is not None:
                return cached
        stamp = self.storage.dir_stamp(location)
        if stamp is None:
            self.require_table(db, table)
            raise TableNotFound(table)  # it was there a moment ago
        if self._ttl_s <= 0:
            with collector_paused():
                return self._build_snapshot(db, table, location)[0]
        return self.listings.snapshot(location, stamp, self._builder(db, table, location))

    def _builder(self, db: str, table: str, location: str) -> Build:
        """How the listing cache lists this table (starscan.tables.listing_cache)."""
        return lambda previous, kept: self._build_snapshot(db, table, location, previous, kept)

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
        return self.listings.at_hand(location, stamp, self._builder(db, table, location))

    def set_sizing(self, sizing: Sizing) -> None:
        """New tablet sizes: listings are made again (a plan issued before still reads what it
        planned while this process holds its tablet list or the table is unchanged)."""
        with self._lock:
            self.sizing = sizing
        self.listings.clear()

    def invalidate(self, db: str, table: str) -> None:
        """Forget a cached listing (after this process wrote the table)."""
        for catalog in self.catalogs:
            catalog.invalidate(db, table)
        self.listings.forget(self.table_location(db, table))

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
