"""Table schemas, read by Spark from the table's Parquet files and cached per version."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from operator import attrgetter
from typing import TYPE_CHECKING, Any, cast

from cachetools import LRUCache
from pyspark.sql import types as T

from starscan.core.errors import SqlInvalid, StarscanError, TableUnreadable
from starscan.spark import pyspark_internals
from starscan.spark.session import spark_problem
from starscan.storage.hadoop_paths import check_openable, literal
from starscan.tables.catalog import TableSnapshot

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from starscan.storage.stores import Storage
    from starscan.tables.tablets import DataFileLike

_lock = threading.Lock()
_path = attrgetter("path")  # a million files' paths gathered in C: 1.3 s in Python (issue 39)


def schema_hash(schema: T.StructType) -> int:
    return hash_of_json(schema.json())


def hash_of_json(schema_json: str) -> int:
    """``schema_hash`` of the schema whose JSON this is."""
    import hashlib

    digest = hashlib.blake2b(schema_json.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF or 1


class SchemaResolver:
    """``snapshot -> StructType``: Spark's own view of the table (partition columns last)."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self._cache: LRUCache[tuple[str, int], T.StructType] = LRUCache(maxsize=1024)
        # The JSON and hash every plan carries, per table version: rendering them took a
        # tenth of a small plan's CPU (bench/RESULTS.md, plan_latency).
        self._texts: LRUCache[tuple[str, int], tuple[T.StructType, str, int]] = LRUCache(maxsize=1024)
        # Footers Spark was asked to read as their tables were listed (``prefetch``), by the
        # file's path, size and time.
        self._footers: LRUCache[tuple[str, int, int], Future[T.StructType]] = LRUCache(maxsize=16)

    def prefetch(self, location: str, version: int, files: Sequence[DataFileLike], storage: Storage) -> None:
        """Start Spark reading the footer a local folder table's schema comes from, as soon as
        a new version of it is listed (``Warehouse.listed``): the JVM reads it while the
        listing's tablets are cut in Python, where the plan would otherwise wait for both in
        turn (3 s of a million files' first plan). ``schema`` takes what it read."""
        with _lock:
            if (location, version) in self._cache:
                return
        if not storage.is_local or not files or self._merges_schemas():
            return
        key = self._footer_key(location, files, storage)
        future: Future[T.StructType] = Future()
        with _lock:
            if key in self._footers:
                return
            self._footers[key] = future

        def read() -> None:
            try:
                future.set_result(self.spark.read.parquet(literal(key[0])).schema)
            except BaseException as exc:  # noqa: BLE001 - handed to the schema's reader
                future.set_exception(exc)

        threading.Thread(target=read, name="starscan-footer-schema", daemon=True).start()

    @staticmethod
    def _footer_key(location: str, files: Sequence[DataFileLike], storage: Storage) -> tuple[str, int, int]:
        """The file Spark takes a folder table's data columns from (a ``_common_metadata``
        or ``_metadata`` summary file if there is one, else the first data file by path),
        with its size and time."""
        for name in ("_common_metadata", "_metadata"):
            summary = storage.join(location, name)
            identity = storage.file_identity(summary)
            if identity is not None:
                return (summary, *identity)
        first = files[0]
        return storage.join(location, first.path), first.size, first.mtime_ns

    def schema_text(self, snap: TableSnapshot, schema: T.StructType) -> tuple[str, int]:
        """``schema.json()`` and ``schema_hash(schema)`` of ``schema(snap)``, kept per table
        version while it is the same schema object."""
        key = (str(snap.location), snap.version)
        with _lock:
            hit = self._texts.get(key)
        if hit is not None and hit[0] is schema:
            return hit[1], hit[2]
        text = schema.json()
        found = (schema, text, hash_of_json(text))
        with _lock:
            self._texts[key] = found
        return found[1], found[2]

    def schema(self, snap: TableSnapshot) -> T.StructType:
        key = (str(snap.location), snap.version)
        with _lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        if snap.schema_json is not None:  # the table format's own (Delta's is Spark's JSON): also when empty
            return T.StructType.fromJson(json.loads(snap.schema_json))
        if not snap.tablets:
            raise SqlInvalid(f"table {snap.qualified_name} has no data files, so it has no schema yet")
        storage = snap.storage
        check_openable(snap.qualified_name, storage.spark_path(snap.location), list(map(_path, snap.files)))
        try:
            if storage.is_local and self._merges_schemas():
                spark_schema = self.spark.read.parquet(literal(snap.location)).schema  # every footer, merged
            else:
                spark_schema = self._schema_of_one_footer(snap)
        except StarscanError:
            raise
        except Exception as exc:
            if spark_problem(self.spark) is not None:
                raise  # Spark itself is gone: the caller reports that
            raise TableUnreadable(f"table {snap.qualified_name} cannot be read by Spark: "
                                  f"{_reason(exc, str(snap.location))}") from None
        schema = _with_footer_details(spark_schema, snap)
        with _lock:
            self._cache[key] = schema
        return schema


    def _merges_schemas(self) -> bool:
        """Whether Spark merges every file's schema (``spark.sql.parquet.mergeSchema``)."""
        return self.spark.conf.get("spark.sql.parquet.mergeSchema", "false") == "true"

    def _schema_of_one_footer(self, snap: TableSnapshot) -> T.StructType:
        """What ``spark.read.parquet(location).schema`` answers without merging schemas,
        without Spark listing the table: Spark reads the data columns from one footer (a
        ``_common_metadata`` or ``_metadata`` summary file if there is one, else the first
        data file; its own order of files is the filesystem's, starscan's is by path), types
        the partition columns by inferring them over the folder names, and merges the two
        (``_merged``). Spark listing a folder of 50,000 files itself took 3.6 s of a 4.8 s
        first plan (bench/notes, issue 39); an object store's files it cannot open at all
        without Hadoop's S3 jars, so there the footer is read with pyarrow."""
        data = self._local_footer_schema(snap) if snap.storage.is_local else _footer_schema(snap)
        if data is None:
            raise TableUnreadable(f"table {snap.qualified_name}: the footer of {snap.files[0].path} cannot be read")
        return _merged(data, self._partition_schema(snap),
                       self.spark.conf.get("spark.sql.caseSensitive", "false") == "true")

    def _local_footer_schema(self, snap: TableSnapshot) -> T.StructType:
        """The data columns, read by Spark itself from the one file it takes them from (or
        being read since the table was listed: ``prefetch``)."""
        key = self._footer_key(str(snap.location), snap.files, snap.storage)
        with _lock:
            prefetched = self._footers.pop(key, None)
        if prefetched is not None:
            return prefetched.result()
        return self.spark.read.parquet(literal(key[0])).schema

    def _partition_schema(self, snap: TableSnapshot) -> T.StructType:
        """``PartitioningUtils.parsePartitions`` (what ``spark.read.parquet`` runs on the
        folders it lists): the same names, types and type inference settings."""
        if not snap.partition_columns:
            return T.StructType([])
        storage = snap.storage
        # A tablet never mixes partitions, so never folders: the folders are its tablets'
        # (a thousand for a million files, where each file was asked before).
        folders = sorted({t.files[0].path.rpartition("/")[0] for t in snap.tablets if t.files})
        conf = self.spark.conf
        return pyspark_internals.parse_partitions(
            self.spark, [storage.spark_path(storage.join(snap.location, folder)) for folder in folders],
            storage.spark_path(snap.location),
            conf.get("spark.sql.sources.partitionColumnTypeInference.enabled", "true") == "true",
            conf.get("spark.sql.caseSensitive", "false") == "true",
            conf.get("spark.sql.sources.validatePartitionColumns", "true") == "true",
            str(conf.get("spark.sql.session.timeZone")))


