"""Table schemas, read by Spark from the table's Parquet files and cached per version."""

from __future__ import annotations

import threading

from cachetools import LRUCache
from pyspark.sql import types as T

from starscan.catalog import TableSnapshot
from starscan.errors import SqlInvalid

_lock = threading.Lock()


def schema_hash(schema: T.StructType) -> int:
    import hashlib

    digest = hashlib.blake2b(schema.json().encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF or 1


class SchemaResolver:
    """``snapshot -> StructType``: Spark's own view of the table (partition columns last)."""

    def __init__(self, spark):
        self.spark = spark
        self._cache: LRUCache = LRUCache(maxsize=1024)

    def schema(self, snap: TableSnapshot) -> T.StructType:
        key = (str(snap.location), snap.version)
        with _lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        if not snap.tablets:
            raise SqlInvalid(f"table {snap.qualified_name} has no data files, so it has no schema yet")
        schema = self.spark.read.parquet(str(snap.location)).schema
        with _lock:
            self._cache[key] = schema
        return schema
