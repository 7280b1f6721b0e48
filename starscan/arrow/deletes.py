"""Row-level deletes of a data file: which rows of it the table no longer holds, read by
every path that reads files (the arrow engine's tasks, the sql engine's reader tasks, the
client's direct reads) with this one code.

Iceberg **position delete files** (Iceberg spec, "Position Delete Files"): Parquet files
of ``file_path`` (field id 2147483546) and ``pos`` (2147483545) rows, each deleting row
``pos`` of the data file at ``file_path`` (the location as the table's manifests spell it);
one delete file may hold the positions of many data files. Iceberg **equality delete
files** ("Equality Delete Files"): Parquet files of some of the table's columns (by field
id); each row deletes the rows of the data files it applies to whose values in those
columns equal its own. A Delta
**deletion vector** (Delta protocol, "Deletion Vectors"), whose descriptor in the log names
where the vector is:

* ``u``: a file ``[<prefix>/]deletion_vector_<uuid>.bin`` in the table folder; the
  descriptor holds the prefix and the UUID's 16 bytes in Z85 (20 characters);
* ``p``: a file at an absolute URI;
* ``i``: inline: the vector's bytes themselves, in Z85.

A vector in a file starts at ``offset`` (the file's first byte is its format version, 1):
a 4-byte big-endian length, that many bytes of data, then the data's CRC-32, big-endian.
The data (and an inline vector) is a 4-byte little-endian magic number (1681511377, the
portable layout) and a 64-bit roaring bitmap of the deleted row positions in its portable
serialization (bucket count, then each 32-bit key and its 32-bit roaring bitmap), which
pyroaring's ``BitMap64`` reads as it is. Positions count the file's rows from 0, across its
row groups.

The plan carries each file's deletes as a small JSON document (``TPlanFile.deletes``), not
the positions: a vector or delete file is read where the data file is read.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

PORTABLE_MAGIC = 1681511377
NATIVE_MAGIC = 1681511376
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
# Python's base85 (RFC 1924) counts in the same base, with other digits.
_B85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_FROM_Z85 = str.maketrans(_Z85, _B85)
_TO_Z85 = str.maketrans(_B85, _Z85)


class DeletesUnreadable(Exception):
    """A file's deletes cannot be read as its table's log describes them."""


def z85_decode(text: str) -> bytes:
    if len(text) % 5:
        raise DeletesUnreadable(f"{text[:24]!r} is not Z85 (its length is not a multiple of 5)")
    try:
        return base64.b85decode(text.translate(_FROM_Z85))
    except ValueError as exc:
        raise DeletesUnreadable(f"{text[:24]!r} is not Z85: {exc}") from None


def z85_encode(data: bytes) -> str:
    """Z85 of ``data`` padded with zero bytes to a multiple of 4 (as Delta's writers pad)."""
    return base64.b85encode(data + b"\0" * (-len(data) % 4)).decode("ascii").translate(_TO_Z85)


@dataclass(frozen=True)
class DeletionVector:
    """A Delta deletion vector's descriptor, with its file already placed: ``path`` is where
    the planner found it (relative to the table folder for ``u``, an absolute location for
    ``p``), or None for an inline vector whose bytes are ``inline``."""

    path: str | None
    offset: int
    size: int
    cardinality: int
    inline: str | None = None

    @classmethod
    def from_log(cls, descriptor: dict[str, Any]) -> DeletionVector:
        """From the log's ``deletionVector`` object of an add action."""
        kind = descriptor.get("storageType")
        text = str(descriptor.get("pathOrInlineDv") or "")
        size, cardinality = int(descriptor.get("sizeInBytes") or 0), int(descriptor.get("cardinality") or 0)
        offset = descriptor.get("offset")
        if kind == "i":
            return cls(None, 0, size, cardinality, inline=text)
        if kind == "u":
            if len(text) < 20:
                raise DeletesUnreadable(f"deletion vector path {text!r} is too short to hold a UUID")
            prefix, uuid_bytes = text[:-20], z85_decode(text[-20:])
            name = f"deletion_vector_{_uuid_text(uuid_bytes)}.bin"
            return cls(f"{prefix}/{name}" if prefix else name, int(offset if offset is not None else 1), size,
                       cardinality)
        if kind == "p":
            return cls(text, int(offset if offset is not None else 1), size, cardinality)
        raise DeletesUnreadable(f"deletion vector storage type {kind!r} is not one the Delta protocol defines")

    @property
    def absolute(self) -> bool:
        return self.path is not None and ("://" in self.path or self.path.startswith("/"))

    def to_json(self) -> str:
        doc: dict[str, Any] = {"kind": "delta_dv", "size": self.size, "cardinality": self.cardinality}
        if self.inline is not None:
            doc["inline"] = self.inline
        else:
            doc.update(path=self.path, offset=self.offset)
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DeletionVector:
        doc = json.loads(text)
        if doc.get("kind") != "delta_dv":
            raise DeletesUnreadable(f"row deletes of kind {doc.get('kind')!r} are not known to this reader")
        return cls(doc.get("path"), int(doc.get("offset") or 0), int(doc["size"]), int(doc["cardinality"]),
                   doc.get("inline"))

    def positions(self, read_range: Any) -> np.ndarray:
        """The deleted row positions, sorted (uint64). ``read_range(offset, length)`` reads
        bytes of the vector's file (the reader's store; unused for an inline vector)."""
        if self.inline is not None:
            data = z85_decode(self.inline)[:self.size]
        else:
            raw = read_range(self.offset, self.size + 8)
            if len(raw) != self.size + 8:
                raise DeletesUnreadable(f"deletion vector file {self.path} ends before the vector's "
                                        f"{self.size} bytes at offset {self.offset}")
            (length,) = struct.unpack(">i", raw[:4])
            if length != self.size:
                raise DeletesUnreadable(f"deletion vector at offset {self.offset} of {self.path} is {length} bytes, "
                                        f"the log says {self.size}")
            data = raw[4:4 + length]
            (checksum,) = struct.unpack(">I", raw[4 + length:8 + length])
            if zlib.crc32(data) != checksum:
                raise DeletesUnreadable(f"deletion vector at offset {self.offset} of {self.path} fails its CRC-32 check")
        return _bitmap_positions(data, self.cardinality, self.path or "(inline)")


def _bitmap_positions(data: bytes, cardinality: int, where: str) -> np.ndarray:
    from pyroaring import BitMap64

    if len(data) < 4:
        raise DeletesUnreadable(f"deletion vector {where} is shorter than its magic number")
    (magic,) = struct.unpack("<I", data[:4])
    if magic != PORTABLE_MAGIC:
        kind = "the native layout, which Delta's writers do not use for stored vectors" if magic == NATIVE_MAGIC else \
            f"magic number {magic}"
        raise DeletesUnreadable(f"deletion vector {where} has {kind}; this reader reads the portable layout")
    try:
        bitmap = BitMap64.deserialize(data[4:])
    except (ValueError, OverflowError) as exc:
        raise DeletesUnreadable(f"deletion vector {where} is not a roaring bitmap: {exc}") from None
    if len(bitmap) != cardinality:
        raise DeletesUnreadable(f"deletion vector {where} holds {len(bitmap)} positions, the log says {cardinality}")
    return np.fromiter(bitmap, dtype=np.uint64, count=len(bitmap))


def _uuid_text(raw: bytes) -> str:
    if len(raw) != 16:
        raise DeletesUnreadable("a deletion vector path's UUID is not 16 bytes")
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True)
class EqualityDeletes:
    """An Iceberg equality delete file that applies to a data file: a row of the data file is
    deleted when its values in the columns ``field_ids`` equal those of any row of the delete
    file, NULL equal to NULL (as Iceberg's Java reader compares them)."""

    file: str
    field_ids: tuple[int, ...]


