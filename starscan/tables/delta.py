"""Delta tables: the files, version and schema of a table folder that holds a ``_delta_log``.

A Delta table's folder also holds the files of older versions until they are vacuumed, so
listing it would serve removed rows: its data files are the add actions of its current
version, read with ``deltalake`` (delta-rs). The version is Delta's own version number; the
schema is Delta's (which is Spark's schema JSON). Each add action is matched with the file
the store lists (size and modification time are then the store's, which is what scans check).

What cannot be read exactly is refused with an error that names it: deletion vectors in use
(rows deleted without rewriting their file), column mapping (physical column names that differ
from the schema's), reader features this module does not know, files outside the table
folder, and partition values that the folder names do not spell.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from starscan.core.errors import StarscanError, TableRewritten, TableUnreadable, VersionUnknown
from starscan.storage.hadoop_paths import partition_of, unescape_path_name

if TYPE_CHECKING:
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
    files: tuple[tuple[str, int, int, tuple[tuple[str, str | None], ...]], ...]  # path, size, mtime_ns, partition


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
    if "deletionVectors" in (protocol.reader_features or ()):
        _refuse_deletion_vectors(table, version, delta)
    unknown = set(protocol.reader_features or ()) - _HARMLESS_READER_FEATURES
    if unknown:
        raise TableUnreadable(f"table {table} uses Delta reader features starscan does not read: {', '.join(sorted(unknown))}")
    mode = (metadata.configuration or {}).get("delta.columnMapping.mode", "none")
    if mode != "none":
        raise TableUnreadable(f"table {table} uses Delta column mapping (mode {mode}): its files name columns "
                              "differently from its schema, which starscan does not read")
    fields = {f["name"]: f for f in json.loads(schema_json)["fields"]}
    partition_columns = tuple(metadata.partition_columns)
    for col in partition_columns:
        kind = fields.get(col, {}).get("type")
        if kind not in _PARTITION_TYPES:
            raise TableUnreadable(f"table {table} is partitioned by {col} of Delta type {kind}; starscan reads Delta "
                                  f"partition columns of types {', '.join(_PARTITION_TYPES)}")
    by_path = {e.name: e for e in listed}
    files = []
    for action in actions:
        path = unquote(action["path"])
        if "://" in path or path.startswith("/"):
            raise TableUnreadable(f"table {table}: data file {path} lies outside the table folder (a shallow clone?)")
        entry = by_path.get(path)
        if entry is None:
            raise TableUnreadable(f"table {table} version {version}: data file {path} of its Delta log is not in the "
                                  "table folder")
        values = action.get("partition") or {}
        partition = _partition_of_folders(table, path, partition_columns, values)
        files.append((path, entry.size, entry.mtime_ns, partition))
    files.sort()
    return DeltaFiles(version, schema_json, partition_columns, tuple(files))


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


def _refuse_deletion_vectors(table: str, version: int, delta: Any) -> None:
    """Rows deleted by a deletion vector are still in their file: serving the file whole
    would return them. A table whose current files have none is read as usual."""
    import pyarrow as pa

    try:
        marked = pa.table(delta.deletion_vectors())
    except Exception as exc:  # noqa: BLE001 - delta-rs' own error kinds
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TableUnreadable(f"table {table} version {version}: its Delta deletion vectors cannot be read "
                              f"({first[:200]}), so which rows are deleted is not known") from None
    if marked.num_rows:
        files = [str(p).rsplit("/", 1)[-1] for p in marked.column("filepath").to_pylist()[:3]]
        raise TableUnreadable(f"table {table} version {version}: {marked.num_rows} data file(s) ({', '.join(files)}"
                              f"{', ...' if marked.num_rows > 3 else ''}) have rows deleted by a Delta deletion vector, "
                              "which starscan does not apply; rewrite them (REORG TABLE ... APPLY (PURGE)) to serve "
                              "the table")


def _partition_of_folders(table: str, path: str, columns: tuple[str, ...],
                          values: dict[str, Any]) -> tuple[tuple[str, str | None], ...]:
    """The partition as its folders spell it, checked against the log's values: both engines
    read a partition value from the folder name, as Spark does."""
    folders = dict(partition_of(path))
    out = []
    for col in columns:
        if col not in folders:
            raise TableUnreadable(f"table {table}: data file {path} is not in a {col}=... folder; starscan reads Delta "
                                  "partition values from Hive-style folders")
        raw = folders[col]
        if _text(values.get(col)) != (None if raw is None else unescape_path_name(raw)):
            raise TableUnreadable(f"table {table}: data file {path} is in folder {col}={raw} but its Delta partition "
                                  f"value is {values.get(col)!r}")
        out.append((col, raw))
    return tuple(out)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)
