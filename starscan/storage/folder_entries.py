"""A local folder's files read with a ``stat`` only for the files it did not hold before.

Reading a folder means its entries (``readdir``: a name, an inode number and a kind each, in
one call per thousands) and then each file's size and modification time (a ``stat`` each). In
a folder of a million files the stats were 6 of the 14 s a listing took after a streaming job
appended one file to it (issue 39), although all but that one file were as before.

A walk therefore remembers a large folder's regular files (``FolderEntries``: a hash of the
name, inode, size, time) and the next walk of it, once the folder changed, takes the size and time of each
file it finds again under the same name *and* the same inode: the file was not replaced (an
atomic replace, as rsync and most writers do it, gives the name a new inode) and not renamed
onto. A file modified in the last moments before it was stat-ed (``SETTLED_NS``) may still
be written; it is stat-ed again. What this cannot see is what a folder's unchanged time
cannot show either: a file rewritten in place, or deleted and written again under its name
on the inode it had; the warehouse stats every file now and then for those
(starscan.tables.catalog, ``FILES_CHECK_SPACING``). Links to files are stat-ed every time.

The files come out as Arrow columns a few thousand at a time (``FileColumns``), which the
listing keeps as columns anyway (starscan.tables.file_columns).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

__all__ = ["ENTRIES_MIN", "SETTLED_NS", "FileColumns", "FolderEntries", "FolderReader"]

#: A file modified less than this before a walk began is stat-ed again at the next walk
#: rather than trusted (clocks of 1 s and coarse kernel ticks; git's "racily clean" rule).
SETTLED_NS = 2_000_000_000

#: Folders of fewer regular files than this are not remembered: stat-ing them again costs
#: less than the columns they would hold.
ENTRIES_MIN = 4096

_TEXT = pa.large_string()  # offsets of 64 bits: a folder's names may pass 2 GB


@dataclass(slots=True)
class FileColumns:
    """Some of one folder's files: names, sizes (bytes) and modification times (ns)."""

    names: pa.LargeStringArray
    sizes: pa.Int64Array
    mtimes: pa.Int64Array

    def __len__(self) -> int:
        return len(self.names)

    def rows(self) -> list[tuple[str, int, int]]:
        return list(zip(self.names.to_pylist(), self.sizes.to_pylist(), self.mtimes.to_pylist(), strict=True))


