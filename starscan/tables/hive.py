"""Tables registered in a Hive metastore, as this process's Spark sees them
(``spark.sql.catalogImplementation=hive``: an embedded Derby metastore, or
``hive.metastore.uris`` for a real one).

The databases served are the ones ``hive_databases`` names. A table's location, columns and
partition columns come from the metastore; a partitioned table's files are those of the
partitions the metastore lists (each partition's own location), so a partition added with
``ALTER TABLE ... ADD PARTITION`` is served and an unregistered folder is not, as in Spark.
Each partition must be a Hive-style folder under the table's location whose name spells
its values (both engines read partition values from folder names); anything else is refused
by name, as are views. ORC tables are read by the sql engine (the plan names their format).
Tables in any other format Spark reads (text with a ``ROW FORMAT``, CSV, JSON, Avro, ...) are
read by the sql engine through Spark's own reader for the table, with the table's SerDe or
data source properties (delimiter, null format, escape, header): the plan's format is
``metastore``. A format whose reader this Spark lacks (a SerDe class or a data source module
not on its classpath) is refused by name.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import unquote

from cachetools import LRUCache

from starscan.core.errors import DatabaseNotFound, TableNotFound, TableUnreadable
from starscan.storage.files import is_hidden
from starscan.storage.hadoop_paths import HIVE_DEFAULT_PARTITION, partition_of, unescape_path_name
from starscan.storage.stores import StorageOptions, local_path, open_storage
from starscan.tables.catalog_tables import CatalogTable, asking
from starscan.tables.tablets import hash_int


class SessionJvm(Protocol):
    """A Spark session's JVM side (starscan.spark.pyspark_internals.SessionJvm, the one place
    that reaches it): Spark's classes, the session catalog, its SQL configuration."""

    @property
    def jvm(self) -> Any: ...

    def catalog(self) -> Any: ...

    def sql_conf(self) -> Any: ...

    def as_java_map(self, scala_map: Any) -> Any: ...

#: The file format of a metastore table that Spark's own reader for the table (its Hive SerDe or
#: data source, with the table's properties) reads: text, CSV, JSON, Avro and the rest.
METASTORE = "metastore"
_SERDES = {"org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe": "parquet",
           "org.apache.hadoop.hive.ql.io.orc.OrcSerde": "orc"}


