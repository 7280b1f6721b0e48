"""Iceberg tables from a pyiceberg catalog: databases are the catalog's namespaces.

A table's snapshot is its current Iceberg snapshot: the data files ``plan_files`` gives for
it (never a listing: the table folder also holds other snapshots' files), each matched with
the store's listing of the table location, whose sizes and modification times the scans
then check. The plan's version is the snapshot id folded into 31 bits. The schema is
Iceberg's, mapped to Spark's types as Spark's Iceberg connector maps them.

Columns are read by name while every name has kept one field id; after a rename, or a name
dropped and added again, every reader resolves them by the field ids in the data files (the
plan carries them), as Iceberg does. Position and equality delete files go into the plan
beside the data files they apply to (starscan.arrow.deletes), and every reader leaves those
rows out. ``uuid`` columns are read as their text and ``fixed`` as binary, as Spark's Iceberg
connector shows them. Refused by name: ``time`` columns (Spark has no type for them); data
files outside the table location; delete files not in Parquet.
Partition values are inside Iceberg's data files, so tablets carry no partition folders and
the arrow engine's row-group statistics do the skipping.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from cachetools import LRUCache

from starscan.arrow.deletes import DeletionVector, EqualityDeletes, IcebergDeletes
from starscan.core.errors import DatabaseNotFound, StarscanError, TableNotFound, TableRewritten, TableUnreadable, VersionUnknown
from starscan.storage.stores import Storage, StorageOptions, local_path, open_storage
from starscan.tables.catalog_tables import CatalogTable, asking
from starscan.tables.iceberg_schema import field_ids_needed, ids_by_column, to_spark_schema, unread_columns
from starscan.tables.tablets import hash_int


class IcebergTables:
    """The namespaces and tables of one pyiceberg catalog (``iceberg_catalog`` properties)."""

    def __init__(self, properties: dict[str, str], namespaces: list[str] | None = None,
                 options: StorageOptions | None = None, ttl_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.properties = dict(properties)
        self.only = set(namespaces or ())
        self.options = options
        self._ttl_s = ttl_s
        self._clock = clock
        self._catalog: Any = None
        self._lock = threading.Lock()
        self._snapshots: LRUCache[tuple[str, str], tuple[float, str, CatalogTable]] = LRUCache(maxsize=1024)
        self._namespaces: tuple[float, list[str]] | None = None

    @property
    def catalog(self) -> Any:
        with self._lock:
            if self._catalog is None:
                from pyiceberg.catalog import load_catalog

                try:
                    properties = {k: v for k, v in self.properties.items() if k != "name"}
                    self._catalog = load_catalog(self.properties.get("name", "default"), **properties)
                except Exception as exc:  # noqa: BLE001 - pyiceberg raises many kinds
                    raise TableUnreadable(f"the Iceberg catalog cannot be opened: {_first_line(exc)}") from None
            return self._catalog

    # ---- names ----
    def databases(self) -> list[str]:
        now = self._clock()
        cached = self._namespaces
        if cached is not None and now - cached[0] < self._ttl_s:
            return cached[1]
        names = [".".join(ns) for ns in self._call(lambda: self.catalog.list_namespaces())]
        found = sorted(n for n in names if not self.only or n in self.only)
        self._namespaces = (now, found)
        return found

    def serves(self, db: str) -> bool:
        """Whether ``db`` is one of this catalog's namespaces (and chosen, when a list is set)."""
        if self.only and db not in self.only:
            return False
        return db in self.databases()

    def tables(self, db: str) -> list[str]:
        if not self.serves(db):
            raise DatabaseNotFound(db)
        return sorted(t[-1] for t in self._call(lambda: self.catalog.list_tables(db)))

    def has_table(self, db: str, table: str) -> bool:
        return self.serves(db) and table in self.tables(db)

    # ---- snapshots ----
    def snapshot(self, db: str, table: str) -> CatalogTable:
        key = (db, table)
        now = self._clock()
        with self._lock:
            cached = self._snapshots.get(key)
        if cached is not None and now - cached[0] < self._ttl_s:
            return cached[2]
        loaded = self._load(db, table)
        if cached is not None and cached[1] == loaded.metadata_location:
            files = cached[2]  # the same metadata: the same snapshot
        else:
            files = self._files(f"{db}.{table}", loaded)
        with self._lock:
            self._snapshots[key] = (now, loaded.metadata_location, files)
        return files

    def invalidate(self, db: str, table: str) -> None:
        with self._lock:
            self._snapshots.pop((db, table), None)
            self._namespaces = None

    def changes(self, db: str, table: str) -> IcebergChanges:
        return IcebergChanges(f"{db}.{table}", self._load(db, table))

    def _load(self, db: str, table: str) -> Any:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        if not self.serves(db):
            raise DatabaseNotFound(db)
        try:
            return self.catalog.load_table((db, table))
        except NoSuchTableError:
            raise TableNotFound(table) from None
        except NoSuchNamespaceError:
            raise DatabaseNotFound(db) from None
        except StarscanError:
            raise
        except Exception as exc:  # noqa: BLE001 - the catalog's own kinds
            raise TableUnreadable(f"table {db}.{table} cannot be loaded from the Iceberg catalog: "
                                  f"{_first_line(exc)}") from None

    def _files(self, name: str, loaded: Any) -> CatalogTable:
        file_columns = field_ids_needed(loaded)
        spark_schema = to_spark_schema(name, loaded.schema())
        unread = unread_columns(name, loaded.schema())
        location = loaded.location().rstrip("/")
        storage = open_storage(location, self.options)
        if storage.is_local:
            location = local_path(location)
        snapshot = loaded.current_snapshot()
        files: list[tuple[str, int, int, tuple[tuple[str, str | None], ...], str | None]] = []
        orc = False
        if snapshot is not None:
            listed = {e.name: e for e in storage.walk_files(location)}
            puffin_blobs = puffin_reader(name, storage)
            try:
                tasks, equality = _plan_files(loaded, snapshot)
            except StarscanError:
                raise
            except Exception as exc:  # noqa: BLE001 - manifests that cannot be read
                raise TableUnreadable(f"table {name}: its Iceberg manifests cannot be read: {_first_line(exc)}") from None
            for task, sequence_number in tasks:
                deletes = _file_deletes(name, loaded, task, location, equality.applying_to(task.file, sequence_number),
                                        puffin_blobs)
                file_format = str(task.file.file_format).upper().rsplit(".", 1)[-1]
                if file_format not in ("PARQUET", "ORC", "AVRO"):
                    raise TableUnreadable(f"table {name}: data file {task.file.file_path} is {file_format}; starscan "
                                          "reads Iceberg data files in Parquet, ORC and Avro")
                orc |= file_format in ("ORC", "AVRO")
                rel = _relative(task.file.file_path, location)
                if rel is None:
                    raise TableUnreadable(f"table {name}: data file {task.file.file_path} lies outside the table "
                                          f"location {location}")
                entry = listed.get(rel)
                if entry is None:
                    raise TableUnreadable(f"table {name}: data file {rel} of its current snapshot is missing")
                files.append((rel, entry.size, entry.mtime_ns, (), deletes))
        if orc and not file_columns:
            # ORC files are read by starscan's reader alone (Spark's Parquet reader is the sql
            # engine's other way), which the field ids send every engine to.
            file_columns = ids_by_column(loaded)
        version = snapshot_version(snapshot.snapshot_id if snapshot is not None else None)
        return CatalogTable(location, storage, version, spark_schema.json(), tuple(sorted(files, key=lambda f: f[0])),
                            partitions_in_folders=False, kind="iceberg", file_columns=file_columns,
                            unread_columns=unread)

    def _call(self, fn: Callable[[], Any]) -> Any:
        return asking("the Iceberg catalog", fn)

