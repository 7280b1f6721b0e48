"""A folder table's data files: one walk of its folders, kept folder by folder.

Spark's rules decide what a walk keeps: folders whose names are not ``column=value`` (or are
hidden) are skipped with everything below them, hidden files are left out
(starscan.storage.files), and each file carries the partition its folders spell.

A local table's listing also remembers, per folder, its modification time and its files
(``FolderFiles``). The next listing reads only the folders whose time moved (a file added,
removed or renamed in it changes it) and takes the others' files from the listing before:
a streaming job that appends to the partition of the hour re-lists that partition, not a
table of a million files. A large folder read again stats only the files it did not hold
before (starscan.storage.folder_entries), and keeps the listing before's objects of the files
that are the same. A file rewritten in place under its name changes no folder; the
warehouse stat-s every file now and then for that (starscan.tables.catalog,
``FILES_CHECK_SPACING``), as a full walk does.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

from starscan.storage.files import is_hidden_folder
from starscan.storage.folder_entries import SETTLED_NS
from starscan.storage.hadoop_paths import partition_of
from starscan.storage.stores import LOCAL, STALE, FolderStamp, Storage
from starscan.tables.file_columns import FolderColumns, WalkedFolder
from starscan.tables.tablets import hash_int

__all__ = ["DataFile", "FolderFiles", "Partition", "RACY_FOLDER_NS", "list_folder_table", "list_table_files"]

#: A folder modified less than this before it was walked is read again at the next listing
#: rather than trusted by its modification time (clocks of 1 s and coarse kernel ticks).
RACY_FOLDER_NS = SETTLED_NS

Partition = tuple[tuple[str, "str | None"], ...]
FileKey = tuple[str, int, int]  # path, size, mtime_ns
_path = attrgetter("path")


# Not frozen (but hashable, and never changed): a frozen dataclass's __init__ sets each field
# through object.__setattr__, five times the cost, seconds for a million files (issue 39).
@dataclass(slots=True, unsafe_hash=True)
class DataFile:
    path: str            # relative to the table directory, '/'-separated
    size: int
    mtime_ns: int
    # (column, value) of each partition folder above the file: the column name decoded as
    # Spark decodes it, the value exactly as the folder spells it (None: Hive's NULL folder).
    # How a value reads depends on the column's type: see starscan.storage.hadoop_paths.
    partition: tuple[tuple[str, str | None], ...] = ()
    # The file's row-level deletes as the plan carries them (starscan.arrow.deletes), or None.
    deletes: str | None = None
    # Its partition values as the table format records them (JSON {column: text or null}),
    # for a table whose folders do not spell them (TableSnapshot.partitions_recorded); then
    # ``partition`` holds the same values spelled as folders spell them.
    recorded_partition: str | None = None


@dataclass
class FolderFiles:
    """A local folder table as one listing found it, folder by folder."""

    files: list[DataFile]                   # every data file once, in path order
    partition_columns: list[str]            # in the order of the sorted paths
    folders: dict[str, FolderStamp]         # every folder walked (absolute path); STALE: read it next time
    by_folder: dict[str, list[DataFile]]    # a walked folder's data files, by its relative path
    read: set[str] = field(default_factory=set)  # the relative folders whose entries this listing read
    partitions: dict[str, Partition | None] = field(default_factory=dict)  # relative folder -> partition (None: skipped)
    digests: dict[str, bytes] = field(default_factory=dict)  # relative folder -> a hash of its files' identities
    version: int = 0  # the table's version: a hash of every folder's, so of the whole file set
    # The folders this listing read, as columns aligned with their files (file_columns): for
    # cutting the tablets of this listing, then let go (``columns.clear()``).
    columns: dict[str, FolderColumns] = field(default_factory=dict)
    # What changed since the listing this one was made from (``changes``).
    added: list[FileKey] = field(default_factory=list)
    removed: list[FileKey] = field(default_factory=list)

    def changes(self) -> tuple[list[FileKey], list[FileKey]]:
        """The files added and the files removed (a rewritten file is both) since the
        listing this one was made from (``list_folder_table``'s ``before``): only the folders
        this one read, and those gone, differ. Empty for a listing made from none."""
        return self.added, self.removed

    def by_partition(self) -> dict[Partition, list[DataFile]]:
        """The files of each partition (a partition's folder's list itself, not a copy)."""
        out: dict[Partition, list[DataFile]] = {}
        for folder, kept in self.by_folder.items():
            partition = self.partitions.get(folder)
            if partition is not None:
                out[partition] = out[partition] + kept if partition in out else kept
        return out

    def columns_by_partition(self) -> dict[Partition, FolderColumns]:
        """The columns of each partition that is one folder's files (``by_partition``'s list
        is that folder's own), for the folders this listing still holds columns of."""
        folders_of: dict[Partition, list[str]] = {}
        for folder in self.by_folder:
            partition = self.partitions.get(folder)
            if partition is not None:
                folders_of.setdefault(partition, []).append(folder)
        return {partition: self.columns[found[0]] for partition, found in folders_of.items()
                if len(found) == 1 and found[0] in self.columns}

    def changed_partitions(self) -> set[Partition]:
        """The partitions of the folders this listing read: every other partition holds the
        files the listing before found in it."""
        return {p for rel in self.read if (p := self.partitions.get(rel)) is not None}


def list_table_files(location: Path | str, storage: Storage | None = None) -> tuple[list[DataFile], list[str]]:
    """All data files below a table folder (Hive-style partition folders understood), in
    path order, and the partition columns: one walk of a local folder, one listing of an
    object store."""
    listed = list_folder_table(location, storage)
    return listed.files, listed.partition_columns


def list_folder_table(location: Path | str, storage: Storage | None = None,
                      before: FolderFiles | None = None) -> FolderFiles:
    """``list_table_files``, kept folder by folder for a local table. ``before``: the listing
    before, whose folders are not read again where their modification time is the same."""
    storage = storage or LOCAL
    local = storage.is_local
    folders: dict[str, FolderStamp] = {}
    by_folder: dict[str, list[DataFile]] = {}
    read: set[str] = set()
    # Per folder: None when Spark skips what it holds, else the partition its files are in,
    # worked out once for all its files.
    partitions: dict[str, Partition | None] = {}
    known = before.folders if before is not None else None
    walked: dict[str, WalkedFolder] = {}
    for folder, listed in storage.walk_folders(str(location), folders if local else None, known):
        if _folder_partition(folder, partitions) is None:
            continue  # below a folder that is not a partition: Spark skips it too
        if listed is None:  # unchanged since the listing before
            assert before is not None
            kept = before.by_folder.get(folder)
            if kept:
                by_folder[folder] = kept
            continue
        read.add(folder)
        if folder not in walked:
            walked[folder] = WalkedFolder(folder)
        walked[folder].add(listed)
    # Each folder's files in path order and a hash of their identities (path, size,
    # modification time); a folder not read again keeps both. The table's version is a hash
    # of the folders' hashes, so of its whole file set: hashing a million files' identities
    # at every listing took 1.3 s of a streaming table's.
    digests: dict[str, bytes] = {}
    columns: dict[str, FolderColumns] = {}
    added: list[FileKey] = []
    removed: list[FileKey] = []
    for folder, walk in walked.items():
        paths, sizes, mtimes, found = walk.files()
        if not paths:
            continue  # a folder of no data file is no part of the set
        partition = partitions[folder]
        assert partition is not None  # (only the folders of partitions are walked)
        if before is None:
            by_folder[folder] = [DataFile(path, size, mtime_ns, partition)
                                 for path, size, mtime_ns in zip(paths, sizes, mtimes, strict=True)]
        else:
            by_folder[folder] = _merged(before.by_folder.get(folder, []), paths, sizes, mtimes, partition,
                                        added, removed)
        if found is not None:
            columns[folder] = found
            digests[folder] = hashlib.blake2b(found.identities(), digest_size=16).digest()
    del walked
    by_folder = {folder: kept for folder, kept in by_folder.items() if kept}
    if before is not None:  # the files of folders gone, or read and now of no data file
        for folder in (read | before.by_folder.keys()) - by_folder.keys():
            removed.extend((f.path, f.size, f.mtime_ns) for f in before.by_folder.get(folder, ()))
    _digest_the_rest(by_folder, digests, read, before)
    version = hash_int("\n".join([f"{folder}\t{digests[folder].hex()}" for folder in sorted(digests)]), 31)
    files = _in_path_order(by_folder)
    part_cols = _partition_columns(partitions)
    if local:
        _mark_racy(folders)
    return FolderFiles(files, part_cols, folders, by_folder, read, partitions, digests, version, columns,
                       added, removed)


def _folder_partition(folder: str, partitions: dict[str, Partition | None]) -> Partition | None:
    """The partition of the files in ``folder`` (None: Spark skips what it holds: a hidden
    folder, or one that is not ``column=value``, on the way), worked out once per folder."""
    if folder not in partitions:
        skipped = folder and any(is_hidden_folder(f) or "=" not in f for f in folder[:-1].split("/"))
        partitions[folder] = None if skipped else partition_of(folder + "x")
    return partitions[folder]


def _digest_the_rest(by_folder: dict[str, list[DataFile]], digests: dict[str, bytes], read: set[str],
                     before: FolderFiles | None) -> None:
    """The hash of each folder's files that has none yet: worked out for a folder read again
    (its files sorted), kept from the listing before for one that was not."""
    for folder, kept in by_folder.items():
        if folder in digests:
            continue
        if folder in read or before is None or folder not in before.digests:
            kept.sort(key=_path)
            digests[folder] = _digest(kept)
        else:
            digests[folder] = before.digests[folder]


def _partition_columns(partitions: dict[str, Partition | None]) -> list[str]:
    """The partition columns, in the order of the sorted paths."""
    part_cols: list[str] = []
    for folder in sorted(partitions):
        for col, _ in partitions[folder] or ():
            if col not in part_cols:
                part_cols.append(col)
    return part_cols


def _in_path_order(by_folder: dict[str, list[DataFile]]) -> list[DataFile]:
    """Every folder's files (each list in path order) as one list in path order."""
    order = sorted(by_folder)
    files = [f for folder in order for f in by_folder[folder]]
    if any(below.startswith(folder) for folder, below in zip(order, order[1:])):
        # A folder's files sort among those of the folders below it ("a=1/z" after
        # "a=1/b=2/f"): sorted again, runs already in order (a prefix sorts just before
        # the names it starts, so nested folders are next to each other in ``order``).
        files.sort(key=_path)
    return files


def _merged(old: list[DataFile], paths: list[str], sizes: list[int], mtimes: list[int], partition: Partition,
            added: list[FileKey], removed: list[FileKey]) -> list[DataFile]:
    """A folder read again: its files (paths, sizes, times in path order), each one the
    listing before held with the same identity being that listing's object, and what was
    added and removed appended to ``added`` and ``removed``. One pass over both lists, which
    are in path order; a million files' sets compared took 4.4 s, new objects for them 1.5 s."""
    files: list[DataFile] = []
    i, count = 0, len(old)
    for path, size, mtime_ns in zip(paths, sizes, mtimes, strict=True):
        while i < count and old[i].path < path:
            gone = old[i]
            removed.append((gone.path, gone.size, gone.mtime_ns))
            i += 1
        if i < count and old[i].path == path:
            was = old[i]
            i += 1
            if was.size == size and was.mtime_ns == mtime_ns:
                files.append(was)
                continue
            removed.append((was.path, was.size, was.mtime_ns))
        added.append((path, size, mtime_ns))
        files.append(DataFile(path, size, mtime_ns, partition))
    removed.extend((gone.path, gone.size, gone.mtime_ns) for gone in old[i:])
    return files


def _digest(files: list[DataFile]) -> bytes:
    text = "\n".join([f"{f.path}|{f.size}|{f.mtime_ns}" for f in files])
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def _mark_racy(folders: dict[str, FolderStamp]) -> None:
    """A folder changed in the last moments may change again within the same tick of its
    clock and keep its time: the next listing reads it again (git's "racily clean" rule)."""
    recent = time.time_ns() - RACY_FOLDER_NS
    for path, stamp in folders.items():
        if stamp.mtime_ns > recent:
            folders[path] = FolderStamp(STALE, stamp.subfolders, stamp.entries)