@dataclass(frozen=True)
class IcebergDeletes:
    """The Iceberg delete files that apply to one data file (the planner asked the table's
    manifests which, by partition and sequence number), placed as the planner found them
    (relative to the table location, or absolute): position delete files, and the data file's
    location as they spell it; equality delete files, in sequence-number order."""

    files: tuple[str, ...]
    data_file: str
    equality: tuple[EqualityDeletes, ...] = ()
    # Format v3: the data file's deletion vector, a ``deletion-vector-v1`` blob of a Puffin
    # file, laid out as a Delta vector stored in a file (the same length, magic, portable
    # bitmap and CRC), so read as one.
    vector: DeletionVector | None = None

    def to_json(self) -> str:
        doc: dict[str, Any] = {"kind": "iceberg", "files": list(self.files), "data_file": self.data_file}
        if self.equality:
            doc["equality"] = [{"file": e.file, "ids": list(e.field_ids)} for e in self.equality]
        if self.vector is not None:
            doc["vector"] = {"path": self.vector.path, "offset": self.vector.offset, "size": self.vector.size,
                             "cardinality": self.vector.cardinality}
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> IcebergDeletes:
        v = doc.get("vector")
        vector = DeletionVector(str(v["path"]), int(v["offset"]), int(v["size"]), int(v["cardinality"])) if v else None
        return cls(tuple(str(p) for p in doc.get("files") or ()), str(doc["data_file"]),
                   tuple(EqualityDeletes(str(e["file"]), tuple(int(i) for i in e["ids"]))
                         for e in doc.get("equality") or ()), vector)

    def positions(self, read_table: Any, read_range: Any = None) -> np.ndarray:
        """The rows its position delete files and its deletion vector delete, sorted
        (uint64). ``read_table(path, data_file)`` gives the ``pos`` column of a delete file's
        rows for ``data_file``; ``read_range(path, offset, length)`` bytes of a file (the
        reader's store)."""
        found = [np.asarray(read_table(path, self.data_file), dtype=np.int64) for path in self.files]
        if self.vector is not None:
            vector = self.vector
            found.append(vector.positions(lambda offset, length: read_range(vector.path, offset, length))
                         .astype(np.int64))
        merged = np.unique(np.concatenate(found)) if found else np.empty(0, dtype=np.int64)
        if len(merged) and merged[0] < 0:
            raise DeletesUnreadable(f"position delete file of {self.data_file} names a negative position")
        return merged.astype(np.uint64)


