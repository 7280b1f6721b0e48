"""The warehouse: databases, tables, their files, tablets and versions.

Layout is Spark's own (``spark.sql.warehouse.dir``): database ``d`` is ``<warehouse>/d.db``,
table ``t`` of it is ``<warehouse>/d.db/t`` (the ``default`` database lives in the root),
so a table written by any Spark job (``saveAsTable`` or ``write.parquet`` into that path)
is served as it is. The directory tree is the persistent catalog.

Tablets are splits of the table's files (starscan.tablets): small files of a partition packed
together, a large file cut into runs of row groups; their ids are stable hashes of the files'
identities. A table's version is a 31-bit hash of its file set: it changes whenever a file is
added, removed or rewritten.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cachetools import LRUCache

from starscan.errors import DatabaseNotFound, TableNotFound
from starscan.files import is_hidden
from starscan.hadoop_paths import HIVE_DEFAULT_PARTITION, unescape_path_name
from starscan.tablets import FOOTERS, DataFileLike, Sizing, Tablet, hash_int, split_files

__all__ = ["DataFile", "Tablet", "TableSnapshot", "Warehouse", "list_table_files", "partition_of"]

DEFAULT_DB = "default"
DB_SUFFIX = ".db"


@dataclass(frozen=True)
class DataFile:
    path: str            # relative to the table directory, '/'-separated
    size: int
    mtime_ns: int
    # (column, value) of each partition folder above the file: the column name decoded as
    # Spark decodes it, the value exactly as the folder spells it (None: Hive's NULL folder).
    # How a value reads depends on the column's type: see starscan.hadoop_paths.
    partition: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True)
class TableSnapshot:
    """A table as it is now: its files, tablets and version."""

    db: str
    name: str
    location: Path
    version: int
    tablets: tuple[Tablet, ...]
    partition_columns: tuple[str, ...]
    by_id: dict[int, Tablet] = field(default_factory=dict, compare=False, repr=False)

    @property
    def qualified_name(self) -> str:
        return f"{self.db}.{self.name}"

    @property
    def files(self) -> list[DataFileLike]:
        """Every data file once (a cut file is in several tablets), in path order."""
        seen: dict[str, DataFileLike] = {}
        for t in self.tablets:
            for f in t.files:
                seen.setdefault(f.path, f)
        return sorted(seen.values(), key=lambda f: f.path)


@dataclass(frozen=True)
class _Listing:
    stamp: int            # the table directory's mtime when listed
    listed_at: float      # the warehouse clock (time.monotonic())
    snapshot: TableSnapshot


def list_table_files(location: Path) -> tuple[list[DataFile], list[str]]:
    """All data files below a table directory (Hive-style partition folders understood)."""
    files: list[DataFile] = []
    part_cols: list[str] = []
    root = str(location)

    def walk(directory: str, rel: str, partition: tuple[tuple[str, str | None], ...]) -> None:
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            return
        for entry in entries:
            if is_hidden(entry.name):
                continue
            if entry.is_dir(follow_symlinks=False):
                spelled, eq, raw = entry.name.partition("=")
                if not eq:
                    continue  # not a partition directory: Spark ignores it as well
                col = unescape_path_name(spelled)
                value = None if raw == HIVE_DEFAULT_PARTITION else raw
                if col not in part_cols:
                    part_cols.append(col)
                walk(entry.path, f"{rel}{entry.name}/", partition + ((col, value),))
            elif entry.is_file():
                st = entry.stat()
                files.append(DataFile(rel + entry.name, st.st_size, st.st_mtime_ns, partition))

    walk(root, "", ())
    files.sort(key=lambda f: f.path)
    return files, part_cols


def partition_of(relative_path: str) -> tuple[tuple[str, str | None], ...]:
    """The partition folders on a data file's path (relative to its table), as
    ``list_table_files`` records them."""
    out = []
    for folder in relative_path.split("/")[:-1]:
        spelled, eq, raw = folder.partition("=")
        if eq:
            out.append((unescape_path_name(spelled), None if raw == HIVE_DEFAULT_PARTITION else raw))
    return tuple(out)


class Warehouse:
    """Finds databases and tables in the warehouse directory; caches file listings
    (``listing_ttl_s``; 0 disables the cache). ``clock`` tells the time for the TTL (tests
    move it instead of sleeping)."""

    def __init__(self, root: Path, listing_ttl_s: float = 5.0, sizing: Sizing | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.root = Path(root).resolve()
        self.sizing = sizing or Sizing()
        self._lock = threading.Lock()
        self._ttl_s = listing_ttl_s
        self._clock = clock
        self._listings: LRUCache[str, _Listing] = LRUCache(maxsize=4096)  # table location -> _Listing
        self._refreshing: dict[str, threading.Event] = {}  # table location -> set when listed
        self._generation = 0  # counts invalidations
        self._listeners: list[Callable[[str, str], None]] = []

    # ---- names ----
    def database_path(self, db: str) -> Path:
        if db == DEFAULT_DB:
            return self.root
        if not db or "/" in db or "\\" in db or db in (".", "..") or is_hidden(db):
            raise DatabaseNotFound(db)
        return self.root / f"{db}{DB_SUFFIX}"

    def table_path(self, db: str, table: str) -> Path:
        return self.database_path(db) / table

    def databases(self) -> list[str]:
        if not self.root.is_dir():
            return []
        names = [DEFAULT_DB] if self.tables(DEFAULT_DB) else []
        for entry in sorted(os.scandir(self.root), key=lambda e: e.name):
            if entry.is_dir() and entry.name.endswith(DB_SUFFIX) and not is_hidden(entry.name):
                names.append(entry.name[: -len(DB_SUFFIX)])
        return names

    def has_database(self, db: str) -> bool:
        try:
            path = self.database_path(db)
        except DatabaseNotFound:
            return False
        return path.is_dir() and (db != DEFAULT_DB or bool(self.tables(DEFAULT_DB)))

    def tables(self, db: str) -> list[str]:
        path = self.database_path(db)
        if not path.is_dir():
            return []
        out = []
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            if not entry.is_dir() or is_hidden(entry.name):
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
        if not self._table_name_ok(db, table):
            return False
        try:
            return self.table_path(db, table).is_dir()
        except DatabaseNotFound:
            return False

    def require_table(self, db: str, table: str) -> Path:
        if not self.has_database(db):
            raise DatabaseNotFound(db)
        if not self.has_table(db, table):
            raise TableNotFound(table)
        return self.table_path(db, table)

    # ---- snapshots ----
    def snapshot(self, db: str, table: str) -> TableSnapshot:
        # One stat in the common case (a plan's hot path): an existing table folder means
        # its database exists too. Otherwise require_table says which is missing.
        location = self.table_path(db, table) if self._table_name_ok(db, table) else self.require_table(db, table)
        try:
            st = os.stat(location)
        except (OSError, ValueError):  # ValueError: a NUL in a name
            st = None
        if st is None or not stat.S_ISDIR(st.st_mode):
            self.require_table(db, table)
            raise TableNotFound(table)  # it was there a moment ago
        if self._ttl_s <= 0:
            return self._build_snapshot(db, table, location)
        key = str(location)
        # A cached listing is used while the table directory itself is unchanged (files
        # added or removed at the top level, or the directory replaced, show at once);
        # changes deeper in partition folders, and files rewritten in place, show when the
        # TTL runs out.
        stamp = st.st_mtime_ns
        waited = False
        while True:
            now = self._clock()
            with self._lock:
                cached = self._listings.get(key)
                if cached is not None and cached.stamp == stamp and (waited or now - cached.listed_at < self._ttl_s):
                    return cached.snapshot  # fresh, or listed while this caller waited for it
                refreshing = self._refreshing.get(key)
                if refreshing is None:
                    refreshing = self._refreshing[key] = threading.Event()
                    generation = self._generation
                    break
                if cached is not None and cached.stamp == stamp:
                    # Only the TTL ran out and another caller is listing the table again: this
                    # listing is as good as it was a moment ago (a 10,000-file table takes ~0.1 s
                    # to list, and 50 callers listing it at once took over a second each).
                    return cached.snapshot
            refreshing.wait()  # the directory changed: wait for the one listing under way
            waited = True
        try:
            snap = self._build_snapshot(db, table, location)
            with self._lock:
                if generation == self._generation:  # not invalidated while it was listed
                    self._listings[key] = _Listing(stamp, now, snap)
            return snap
        finally:
            with self._lock:
                self._refreshing.pop(key, None)
            refreshing.set()

    def set_sizing(self, sizing: Sizing) -> None:
        """New tablet sizes: listings are made again (a plan issued before still reads what it
        planned while this process holds its tablet list or the table is unchanged)."""
        with self._lock:
            self.sizing = sizing
            self._generation += 1
            self._listings.clear()

    def invalidate(self, db: str, table: str) -> None:
        """Forget a cached listing (after this process wrote the table)."""
        with self._lock:
            self._generation += 1
            self._listings.pop(str(self.table_path(db, table)), None)

    def _build_snapshot(self, db: str, table: str, location: Path) -> TableSnapshot:
        files, part_cols = list_table_files(location)
        tablets = split_files(f"{db}.{table}", files, self.sizing,
                              lambda f: FOOTERS.row_groups(location / f.path, f.size, f.mtime_ns))
        version = hash_int("\n".join(f"{f.path}|{f.size}|{f.mtime_ns}" for f in files), 31)
        by_id = {t.tablet_id: t for t in tablets}
        return TableSnapshot(db, table, location, version, tuple(tablets), tuple(part_cols), by_id)