def _plan_files(loaded: Any, snapshot: Any) -> tuple[list[tuple[Any, int]], _EqualityIndex]:
    """The snapshot's scan tasks (data files with the position delete files that apply to
    them, as pyiceberg's planning matches them), each with its data sequence number, and the
    equality delete files, which pyiceberg's planning refuses: they are set aside here and
    matched to data files by ``_EqualityIndex``."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.manifest import INITIAL_SEQUENCE_NUMBER, DataFileContent
    from pyiceberg.table import ManifestGroupPlanner

    equality = _EqualityIndex(loaded.metadata)
    sequence_numbers: dict[str, int] = {}

    def keep(entry: Any) -> bool:
        content = entry.data_file.content
        if content == DataFileContent.EQUALITY_DELETES:
            equality.add(entry)
            return False
        if content == DataFileContent.DATA:
            sequence_numbers[entry.data_file.file_path] = entry.sequence_number or INITIAL_SEQUENCE_NUMBER
        return True

    planner = ManifestGroupPlanner(table_metadata=loaded.metadata, io=loaded.io, row_filter=AlwaysTrue(),
                                   case_sensitive=True, options={})
    tasks = list(planner.plan_files(snapshot.manifests(loaded.io), manifest_entry_filter=keep))
    return [(task, sequence_numbers[task.file.file_path]) for task in tasks], equality


class _EqualityIndex:
    """A snapshot's equality delete files and the data files each applies to. The Iceberg
    spec ("Scan Planning"): an equality delete file applies to a data file whose data
    sequence number is strictly lower than its own (so a row written in the same commit as
    the delete, as an upsert writes its new row, stays), in the same partition of the same
    spec, or in every partition when its own spec is unpartitioned."""

    def __init__(self, metadata: Any):
        self.specs = metadata.specs()
        self.entries: list[tuple[int, Any]] = []

    def add(self, entry: Any) -> None:
        from pyiceberg.manifest import INITIAL_SEQUENCE_NUMBER

        self.entries.append((entry.sequence_number or INITIAL_SEQUENCE_NUMBER, entry.data_file))

    def applying_to(self, data_file: Any, sequence_number: int) -> list[Any]:
        out = []
        for delete_sequence, delete in sorted(self.entries, key=lambda e: (e[0], e[1].file_path)):
            if delete_sequence <= sequence_number:
                continue
            spec = self.specs.get(delete.spec_id or 0)
            global_delete = spec is None or spec.is_unpartitioned()
            if global_delete or ((delete.spec_id or 0) == (data_file.spec_id or 0)
                                 and delete.partition == data_file.partition):
                out.append(delete)
        return out


def _file_deletes(name: str, loaded: Any, task: Any, location: str, equality: list[Any],
                  puffin_blobs: Callable[[str], dict[str, tuple[int, int, int]]]) -> str | None:
    """The plan's deletes of a scan task's data file (starscan.arrow.deletes): its position
    delete files, which pyiceberg's planning found to apply to it (by partition and sequence
    number, as the spec says), and the equality delete files that apply to it, in
    sequence-number order."""
    if not task.delete_files and not equality:
        return None
    paths = []
    vector = None
    for delete in sorted(task.delete_files, key=lambda d: d.file_path):
        if str(delete.file_format).upper().rsplit(".", 1)[-1] == "PUFFIN":
            # Format v3: the Puffin files pyiceberg's planning matched by sequence number;
            # the data file's own vector is the blob that names it.
            blob = puffin_blobs(delete.file_path).get(task.file.file_path)
            if blob is not None:
                if vector is not None:
                    raise TableUnreadable(f"table {name}: data file {task.file.file_path} has two deletion vectors")
                offset, length, cardinality = blob
                vector = DeletionVector(_relative(delete.file_path, location) or delete.file_path, offset, length - 8,
                                        cardinality)
            continue
        _check_delete_format(name, delete)
        paths.append(_relative(delete.file_path, location) or delete.file_path)
    equal = []
    for delete in equality:
        _check_delete_format(name, delete)
        ids = tuple(int(i) for i in (delete.equality_ids or ()))
        if not ids:
            raise TableUnreadable(f"table {name}: equality delete file {delete.file_path} names no equality columns")
        for field_id in ids:
            field = _field_anywhere(loaded, field_id)
            if field is None or not field.field_type.is_primitive:
                raise TableUnreadable(f"table {name}: equality delete file {delete.file_path} deletes by field id "
                                      f"{field_id}, {'a nested field' if field is not None else 'not a known field'}, "
                                      "which starscan does not compare; compact the table (rewrite_data_files)")
        equal.append(EqualityDeletes(_relative(delete.file_path, location) or delete.file_path, ids))
    if not paths and not equal and vector is None:
        return None
    return IcebergDeletes(tuple(paths), task.file.file_path, tuple(equal), vector).to_json()


def puffin_reader(name: str, storage: Storage) -> Callable[[str], dict[str, tuple[int, int, int]]]:
    """The deletion vectors of Puffin files, by the data file each names: (offset, length,
    cardinality) of its ``deletion-vector-v1`` blob, from the file's footer (read once per
    file by the returned function). Puffin: the blobs, then a footer of magic ``PFA1``, a
    JSON payload, its length (4 bytes, little-endian), 4 bytes of flags and the magic again."""
    found: dict[str, dict[str, tuple[int, int, int]]] = {}

    def blobs(uri: str) -> dict[str, tuple[int, int, int]]:
        if uri in found:
            return found[uri]
        path = local_path(uri) if storage.is_local else uri
        identity = storage.file_identity(path)
        if identity is None:
            raise TableUnreadable(f"table {name}: its deletion vector file {uri} is missing")
        size = identity[0]
        source = storage.open(path)
        handle = pa.OSFile(source) if isinstance(source, str) else source
        try:
            tail = bytes(handle.read_at(12, size - 12)) if size >= 12 else b""
            if len(tail) != 12 or tail[-4:] != b"PFA1":
                raise TableUnreadable(f"table {name}: deletion vector file {uri} is not a Puffin file")
            payload_size = int.from_bytes(tail[:4], "little")
            if int.from_bytes(tail[4:8], "little") & 1:
                raise TableUnreadable(f"table {name}: deletion vector file {uri} has a compressed footer, which "
                                      "starscan does not read")
            footer = json.loads(bytes(handle.read_at(payload_size, size - 12 - payload_size)))
        except (ValueError, OSError) as exc:
            raise TableUnreadable(f"table {name}: the footer of deletion vector file {uri} cannot be read: "
                                  f"{_first_line(exc)}") from None
        finally:
            handle.close()
        out = {}
        for blob in footer.get("blobs") or ():
            if blob.get("type") != "deletion-vector-v1":
                continue
            props = blob.get("properties") or {}
            if blob.get("compression-codec"):
                raise TableUnreadable(f"table {name}: a deletion vector of {uri} is compressed, which the spec does "
                                      "not allow")
            out[str(props.get("referenced-data-file"))] = (int(blob["offset"]), int(blob["length"]),
                                                          int(props.get("cardinality", -1)))
        found[uri] = out
        return out

    return blobs


def _check_delete_format(name: str, delete: Any) -> None:
    if str(delete.file_format).upper().rsplit(".", 1)[-1] not in ("PARQUET", "ORC", "AVRO"):
        raise TableUnreadable(f"table {name}: delete file {delete.file_path} is {delete.file_format}, not "
                              "Parquet, ORC or Avro")


def _field_anywhere(loaded: Any, field_id: int) -> Any:
    """The field of this id in the current schema, or in an older one (a column dropped since
    its deletes were written still keys them)."""
    for schema in [loaded.schema(), *loaded.schemas().values()]:
        try:
            return schema.find_field(field_id)
        except ValueError:
            continue
    return None


def snapshot_version(snapshot_id: int | None) -> int:
    """A snapshot's version as plans carry it (31 bits); 0 for a table with no snapshot."""
    return hash_int(f"{snapshot_id}", 31) if snapshot_id is not None else 0