RowDeletes = DeletionVector | IcebergDeletes


def row_deletes(text: str) -> RowDeletes:
    """A file's deletes from the plan's JSON."""
    doc = json.loads(text)
    if doc.get("kind") in ("iceberg", "iceberg_positions"):
        return IcebergDeletes.from_doc(doc)
    return DeletionVector.from_json(text)


class EqualityKeys:
    """The distinct rows of equality delete files with the same columns, and which rows of a
    data file's batch equal one of them. Each column's values are numbered by
    ``pyarrow.compute.index_in`` against that column's distinct deleted values (NULL matching
    NULL), so a row is a tuple of small numbers; the tuples are packed into one int64 where
    they fit (every realistic key), else compared as Python tuples."""

    def __init__(self, deleted: list[Any]):
        import pyarrow.compute as pc

        self.types = [column.type for column in deleted]
        self.values = [pc.unique(column) for column in deleted]
        self.sizes = [len(v) for v in self.values]
        codes = [np.asarray(pc.index_in(c, value_set=v, skip_nulls=False).to_numpy(zero_copy_only=False),
                            dtype=np.int64) for c, v in zip(deleted, self.values)]
        self.packed = _fits_int64(self.sizes)
        if self.packed:
            self.keys: Any = np.unique(_pack(codes, self.sizes)) if codes else np.empty(0, np.int64)
        else:
            self.keys = set(zip(*(c.tolist() for c in codes)))

    @property
    def nbytes(self) -> int:
        size = sum(v.nbytes for v in self.values)
        return int(size + (self.keys.nbytes if self.packed else 64 * len(self.keys)))

    def deleted_mask(self, columns: list[Any]) -> np.ndarray:
        """For a batch's values of the key columns (in order): True where the row is deleted."""
        import pyarrow.compute as pc

        rows = len(columns[0]) if columns else 0
        codes, known = [], np.ones(rows, dtype=bool)
        for column, values, wanted in zip(columns, self.values, self.types):
            if column.type != wanted:  # the column was promoted (int to long) between the files
                if _wider(column.type, wanted):
                    values = values.cast(column.type)
                else:
                    column = column.cast(wanted)
            found = pc.index_in(column, value_set=values, skip_nulls=False)
            known &= ~np.asarray(found.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            codes.append(np.asarray(found.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64))
        mask = np.zeros(rows, dtype=bool)
        if not known.any():
            return mask
        if self.packed:
            mask[known] = np.isin(_pack([c[known] for c in codes], self.sizes), self.keys)
        else:
            where = np.flatnonzero(known)
            mask[where] = [key in self.keys for key in zip(*(c[where].tolist() for c in codes))]
        return mask


def _wider(a: Any, b: Any) -> bool:
    """Whether type ``a`` holds every value of type ``b`` (Iceberg's promotions)."""
    import pyarrow as pa

    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return bool(a.bit_width >= b.bit_width)
    if pa.types.is_floating(a) and pa.types.is_floating(b):
        return bool(a.bit_width >= b.bit_width)
    if pa.types.is_decimal(a) and pa.types.is_decimal(b):
        return bool(a.precision >= b.precision)
    return False


def _fits_int64(sizes: list[int]) -> bool:
    total = 1
    for n in sizes:
        total *= max(n, 1)
    return total < 2**62


def _pack(codes: list[np.ndarray], sizes: list[int]) -> np.ndarray:
    out = np.zeros(len(codes[0]) if codes else 0, dtype=np.int64)
    for c, n in zip(codes, sizes):
        out = out * max(n, 1) + c
    return out


def delete_files(text: str) -> list[str]:
    """Every file a plan's deletes JSON names (vector and delete files; none for an inline
    vector)."""
    found = row_deletes(text)
    if isinstance(found, IcebergDeletes):
        vector = [found.vector.path] if found.vector is not None and found.vector.path else []
        return [*found.files, *(e.file for e in found.equality), *vector]
    return [found.path] if found.path is not None else []


def with_paths(text: str, place: Any) -> str:
    """A plan's deletes JSON with every file it names passed through ``place`` (where a
    reader or a direct plan finds them)."""
    found = row_deletes(text)
    if isinstance(found, IcebergDeletes):
        vector = found.vector
        return replace(found, files=tuple(place(p) for p in found.files),
                       equality=tuple(replace(e, file=place(e.file)) for e in found.equality),
                       vector=replace(vector, path=place(vector.path)) if vector and vector.path else vector).to_json()
    return text if found.path is None else replace(found, path=place(found.path)).to_json()


def kept_mask(deleted: np.ndarray, first_row: int, rows: int) -> np.ndarray | None:
    """For the rows ``[first_row, first_row + rows)`` of a file: a boolean mask of those kept,
    or None when none of them is deleted."""
    lo = int(np.searchsorted(deleted, first_row, side="left"))
    hi = int(np.searchsorted(deleted, first_row + rows, side="left"))
    if lo == hi:
        return None
    mask = np.ones(rows, dtype=bool)
    mask[(deleted[lo:hi] - np.uint64(first_row)).astype(np.int64)] = False
    return mask
