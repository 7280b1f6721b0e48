"""Delta tables: the files, version and schema of a table folder that holds a ``_delta_log``.

A Delta table's folder also holds the files of older versions until they are vacuumed, so
listing it would serve removed rows: its data files are the add actions of its current
version, read with ``deltalake`` (delta-rs). The version is Delta's own version number; the
schema is Delta's (which is Spark's schema JSON). Each add action is matched with the file
the store lists (size and modification time are then the store's, which is what scans check).

Deletion vectors (rows deleted without rewriting their file) go into the plan with each file
(starscan.arrow.deletes), and every reader leaves those rows out. What cannot be read exactly
is refused with an error that names it: reader features this module does not know and
files outside the table folder.

Partition values: where every file's folders spell its values (what Spark writes), they are
read from the folders, as Spark reads them; otherwise (column mapping, whose writers put
files in random prefixes, or any file whose folders disagree with its log entry) each file
carries the values its add action records, and the readers take them from the plan.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from starscan.arrow.deletes import DeletesUnreadable, DeletionVector
from starscan.core.errors import StarscanError, TableRewritten, TableUnreadable, VersionUnknown
from starscan.storage.hadoop_paths import escape_percent, partition_of, unescape_path_name

if TYPE_CHECKING:
    from starscan.arrow.nested import FileName
    from starscan.storage.stores import Entry, Storage

DELTA_LOG = "_delta_log"
# Reader features that change nothing about which rows a file holds or how its columns are
# named (deletion vectors are checked per file, column mapping by its mode).
_HARMLESS_READER_FEATURES = {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "deletionVectors",
                             "columnMapping", "typeWidening", "variantType"}
_PARTITION_TYPES = ("string", "integer", "long", "short", "byte", "date", "boolean")


@dataclass(frozen=True)
class DeltaFiles:
    version: int
    schema_json: str                       # Spark's StructType JSON, columns in Delta's order
    partition_columns: tuple[str, ...]
    files: tuple[DeltaFile, ...]
    file_columns: tuple[tuple[str, FileName], ...] = ()  # column -> its name in the files (column mapping)
    # True: the partition values are each file's log entry's (DeltaFile.recorded), not its folders'.
    partitions_recorded: bool = False


@dataclass(frozen=True)
class DeltaFile:
    path: str
    size: int
    mtime_ns: int
    # (column, value) as folders spell values (starscan.storage.hadoop_paths): the folders'
    # own spelling, or the log's value spelled so that it decodes back
    partition: tuple[tuple[str, str | None], ...]
    deletes: str | None          # row-level deletes (starscan.arrow.deletes JSON), or None
    recorded: str | None = None  # the log's partition values (JSON {column: text}) when read from there


def read_delta(table: str, location: str, storage: Storage, listed: list[Entry]) -> DeltaFiles:
    """The current version of the Delta table at ``location``; ``listed`` is the store's
    listing of the folder (relative paths with size and modification time)."""
    try:
        from deltalake import DeltaTable
    except ImportError:  # pragma: no cover - a dependency
        raise TableUnreadable(f"table {table} is a Delta table and the deltalake package is not installed") from None
    try:
        delta = DeltaTable(location, storage_options=storage.delta_options())
        protocol = delta.protocol()
        metadata = delta.metadata()
        schema_json = delta.schema().to_json()
        import pyarrow as pa

        actions = pa.table(delta.get_add_actions(flatten=False)).to_pylist()
        version = delta.version()
    except StarscanError:
        raise
    except Exception as exc:  # noqa: BLE001 - delta-rs raises its own kinds: the reader gets the words
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TableUnreadable(f"table {table}: its Delta log cannot be read: {first[:300]}") from None
    vectors: dict[str, DeletionVector] = {}
    if "deletionVectors" in (protocol.reader_features or ()):
        vectors = _deletion_vectors(table, location, storage, version,
                                    {unquote(a["path"]) for a in actions})
    unknown = set(protocol.reader_features or ()) - _HARMLESS_READER_FEATURES
    if unknown:
        raise TableUnreadable(f"table {table} uses Delta reader features starscan does not read: {', '.join(sorted(unknown))}")
    mode = _column_mapping_mode(protocol, metadata.configuration or {})
    fields = {f["name"]: f for f in json.loads(schema_json)["fields"]}
    partition_columns = tuple(metadata.partition_columns)
    file_columns = _file_columns(table, mode, fields)
    for col in partition_columns:
        kind = fields.get(col, {}).get("type")
        if kind not in _PARTITION_TYPES:
            raise TableUnreadable(f"table {table} is partitioned by {col} of Delta type {kind}; starscan reads Delta "
                                  f"partition columns of types {', '.join(_PARTITION_TYPES)}")
    by_path = {e.name: e for e in listed}
    found = []
    for action in actions:
        path = unquote(action["path"])
        if "://" in path or path.startswith("/"):
            raise TableUnreadable(f"table {table}: data file {path} lies outside the table folder (a shallow clone?)")
        entry = by_path.get(path)
        if entry is None:
            raise TableUnreadable(f"table {table} version {version}: data file {path} of its Delta log is not in the "
                                  "table folder")
        values = {col: _text(value) for col, value in (action.get("partition") or {}).items()}
        found.append((path, entry, values, vectors.get(path)))
    recorded = bool(partition_columns) and (bool(file_columns) or not all(
        _folders_spell(path, partition_columns, values) for path, _, values, _ in found))
    files = []
    for path, entry, values, vector in found:
        if recorded:
            partition = tuple((col, None if values.get(col) is None else escape_percent(str(values[col])))
                              for col in partition_columns)
            text = json.dumps({col: values.get(col) for col in partition_columns}, sort_keys=True)
        else:
            folders, text = dict(partition_of(path)), None
            partition = tuple((col, folders[col]) for col in partition_columns)
        files.append(DeltaFile(path, entry.size, entry.mtime_ns, partition, vector.to_json() if vector else None, text))
    files.sort(key=lambda f: f.path)
    return DeltaFiles(version, schema_json, partition_columns, tuple(files), file_columns, recorded)


def _column_mapping_mode(protocol: Any, configuration: dict[str, str]) -> str:
    """The column mapping mode in effect: the table property's, where the protocol supports
    column mapping (reader version 2, or 3 with the ``columnMapping`` reader feature);
    otherwise none, whatever the property says (the files then use the schema's names, as
    writers that ignored the property wrote them)."""
    mode = configuration.get("delta.columnMapping.mode", "none")
    version = int(protocol.min_reader_version or 1)
    supported = version == 2 or (version >= 3 and "columnMapping" in (protocol.reader_features or ()))
    return mode if supported else "none"


def _file_columns(table: str, mode: str, fields: dict[str, Any]) -> tuple[tuple[str, FileName], ...]:
    """Column mapping (``name`` or ``id``): each column's physical name, which its data files
    use (a rename changes only the schema's name; a dropped column's name may come back with
    new data), with the physical names of the struct fields nested in it
    (starscan.arrow.nested). Writers put the physical name and the field id in the files in
    both modes; columns are read by the physical name."""
    if mode == "none":
        return ()
    if mode not in ("name", "id"):
        raise TableUnreadable(f"table {table} uses Delta column mapping mode {mode!r}, which the Delta protocol "
                              "does not define")
    return tuple((name, _physical(table, name, f)) for name, f in fields.items())


def _physical(table: str, where: str, field: dict[str, Any]) -> FileName:
    """A field's physical name, with its nested struct fields' (a plain name when it has none)."""
    physical = (field.get("metadata") or {}).get("delta.columnMapping.physicalName")
    if not physical:
        raise TableUnreadable(f"table {table} uses Delta column mapping but column {where} has no physical name")
    inner = _nested_physical(table, where, field.get("type"))
    return {"key": str(physical), **inner} if inner else str(physical)


def _nested_physical(table: str, where: str, kind: Any) -> dict[str, Any]:
    """The physical names inside a Delta type (Spark's schema JSON): a struct's fields', an
    array's element's, a map's keys' and values'; empty for a type with no struct inside."""
    if not isinstance(kind, dict):
        return {}
    if kind.get("type") == "struct":
        return {"fields": {f["name"]: _physical(table, f"{where}.{f['name']}", f) for f in kind.get("fields", ())}}
    if kind.get("type") == "array":
        element = _nested_physical(table, f"{where}.element", kind.get("elementType"))
        return {"element": element} if element else {}
    if kind.get("type") == "map":
        keys = _nested_physical(table, f"{where}.key", kind.get("keyType"))
        values = _nested_physical(table, f"{where}.value", kind.get("valueType"))
        return {**({"keys": keys} if keys else {}), **({"values": values} if values else {})}
    return {}


class DeltaChanges:
    """A Delta table's changes between two versions, from the commits of its log: the files
    added with a data change after the first version (what Delta's own streaming source
    reads). Files rewritten without a data change (OPTIMIZE) are not rows appended and are
    skipped; a file removed with a data change that was there at the first version means rows
    were deleted or updated, which appends cannot say: TableRewritten. A commit no longer in
    the log (log retention removed it) makes the first version unknown."""

    def __init__(self, table: str, location: str, storage: Storage, current: int):
        self.table = table
        self.location = location
        self.storage = storage
        self.current = current

    def added_since(self, since: int, current: int) -> list[str]:
        if not 0 <= since <= current:
            raise VersionUnknown(f"table {self.table} has no Delta version {since}; its current version is {current}")
        added: dict[str, None] = {}
        for version in range(since + 1, current + 1):
            # A commit's actions are a set, in no order: its removes are checked against what
            # was appended before it, then its adds count.
            actions = self._commit(version, since)
            for action in actions:
                if "remove" in action and action["remove"].get("dataChange", True):
                    path = unquote(action["remove"]["path"])
                    if path not in added:
                        raise TableRewritten(
                            f"table {self.table}: Delta version {version} removed rows that were there at version "
                            f"{since} (file {path}: a delete, update, merge or overwrite): a full read is needed, then "
                            f"continue from version {current}")
                    del added[path]  # appended after `since` and removed again: its rows are gone
            for action in actions:
                if "add" in action and action["add"].get("dataChange", True):
                    added[unquote(action["add"]["path"])] = None
        return sorted(added)

    def order(self, version: int) -> int | None:
        return version if 0 <= version <= self.current else None

    def _commit(self, version: int, since: int) -> list[dict[str, Any]]:
        raw = self.storage.read_bytes(self.storage.join(self.location, DELTA_LOG, f"{version:020d}.json"))
        if raw is None:
            raise VersionUnknown(f"table {self.table}: commit {version} is no longer in its Delta log (log retention), "
                                 f"so what changed after version {since} is not known; read the whole table")
        try:
            return [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
        except ValueError:
            raise TableUnreadable(f"table {self.table}: commit {version} of its Delta log is not JSON lines") from None


def _deletion_vectors(table: str, location: str, storage: Storage, version: int,
                      paths: set[str]) -> dict[str, DeletionVector]:
    """The deletion vector of each current data file that has one, from the log: delta-rs
    gives the files of the version but not their vectors' descriptors, so the log is
    replayed for them, newest commit first, down to the last checkpoint (a file's newest add
    action is the one that counts), then the checkpoint's add actions for the rest."""
    found: dict[str, DeletionVector | None] = {}
    checkpoint = _last_checkpoint(storage, location)
    floor = checkpoint[0] if checkpoint is not None and checkpoint[0] <= version else -1
    for v in range(version, floor, -1):
        raw = storage.read_bytes(storage.join(location, DELTA_LOG, f"{v:020d}.json"))
        if raw is None:
            raise TableUnreadable(f"table {table}: commit {v} is not in its Delta log and no checkpoint covers it, so "
                                  "its deletion vectors are not known")
        for line in raw.decode("utf-8").splitlines():
            if '"add"' not in line:
                continue
            add = json.loads(line).get("add")
            if not add:
                continue
            path = unquote(add["path"])
            if path in paths and path not in found:
                found[path] = _vector(table, path, add.get("deletionVector"))
        if len(found) == len(paths):
            break
    missing = paths - set(found)
    if missing and checkpoint is not None and checkpoint[0] <= version:
        for add in _checkpoint_adds(table, location, storage, checkpoint):
            path = unquote(add["path"])
            if path in missing and path not in found:
                found[path] = _vector(table, path, add.get("deletionVector"))
    return {path: vector for path, vector in found.items() if vector is not None}


def _vector(table: str, path: str, descriptor: dict[str, Any] | None) -> DeletionVector | None:
    if not descriptor:
        return None
    try:
        vector = DeletionVector.from_log(descriptor)
    except DeletesUnreadable as exc:
        raise TableUnreadable(f"table {table}: the deletion vector of data file {path} cannot be read: {exc}") from None
    return vector if vector.cardinality else None


def _last_checkpoint(storage: Storage, location: str) -> tuple[int, tuple[str, ...]] | None:
    """(version, the names of its files in ``_delta_log``) of the table's last checkpoint,
    from ``_last_checkpoint``: a classic checkpoint (one file, or ``parts`` files) or a V2
    checkpoint (one UUID-named file, JSON or Parquet, whose add actions may be in sidecar
    files). None without one."""
    raw = storage.read_bytes(storage.join(location, DELTA_LOG, "_last_checkpoint"))
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        version = int(doc["version"])
        parts = int(doc["parts"]) if doc.get("parts") else None
        v2 = doc.get("v2Checkpoint") or {}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if isinstance(v2, dict) and v2.get("path"):
        return version, (str(v2["path"]),)
    if parts is not None:
        return version, tuple(f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1))
    classic = f"{version:020d}.checkpoint.parquet"
    if storage.file_identity(storage.join(location, DELTA_LOG, classic)) is not None:
        return version, (classic,)
    # A V2 checkpoint that _last_checkpoint does not describe: its file is named by a UUID.
    prefix = f"{version:020d}.checkpoint."
    named = sorted(e.name for e in storage.walk_files(storage.join(location, DELTA_LOG))
                   if "/" not in e.name and e.name.startswith(prefix) and e.name.endswith((".json", ".parquet")))
    return version, tuple(named[:1]) or (classic,)


def _checkpoint_adds(table: str, location: str, storage: Storage,
                     checkpoint: tuple[int, tuple[str, ...]]) -> list[dict[str, Any]]:
    """The add actions of a checkpoint: those in its files, and those of the sidecar files
    a V2 checkpoint names (``sidecar`` actions; a path relative to ``_delta_log/_sidecars/``
    or a URI)."""
    _, names = checkpoint
    adds: list[dict[str, Any]] = []
    sidecars: list[str] = []
    for name in names:
        path = storage.join(location, DELTA_LOG, name)
        if storage.file_identity(path) is None:
            raise TableUnreadable(f"table {table}: its Delta checkpoint {name} is not there, so its deletion vectors "
                                  "are not known")
        if name.endswith(".json"):
            raw = storage.read_bytes(path) or b""
            for line in raw.decode("utf-8").splitlines():
                action = json.loads(line) if line.strip() else {}
                if action.get("add"):
                    adds.append(action["add"])
                elif action.get("sidecar"):
                    sidecars.append(str(action["sidecar"]["path"]))
        else:
            found = _parquet_actions(storage, path, ("add", "sidecar"))
            adds.extend(found["add"])
            sidecars.extend(str(s["path"]) for s in found["sidecar"])
    for sidecar in sidecars:
        where = sidecar if "://" in sidecar else storage.join(location, DELTA_LOG, "_sidecars", sidecar)
        if storage.file_identity(where) is None:
            raise TableUnreadable(f"table {table}: the sidecar file {sidecar} of its Delta checkpoint is not there, so "
                                  "its deletion vectors are not known")
        adds.extend(_parquet_actions(storage, where, ("add",))["add"])
    return adds


def _parquet_actions(storage: Storage, path: str, kinds: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """The actions of the given kinds in a Parquet checkpoint or sidecar file (a column per
    kind; a kind the file has no column for has none)."""
    import pyarrow.parquet as pq

    source = storage.open(path)
    present = set(pq.read_schema(source).names)
    source = storage.open(path)
    wanted = [k for k in kinds if k in present]
    read = pq.read_table(source, columns=wanted) if wanted else None
    return {k: ([a for a in read.column(k).to_pylist() if a] if read is not None and k in wanted else [])
            for k in kinds}


def _folders_spell(path: str, columns: tuple[str, ...], values: dict[str, str | None]) -> bool:
    """Whether the file's Hive-style folders spell its log entry's partition values (as
    Spark writes them), so that reading the values from the folders, as Spark does, gives
    the log's."""
    folders = dict(partition_of(path))

    def decoded(raw: str | None) -> str | None:
        return None if raw is None else unescape_path_name(raw)

    return all(col in folders and values.get(col) == decoded(folders[col]) for col in columns)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)
