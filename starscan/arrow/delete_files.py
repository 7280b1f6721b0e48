"""A data file's row-level deletes read from the store: the positions of its deleted rows
(Iceberg position delete files, Iceberg and Delta deletion vectors) and the keys its
Iceberg equality delete files delete, in whatever format their writer used (Parquet, ORC,
Avro). What the deletes mean and how they are matched is starscan.arrow.deletes'; this
module fetches them, and keeps the equality keys a process built (many data files share
the same delete files).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from starscan.arrow.avro import MAGIC as AVRO_MAGIC
from starscan.arrow.avro import AvroDataFile
from starscan.arrow.deletes import DeletesUnreadable, DeletionVector, EqualityKeys, IcebergDeletes, row_deletes
from starscan.arrow.nested import file_fields
from starscan.arrow.split_plan import ArrowRead, FilePart, PlannedFileGone, SplitReadError, first_line
from starscan.storage.stores import Storage


def deleted_rows(read: ArrowRead, part: FilePart) -> tuple[Any, list[tuple[EqualityKeys, tuple[int, ...]]]]:
    """The file's deletes (starscan.arrow.deletes), read from the store: the positions of its
    deleted rows (sorted), and its equality deletes as sets of keys with their field ids."""
    assert part.deletes is not None
    storage = read.storage
    try:
        deletes = row_deletes(part.deletes)
        if isinstance(deletes, DeletionVector):
            vector = deletes

            def read_range(offset: int, length: int) -> bytes:
                assert vector.path is not None
                return _read_range(storage, vector.path, offset, length)

            return vector.positions(read_range), []

        def read_positions(path: str, data_file: str) -> Any:
            table = _delete_file(storage, path, ["file_path", "pos"], [("file_path", "=", data_file)])
            return table.column("pos").to_numpy()

        return (deletes.positions(read_positions, lambda path, offset, length: _read_range(storage, path, offset, length)),
                _equality_keys(read, deletes))
    except DeletesUnreadable as exc:
        raise SplitReadError(f"table {read.table}: file {part.relative}: its row deletes cannot be read: "
                             f"{exc}") from None
    except FileNotFoundError:
        raise PlannedFileGone(f"table {read.table} version {read.version} is gone: a delete file of file "
                              f"{part.relative} was removed; ask the FE for a new plan") from None
    except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
        raise SplitReadError(f"table {read.table}: file {part.relative}: its row deletes cannot be read: "
                             f"{first_line(exc, part)}") from None


def _read_range(storage: Storage, path: str, offset: int, length: int) -> bytes:
    """``length`` bytes of a file of the store from ``offset`` (a deletion vector's)."""
    source = storage.open(path)
    handle = pa.OSFile(source) if isinstance(source, str) else source
    try:
        return bytes(handle.read_at(length, offset))
    finally:
        handle.close()


_KEYS_CACHE_BYTES = 256 << 20
_keys_lock = threading.Lock()
_keys_cache: Any = None


def _equality_keys(read: ArrowRead, deletes: IcebergDeletes) -> list[tuple[EqualityKeys, tuple[int, ...]]]:
    """The deleted keys of the data file's equality delete files, one set per list of field
    ids. Many data files share the same delete files (a global delete of an unpartitioned
    table applies to every older file), so a process keeps the sets it built, by the files'
    locations and identities (delete files are never rewritten in place), within 256 MiB."""
    global _keys_cache
    by_ids: dict[tuple[int, ...], list[str]] = {}
    for e in deletes.equality:
        by_ids.setdefault(e.field_ids, []).append(e.file)
    out = []
    for ids, files in by_ids.items():
        key = (ids, tuple((path, read.storage.file_identity(path)) for path in files))
        if any(identity is None for _, identity in key[1]):
            raise FileNotFoundError(files[0])
        with _keys_lock:
            if _keys_cache is None:
                from cachetools import LRUCache

                _keys_cache = LRUCache(maxsize=_KEYS_CACHE_BYTES, getsizeof=lambda k: max(k.nbytes, 1))
            found = _keys_cache.get(key)
        if found is None:
            tables = [_equality_file(read, path, ids) for path in files]
            merged = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
            found = EqualityKeys([merged.column(i).combine_chunks() for i in range(merged.num_columns)])
            if found.nbytes <= _KEYS_CACHE_BYTES // 4:
                with _keys_lock:
                    _keys_cache[key] = found
        out.append((found, ids))
    return out


def _delete_file(storage: Storage, path: str, columns: list[str] | Callable[[pa.Schema], list[str]],
                 filters: list[tuple[str, str, str]] | None = None) -> pa.Table:
    """Columns of an Iceberg delete file, which its writer wrote in the table's format:
    Parquet (``filters`` applied while reading), ORC or Avro (filtered after).
    ``columns``: their names, or a function of the file's schema giving them."""
    source = storage.open(path)
    handle = pa.OSFile(source) if isinstance(source, str) else source
    head = bytes(handle.read_at(4, 0))
    if head[:3] == b"ORC" or head == AVRO_MAGIC:
        whole: Any
        if head == AVRO_MAGIC:
            whole = AvroDataFile(handle)
        else:
            import pyarrow.orc

            whole = pyarrow.orc.ORCFile(handle)
        names = columns(whole.schema) if callable(columns) else columns
        stripes = [whole.read_stripe(i, columns=names) for i in range(whole.nstripes)]
        table = pa.Table.from_batches(stripes) if stripes else whole.schema.empty_table().select(names)
        for name, _, value in filters or ():
            table = table.filter(pc.equal(table.column(name), value))
        return table
    parquet = pq.ParquetFile(handle)
    names = columns(parquet.schema_arrow) if callable(columns) else columns
    if filters:
        return pq.read_table(handle, columns=names, filters=filters)
    return parquet.read(columns=names)


def _equality_file(read: ArrowRead, path: str, ids: tuple[int, ...]) -> pa.Table:
    """An equality delete file's key columns, found by field id, named by it."""
    fields: list[pa.Field | None] = []

    def key_columns(schema: pa.Schema) -> list[str]:
        lookup = file_fields(schema)
        fields.extend(lookup(i) for i in ids)
        missing = [i for i, f in zip(ids, fields) if f is None]
        if missing:
            raise DeletesUnreadable(f"equality delete file {path} has no column of field id {missing[0]}")
        return [f.name for f in fields if f is not None]

    table = _delete_file(read.storage, path, key_columns)
    return pa.table([table.column(f.name) for f in fields if f is not None], names=[str(i) for i in ids])

