"""Table schemas, read by Spark from the table's Parquet files and cached per version."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from cachetools import LRUCache
from pyspark.sql import types as T

from starscan.catalog import TableSnapshot
from starscan.errors import SqlInvalid, TableUnreadable
from starscan.hadoop_paths import check_openable, literal
from starscan.spark import spark_problem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_lock = threading.Lock()


def schema_hash(schema: T.StructType) -> int:
    import hashlib

    digest = hashlib.blake2b(schema.json().encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF or 1


class SchemaResolver:
    """``snapshot -> StructType``: Spark's own view of the table (partition columns last)."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self._cache: LRUCache[tuple[str, int], T.StructType] = LRUCache(maxsize=1024)

    def schema(self, snap: TableSnapshot) -> T.StructType:
        key = (str(snap.location), snap.version)
        with _lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        if not snap.tablets:
            raise SqlInvalid(f"table {snap.qualified_name} has no data files, so it has no schema yet")
        check_openable(snap.qualified_name, str(snap.location), (f.path for f in snap.files))
        try:
            spark_schema = self.spark.read.parquet(literal(str(snap.location))).schema
        except Exception as exc:
            if spark_problem(self.spark) is not None:
                raise  # Spark itself is gone: the caller reports that
            raise TableUnreadable(f"table {snap.qualified_name} cannot be read by Spark: "
                                  f"{_reason(exc, str(snap.location))}") from None
        schema = _with_footer_details(spark_schema, snap)
        with _lock:
            self._cache[key] = schema
        return schema


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
    import json

    import pyarrow.parquet as pq

    first = snap.files[0]
    try:
        meta = pq.read_schema(snap.location / first.path).metadata or {}
        written = T.StructType.fromJson(json.loads(meta[SPARK_ROW_METADATA]))
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