class IcebergChanges:
    """An Iceberg table's changes between two of its snapshots: the data files each append
    snapshot after the first added (its manifests' ADDED entries). A ``replace`` snapshot
    (compaction) changes no rows and is skipped; an ``overwrite`` or ``delete`` one changed
    rows an append cannot describe: TableRewritten. A version whose snapshot expired is
    unknown; one that is not an ancestor of the current snapshot (a rollback since) makes
    the table rewritten."""

    def __init__(self, name: str, loaded: Any):
        self.name = name
        self.loaded = loaded
        self.location = loaded.location().rstrip("/")
        if self.location.startswith("file:"):
            self.location = local_path(self.location)
        self._by_version = {snapshot_version(s.snapshot_id): s for s in loaded.metadata.snapshots}

    def _snapshot(self, version: int) -> Any:
        found = self._by_version.get(version)
        if found is None and version != 0:
            raise VersionUnknown(f"table {self.name} has no snapshot of version {version} (never one, or expired): "
                                 "read the whole table")
        return found

    def _ancestry(self, current: int) -> list[Any]:
        """The current snapshot and its ancestors, oldest first."""
        from pyiceberg.table.snapshots import ancestors_of

        head = self._snapshot(current)
        return list(ancestors_of(head, self.loaded.metadata))[::-1] if head is not None else []

    def added_since(self, since: int, current: int) -> list[str]:
        from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
        from pyiceberg.table.snapshots import Operation

        start = self._snapshot(since)
        chain = self._ancestry(current)
        ids = [s.snapshot_id for s in chain]
        if start is not None and start.snapshot_id not in ids:
            raise TableRewritten(f"table {self.name}: the snapshot of version {since} is not an ancestor of the current "
                                 f"one (the table was rolled back or replaced since): a full read is needed, then "
                                 f"continue from version {current}")
        if start is None and chain and chain[0].parent_snapshot_id is not None:
            raise VersionUnknown(f"table {self.name}: its first snapshots expired, so what was appended since version 0 "
                                 "is not known; read the whole table")
        after = chain[ids.index(start.snapshot_id) + 1:] if start is not None else chain
        io = self.loaded.io
        added: list[str] = []
        for snap in after:
            if snap.summary is None:
                raise TableRewritten(f"table {self.name}: snapshot {snap.snapshot_id} after version {since} has no "
                                     "summary, so what it changed is not known: a full read is needed")
            operation = snap.summary.operation
            if operation == Operation.REPLACE:
                continue  # the same rows in other files
            if operation != Operation.APPEND:
                raise TableRewritten(f"table {self.name}: snapshot {snap.snapshot_id} after version {since} is an "
                                     f"{operation.value}, which changed rows appends cannot describe: a full read "
                                     f"is needed, then continue from version {current}")
            try:
                for manifest in snap.manifests(io):
                    if manifest.content != ManifestContent.DATA or manifest.added_snapshot_id != snap.snapshot_id:
                        continue
                    for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                        if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snap.snapshot_id:
                            rel = _relative(entry.data_file.file_path, self.location)
                            if rel is None:
                                raise TableUnreadable(f"table {self.name}: data file {entry.data_file.file_path} lies "
                                                      f"outside the table location {self.location}")
                            added.append(rel)
            except StarscanError:
                raise
            except Exception as exc:  # noqa: BLE001 - manifests that cannot be read
                raise TableUnreadable(f"table {self.name}: the manifests of snapshot {snap.snapshot_id} cannot be read: "
                                      f"{_first_line(exc)}") from None
        return sorted(set(added))

    def order(self, version: int) -> int | None:
        chain = [snapshot_version(s.snapshot_id) for s in self._ancestry(snapshot_version(
            self.loaded.metadata.current_snapshot_id))]
        if version == 0:
            return -1  # before the first snapshot
        return chain.index(version) if version in chain else None


def _relative(path: str, location: str) -> str | None:
    if path.startswith("file:") and not location.startswith("file:"):  # a local table: plain paths
        path = local_path(path)
    return path[len(location) + 1:] if path.startswith(location + "/") else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