@dataclass(slots=True)
class FolderEntries:
    """A folder's regular files as a walk found them, in the order of their inodes. Inode 0
    marks a link (stat-ed every time). A name is held as its hash (Python's, of this process;
    the entries are never written anywhere): two names taken for one would also need the
    same inode. ~32 bytes a file."""

    name_hashes: np.ndarray  # int64
    inodes: np.ndarray   # uint64, ascending
    sizes: np.ndarray    # int64
    mtimes: np.ndarray   # int64
    settled_before_ns: int  # a file modified at or after this is not trusted by the next walk
    device: int  # the folder's file system (st_dev): inodes are another file system's elsewhere

    def __len__(self) -> int:
        return len(self.inodes)

    def known(self, name_hashes: np.ndarray, inodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For files read now (their names' hashes and inodes): which ones this record holds
        under the same name and inode, settled, and the size and time it holds for each
        (meaningless where not known)."""
        # Looked up in ascending order: each search starts where the one before ended
        # (a third of the time of looking them up in the folder's order).
        order = np.argsort(inodes)
        places = np.empty(len(inodes), np.intp)
        places[order] = np.searchsorted(self.inodes, inodes[order])
        np.minimum(places, len(self.inodes) - 1, out=places)
        known = (self.inodes[places] == inodes) & (inodes != 0) & (self.name_hashes[places] == name_hashes)
        sizes, mtimes = self.sizes[places], self.mtimes[places]
        known &= mtimes < self.settled_before_ns
        return known, sizes, mtimes


class FolderReader:
    """Reads one folder (``read``): its regular files (and links to files), handed out in
    ``FileColumns`` of up to ``chunk`` files, and the names of its subfolders. ``before``: the
    folder's entries from the walk before (stat only what they do not hold); ``record``:
    build this folder's entries for the next walk (``entries()``)."""

    def __init__(self, fd: int, device: int, before: FolderEntries | None, record: bool, chunk: int = 4096):
        self._fd = fd
        self._device = device
        self._before = before if before is not None and len(before) and before.device == device else None
        self._record = record
        self._chunk = chunk
        self._started_ns = time.time_ns()  # before any entry is read
        self._kept: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # name hashes, inodes, sizes, times
        self.subfolders: list[str] = []
        self.python_rows = False  # a name Arrow cannot hold (undecodable bytes): no columns, no entries

    def read(self, entries: Iterator[os.DirEntry[str]]) -> Iterator[FileColumns | list[tuple[str, int, int]]]:
        """The folder's files a chunk at a time, from its entries (``os.scandir`` of ``fd``).
        Two loops, each as lean as it can be: a million entries pass through it."""
        chunk, subfolders = self._chunk, self.subfolders
        names: list[str] = []
        inodes: list[int] = []
        if self._before is not None:
            links: dict[int, tuple[int, int]] = {}  # place in the chunk -> size, time (always stat-ed)
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    subfolders.append(entry.name)
                elif entry.is_file():  # a link to a file counts, as in Spark's listing
                    if entry.is_symlink():
                        try:
                            st = entry.stat()
                        except FileNotFoundError:
                            continue
                        links[len(names)] = (st.st_size, st.st_mtime_ns)
                        inodes.append(0)
                    else:
                        inodes.append(entry.inode())  # size and time: known, or stat-ed with the chunk
                    names.append(entry.name)
                    if len(names) >= chunk:
                        yield self._chunk_of(names, inodes, self._unknown(len(names), links))
                        names, inodes, links = [], [], {}
            if names:
                yield self._chunk_of(names, inodes, self._unknown(len(names), links))
            return
        sizes: list[int] = []
        mtimes: list[int] = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                subfolders.append(entry.name)
            elif entry.is_file():
                try:
                    st = entry.stat()
                except FileNotFoundError:  # removed since the folder was read
                    continue
                names.append(entry.name)
                inodes.append(0 if entry.is_symlink() else entry.inode())
                sizes.append(st.st_size)
                mtimes.append(st.st_mtime_ns)
                if len(names) >= chunk:
                    yield self._chunk_of(names, inodes, (np.array(sizes, np.int64), np.array(mtimes, np.int64)))
                    names, inodes, sizes, mtimes = [], [], [], []
        if names:
            yield self._chunk_of(names, inodes, (np.array(sizes, np.int64), np.array(mtimes, np.int64)))

    @staticmethod
    def _unknown(count: int, links: dict[int, tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """Sizes and times of a chunk read without stats: -1 (unknown) but for its links."""
        sizes, mtimes = np.full(count, -1, np.int64), np.full(count, -1, np.int64)
        for place, (size, mtime) in links.items():
            sizes[place], mtimes[place] = size, mtime
        return sizes, mtimes

    def _chunk_of(self, names_list: list[str], inodes_list: list[int],
                  stats: tuple[np.ndarray, np.ndarray]) -> FileColumns | list[tuple[str, int, int]]:
        """A chunk's files with every size and time: those -1 taken from the folder's entries
        before where it holds the file, else stat-ed now (a file gone meanwhile is left out)."""
        sizes, mtimes = stats
        inodes = np.array(inodes_list, np.uint64)
        # The names' hashes: for the entries before and for this folder's own (a walk that
        # keeps no entries, as ``Storage.walk_files``, has no use for them).
        hashes = np.fromiter(map(hash, names_list), np.int64, len(names_list)) \
            if self._record or self._before is not None else np.zeros(0, np.int64)
        names: pa.LargeStringArray | None = None
        if not self.python_rows:
            try:
                names = pa.array(names_list, _TEXT)
            except (UnicodeError, pa.ArrowException):
                self.python_rows = True
                self._kept = []
        pending = sizes < 0
        if names is not None and self._before is not None and pending.any():
            known, old_sizes, old_mtimes = self._before.known(hashes, inodes)
            sizes[known], mtimes[known] = old_sizes[known], old_mtimes[known]
            pending &= ~known
        there = np.ones(len(sizes), dtype=bool)
        for place in np.flatnonzero(pending).tolist():
            try:
                st = os.stat(names_list[place], dir_fd=self._fd, follow_symlinks=False)
            except FileNotFoundError:  # removed since the folder was read
                there[place] = False
                continue
            if not stat.S_ISREG(st.st_mode):  # replaced by something else meanwhile
                there[place] = False
                continue
            sizes[place], mtimes[place], inodes[place] = st.st_size, st.st_mtime_ns, st.st_ino
        if names is None:
            return [(name, int(size), int(mtime))
                    for name, size, mtime, keep in zip(names_list, sizes, mtimes, there, strict=True) if keep]
        if not there.all():
            names, inodes, sizes, mtimes = names.filter(pa.array(there)), inodes[there], sizes[there], mtimes[there]
            if len(hashes):
                hashes = hashes[there]
        if self._record:
            self._kept.append((hashes, inodes, sizes, mtimes))
        return FileColumns(names, pa.array(sizes, pa.int64()), pa.array(mtimes, pa.int64()))

    def entries(self) -> FolderEntries | None:
        """This folder's entries for the next walk (once ``read`` is done), or None when it is
        too small to remember or holds a name Arrow cannot."""
        kept, self._kept = self._kept, []
        if self.python_rows or not self._record or sum(len(k[0]) for k in kept) < ENTRIES_MIN:
            return None
        hashes, inodes, sizes, mtimes = (np.concatenate([k[i] for k in kept]) for i in range(4))
        order = np.argsort(inodes, kind="stable")
        return FolderEntries(hashes[order], inodes[order], sizes[order], mtimes[order], self._started_ns - SETTLED_NS,
                             self._device)
