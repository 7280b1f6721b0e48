"""A walked folder's data files as columns: their names sorted, hidden ones left out, and
each file's identity line, built with pyarrow's compute functions rather than a file at a time.

A file's identity is ``path|size|mtime_ns``. A folder's digest (starscan.tables.folder_files)
hashes its files' identities joined by newlines, in path order, and a tablet's id
(starscan.tables.tablets) hashes those of its files. Written by Python one file at a time,
those lines cost about 2 s per pass over a million files on this machine, and a first plan
made them twice; sorting and filtering a million file records cost as much again (issue 39).
Here the walk's chunks become Arrow columns, sorted and joined in C++, and the lines are made
once for both hashes. The bytes hashed are the same as Python's: Arrow sorts strings by their
UTF-8 bytes, which is the order of their code points, and writes integers in decimal as
``str`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from starscan.storage.files import is_hidden
from starscan.storage.folder_entries import FileColumns

__all__ = ["FolderColumns", "RELEASE_FILES", "WalkedFolder", "release_unused"]

_TEXT = pa.large_string()  # offsets of 64 bits: a folder's lines may pass 2 GB
_EMPTY, _BAR, _NEWLINE = (pa.scalar(text, _TEXT) for text in ("", "|", "\n"))


@dataclass(slots=True)
class FolderColumns:
    """A folder's data files in path order: each one's identity line with its newline, and
    its size. Kept by a listing only until its tablets are cut (tens of MB at a million files)."""

    lines: pa.LargeStringArray
    sizes: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.lines)

    def identities(self, places: np.ndarray | None = None) -> memoryview:
        """The identity lines of the files at ``places`` (every file: None), in that order,
        joined by newlines, as UTF-8 bytes."""
        lines = self.lines if places is None else self.lines.take(pa.array(places, pa.int64()))
        if len(lines) == 0:
            return memoryview(b"")
        offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64, count=len(lines) + 1, offset=lines.offset * 8)
        data = lines.buffers()[2]
        return memoryview(data)[int(offsets[0]):int(offsets[-1]) - 1]  # no last newline


class WalkedFolder:
    """One folder's files as a walk gives them, in chunks of Arrow columns or of (name, size,
    mtime_ns) rows, kept as Arrow columns (a chunk's tuples are let go as soon as it is
    added). Names Arrow cannot hold (undecodable bytes the file system gave as surrogates)
    keep the folder in Python."""

    __slots__ = ("folder", "_names", "_sizes", "_mtimes", "_rows")

    def __init__(self, folder: str):
        self.folder = folder
        self._names: list[pa.Array] = []
        self._sizes: list[pa.Array] = []
        self._mtimes: list[pa.Array] = []
        self._rows: list[tuple[str, int, int]] | None = None  # Python rows, once a name would not convert

    def add(self, listed: FileColumns | list[tuple[str, int, int]]) -> None:
        if not len(listed):
            return
        if isinstance(listed, FileColumns):
            if self._rows is not None:
                self._rows.extend(listed.rows())
            else:
                self._names.append(listed.names)
                self._sizes.append(listed.sizes)
                self._mtimes.append(listed.mtimes)
            return
        if self._rows is not None:
            self._rows.extend(listed)
            return
        names, sizes, mtimes = zip(*listed)
        try:
            self._names.append(pa.array(names, _TEXT))
        except (UnicodeError, pa.ArrowException):
            self._rows = [row for chunk in zip(self._names, self._sizes, self._mtimes)
                          for row in zip(*(c.to_pylist() for c in chunk))]
            self._rows.extend(listed)
            self._names, self._sizes, self._mtimes = [], [], []
            return
        self._sizes.append(pa.array(sizes, pa.int64()))
        self._mtimes.append(pa.array(mtimes, pa.int64()))

    def files(self) -> tuple[list[str], list[int], list[int], FolderColumns | None]:
        """The folder's data files in path order as (paths, sizes, mtimes) and their columns
        (None for a folder kept in Python, whose lines its caller writes itself)."""
        if self._rows is not None:
            rows = sorted(row for row in self._rows if not is_hidden(row[0]))
            return [self.folder + name for name, _, _ in rows], [r[1] for r in rows], [r[2] for r in rows], None
        if not self._names:
            return [], [], [], None
        names = pa.chunked_array(self._names, _TEXT).combine_chunks()
        sizes = pa.chunked_array(self._sizes, pa.int64()).combine_chunks()
        mtimes = pa.chunked_array(self._mtimes, pa.int64()).combine_chunks()
        self._names, self._sizes, self._mtimes = [], [], []
        # Hidden names (is_hidden) start with '.' or '_', or end in ._COPYING_: the rule itself
        # runs only for those.
        maybe = pc.or_(pc.or_(pc.starts_with(names, "."), pc.starts_with(names, "_")), pc.ends_with(names, "._COPYING_"))
        if pc.any(maybe).as_py():
            places = np.flatnonzero(maybe.to_numpy(zero_copy_only=False))
            keep = np.ones(len(names), dtype=bool)
            keep[places] = [not is_hidden(name) for name in names.take(pa.array(places)).to_pylist()]
            kept = pa.array(keep)
            names, sizes, mtimes = names.filter(kept), sizes.filter(kept), mtimes.filter(kept)
        order = pc.sort_indices(names)
        names, sizes, mtimes = names.take(order), sizes.take(order), mtimes.take(order)
        del order
        paths = pc.binary_join_element_wise(pa.scalar(self.folder, _TEXT), names, _EMPTY) if self.folder else names
        del names
        # The newline goes on the shortest part first: one intermediate column the fewer.
        ends = pc.binary_join_element_wise(pc.cast(mtimes, _TEXT), _EMPTY, _NEWLINE)
        columns = FolderColumns(pc.binary_join_element_wise(paths, pc.cast(sizes, _TEXT), ends, _BAR), sizes.to_numpy())
        del ends
        if len(columns) >= RELEASE_FILES:
            release_unused()  # the temporaries' memory, before the records' objects are made
        return paths.to_pylist(), sizes.to_pylist(), mtimes.to_pylist(), columns


#: A folder of at least this many files gives the memory its columns' making freed back at once.
RELEASE_FILES = 100_000


def release_unused() -> None:
    """Give the memory pyarrow's allocator holds free back to the system: the columns of a
    million files pass through some 300 MB of temporary buffers, which the allocator would
    otherwise keep (the FE's memory is bounded: issue 39)."""
    pa.default_memory_pool().release_unused()