def _merged(data: T.StructType, partitions: T.StructType, case_sensitive: bool) -> T.StructType:
    """Spark's ``PartitioningUtils.mergeDataAndPartitionSchema``: a partition column also
    in the data keeps the data column's place with the partition column's type; the other
    partition columns follow the data columns."""
    def key(name: str) -> str:
        return name if case_sensitive else name.lower()

    by_name = {key(f.name): f for f in partitions.fields}
    names = {key(f.name) for f in data.fields}
    return T.StructType([by_name.get(key(f.name), f) for f in data.fields]
                        + [f for f in partitions.fields if key(f.name) not in names])


def _footer_schema(snap: TableSnapshot) -> T.StructType | None:
    """The data columns as Spark reads them from the first file: the schema Spark wrote into
    the footer, or pyspark's mapping of its Arrow schema; every field nullable and char or
    varchar read as string, as Spark's file sources read them."""
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    first = snap.files[0]
    try:
        arrow_schema = pq.read_schema(snap.storage.open(snap.storage.join(snap.location, first.path)))
    except StarscanError:
        raise
    except Exception:  # noqa: BLE001 - an unreadable footer: the caller says so
        return None
    meta = arrow_schema.metadata or {}
    if SPARK_ROW_METADATA in meta:
        written = T.StructType.fromJson(json.loads(meta[SPARK_ROW_METADATA]))
    else:
        written = from_arrow_schema(_as_spark_reads(arrow_schema), prefer_timestamp_ntz=False)
    return cast(T.StructType, _as_read(written))