class HiveTables:
    def __init__(self, session: SessionJvm, databases: list[str], options: StorageOptions | None = None,
                 ttl_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.session = session
        self.only = list(databases)
        self.options = options
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshots: LRUCache[tuple[str, str], tuple[float, CatalogTable]] = LRUCache(maxsize=1024)

    def _session_catalog(self) -> Any:
        return self.session.catalog()

    def serves(self, db: str) -> bool:
        return db in self.only

    def databases(self) -> list[str]:
        present = set(self._call(lambda: [str(d) for d in _java_list(self._session_catalog().listDatabases())]))
        return [db for db in self.only if db in present]

    def tables(self, db: str) -> list[str]:
        if not self.serves(db) or db not in self.databases():
            raise DatabaseNotFound(db)
        # listTables also names the session's temporary views (which have no database): not tables.
        names = self._call(lambda: [t.table() for t in _java_list(self._session_catalog().listTables(db))
                                    if t.database().isDefined()])
        return sorted(str(n) for n in names)

    def has_table(self, db: str, table: str) -> bool:
        return self.serves(db) and table in self.tables(db)

    def invalidate(self, db: str, table: str) -> None:
        with self._lock:
            self._snapshots.pop((db, table), None)

    def changes(self, db: str, table: str) -> None:
        """None: a Hive table's version is a hash of its file set, so the history starscan
        keeps of the file sets it observed tells its changes, as for a folder table."""
        return None

    def snapshot(self, db: str, table: str) -> CatalogTable:
        now = self._clock()
        with self._lock:
            cached = self._snapshots.get((db, table))
        if cached is not None and now - cached[0] < self._ttl_s:
            return cached[1]
        found = self._read(db, table)
        if cached is not None and cached[1] == found:
            found = cached[1]  # unchanged: the same object, so its tablets are reused
        with self._lock:
            self._snapshots[(db, table)] = (now, found)
        return found

    def _read(self, db: str, table: str) -> CatalogTable:
        name = f"{db}.{table}"
        if not self.has_table(db, table):
            if not self.serves(db) or db not in self.databases():
                raise DatabaseNotFound(db)
            raise TableNotFound(table)
        jvm: Any = self.session.jvm
        ident = jvm.org.apache.spark.sql.catalyst.TableIdentifier(table, jvm.scala.Some(db))
        catalog = self._session_catalog()
        meta = self._call(lambda: catalog.getTableMetadata(ident))
        kind = str(meta.tableType().name())
        if kind == "VIEW":
            raise TableUnreadable(f"table {name} is a view; starscan serves tables")
        provider = str(meta.provider().get()).lower() if meta.provider().isDefined() else "hive"
        serde = str(meta.storage().serde().get()) if meta.storage().serde().isDefined() else ""
        file_format = provider if provider in ("parquet", "orc") else _SERDES.get(serde) if provider == "hive" else None
        if file_format is None:
            _check_reader(name, self.session, provider, serde)
            file_format = METASTORE
        location = unquote(str(meta.location().toString())).rstrip("/")  # a URI: its text is %-encoded
        storage = open_storage(location, self.options)
        if storage.is_local:
            location = local_path(location)
        partition_columns = tuple(str(c) for c in _java_list(meta.partitionColumnNames()))
        files: list[tuple[str, int, int, tuple[tuple[str, str | None], ...], str | None]] = []
        if partition_columns:
            partitions = self._call(lambda: _java_list(catalog.listPartitions(ident, jvm.scala.Option.empty())))
            for partition in partitions:
                spec = {str(k): (None if v is None else str(v))
                        for k, v in self.session.as_java_map(partition.spec()).items()}
                where = unquote(str(partition.location().toString())).rstrip("/")
                if storage.is_local:
                    where = local_path(where)
                folder, values = _folder_of(name, where, location, partition_columns, spec)
                for entry in storage.walk_files(storage.join(location, folder)):
                    if "/" not in entry.name and not is_hidden(entry.name):
                        files.append((f"{folder}/{entry.name}", entry.size, entry.mtime_ns, values, None))
        else:
            for entry in storage.walk_files(location):
                if "/" not in entry.name and not is_hidden(entry.name):
                    files.append((entry.name, entry.size, entry.mtime_ns, (), None))
        files.sort()
        version = hash_int("\n".join(f"{p}|{s}|{m}" for p, s, m, _, _ in files), 31)
        schema = json.loads(str(meta.schema().json()))
        return CatalogTable(location, storage, version, json.dumps(schema), tuple(files), partition_columns,
                            file_format=file_format, kind="hive", versions_from_files=True)

    def _call(self, fn: Callable[[], Any]) -> Any:
        return asking("the Hive metastore", fn)

def _folder_of(name: str, where: str, location: str, columns: tuple[str, ...],
               spec: dict[str, str | None]) -> tuple[str, tuple[tuple[str, str | None], ...]]:
    """A partition's folder under the table and its values as the folder spells them,
    checked to be the metastore's."""
    if not where.startswith(location + "/"):
        raise TableUnreadable(f"table {name}: partition {spec} lies at {where}, outside the table's location; "
                              "starscan reads partitions in Hive-style folders under it")
    folder = where[len(location) + 1:]
    values = partition_of(folder + "/")
    spelled = [(col.lower(), None if raw is None else unescape_path_name(raw)) for col, raw in values]
    wanted = [(col.lower(), None if spec.get(col) in (None, HIVE_DEFAULT_PARTITION) else spec.get(col)) for col in columns]
    if len(folder.split("/")) != len(columns) or spelled != wanted:
        raise TableUnreadable(f"table {name}: partition folder {folder} does not spell the partition {spec}")
    return folder, tuple((col, raw) for col, (_, raw) in zip(columns, values))


def _check_reader(name: str, session: SessionJvm, provider: str, serde: str) -> None:
    """TableUnreadable when this Spark has no reader for the table's format: its Hive SerDe
    class, or its data source (Avro's is a module Spark does not bundle)."""
    jvm = session.jvm
    if provider == "hive":
        if not serde:
            raise TableUnreadable(f"table {name} is a Hive table with no SerDe; starscan cannot read it")
        try:
            jvm.java.lang.Class.forName(serde, False, jvm.java.lang.Thread.currentThread().getContextClassLoader())
        except Exception:  # noqa: BLE001 - py4j wraps ClassNotFoundException
            raise TableUnreadable(f"table {name} is stored with the Hive SerDe {serde}, which this server's Spark does "
                                  "not have: add the jar that holds it to Spark (spark.jars) to serve the table") from None
        return
    try:
        jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            provider, session.sql_conf())
    except Exception:  # noqa: BLE001 - py4j wraps AnalysisException
        raise TableUnreadable(f"table {name} is a {provider} table, and this server's Spark has no {provider} data "
                              f"source: add its module to Spark (spark.jars.packages or spark.jars) to serve the "
                              "table") from None


def _java_list(seq: Any) -> list[Any]:
    """A Scala Seq as a Python list."""
    out = []
    iterator = seq.iterator()
    while iterator.hasNext():
        out.append(iterator.next())
    return out
