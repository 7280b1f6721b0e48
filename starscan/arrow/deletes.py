"""Row-level deletes of a data file: which rows of it the table no longer holds, read by
every path that reads files (the arrow engine's tasks, the sql engine's reader tasks, the
client's direct reads) with this one code.

Two kinds. Iceberg **position delete files** (Iceberg spec, "Position Delete Files"):
Parquet files of ``file_path`` (field id 2147483546) and ``pos`` (2147483545) rows, each
deleting row ``pos`` of the data file at ``file_path`` (the location as the table's manifests
spell it); one delete file may hold the positions of many data files. And a Delta
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
the positions: a vector is read where the file is read, once per file part.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from dataclasses import dataclass
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
class PositionDeletes:
    """The Iceberg position delete files that apply to one data file (the planner asked the
    table's manifests which), placed as the planner found them (relative to the table
    location, or absolute), and the data file's location as the delete files spell it."""

    files: tuple[str, ...]
    data_file: str

    def to_json(self) -> str:
        return json.dumps({"kind": "iceberg_positions", "files": list(self.files), "data_file": self.data_file},
                          separators=(",", ":"), sort_keys=True)

    def positions(self, read_table: Any) -> np.ndarray:
        """The deleted row positions, sorted (uint64). ``read_table(path, data_file)`` gives
        the ``pos`` column of a delete file's rows for ``data_file`` (the reader's store)."""
        found = [np.asarray(read_table(path, self.data_file), dtype=np.int64) for path in self.files]
        merged = np.unique(np.concatenate(found)) if found else np.empty(0, dtype=np.int64)
        if len(merged) and merged[0] < 0:
            raise DeletesUnreadable(f"position delete file of {self.data_file} names a negative position")
        return merged.astype(np.uint64)


RowDeletes = DeletionVector | PositionDeletes


def row_deletes(text: str) -> RowDeletes:
    """A file's deletes from the plan's JSON."""
    doc = json.loads(text)
    if doc.get("kind") == "iceberg_positions":
        return PositionDeletes(tuple(str(p) for p in doc["files"]), str(doc["data_file"]))
    return DeletionVector.from_json(text)


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