def _as_spark_reads(schema: Any) -> Any:
    """An Arrow schema with unsigned integers as the types Spark reads them as (the next
    wider signed integer; UINT64 as DECIMAL(20, 0)), which pyspark's mapping lacks."""
    import pyarrow as pa

    wider = {8: pa.int16(), 16: pa.int32(), 32: pa.int64()}

    def read_as(t: Any) -> Any:
        if pa.types.is_unsigned_integer(t):
            return wider.get(t.bit_width, pa.decimal128(20, 0))
        return t

    return pa.schema([f.with_type(read_as(f.type)) for f in schema], metadata=schema.metadata)


def _as_read(dt: T.DataType) -> T.DataType:
    if isinstance(dt, T.StructType):
        return T.StructType([T.StructField(f.name, _as_read(f.dataType), True, f.metadata) for f in dt.fields])
    if isinstance(dt, T.ArrayType):
        return T.ArrayType(_as_read(dt.elementType), True)
    if isinstance(dt, T.MapType):
        return T.MapType(_as_read(dt.keyType), _as_read(dt.valueType), True)
    if isinstance(dt, (T.CharType, T.VarcharType)):
        return T.StringType()
    return dt


def _reason(exc: BaseException, location: str) -> str:
    """The first line of Spark's message, with the table's location left out."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    for prefix in (f"file:{location}/", f"file://{location}/", f"{location}/"):
        first = first.replace(prefix, "")
    return first[:500]


SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"


def _with_footer_details(schema: T.StructType, snap: TableSnapshot) -> T.StructType:
    """Spark reads file sources as all-nullable and drops char/varchar; the writer's schema in
    the Parquet footer (first file) still has NOT NULL and the declared char/varchar types."""
    import pyarrow.parquet as pq

    first = snap.files[0]
    try:
        meta = pq.read_schema(snap.storage.open(snap.storage.join(snap.location, first.path))).metadata or {}
        written = T.StructType.fromJson(json.loads(meta[SPARK_ROW_METADATA]))
    except StarscanError:
        raise
    except Exception:  # noqa: BLE001 - not written by Spark, unreadable footer: keep Spark's view
        return schema
    by_name = {f.name: f for f in written.fields}
    fields = []
    for f in schema.fields:
        w = by_name.get(f.name)
        if w is not None and w.dataType == f.dataType:
            f = T.StructField(f.name, f.dataType, w.nullable, {**(f.metadata or {}), **(w.metadata or {})})
        fields.append(f)
    return T.StructType(fields)
