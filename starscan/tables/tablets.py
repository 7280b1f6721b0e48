"""Tablets as splits: how a table's data files become the tablets a plan lists.

A tablet is the unit a reader opens a scanner on, so its size sets how evenly readers can
spread a table and how much a plan has to list. As Spark packs files into partitions:

- files of one partition folder are packed together, largest first, until a tablet holds
  ``target_bytes``, each file counted with an ``open_cost_bytes`` on top of its size (what
  opening one more file costs, in bytes of reading). 10,000 tiny files become a handful of
  tablets, not 10,000;
- a file larger than ``target_bytes`` becomes several tablets, each a run of whole row groups
  of about ``target_bytes`` (the file's footer says where the row groups are). Such a tablet
  also carries the rows its row groups hold, so an engine that cannot select row groups (Spark
  SQL) can select the same rows by their index in the file.

A tablet never mixes partitions (pruning reads its partition values from its first file).
Tablet ids are stable: a hash of the files' identities (path, size, modification time) and,
for a cut file, the row-group range; the same data gives the same ids on every host and
after restarts, and a rewritten file gives new ones.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np
from cachetools import LRUCache

from starscan.core.errors import StarscanError
from starscan.storage.hadoop_paths import unescape_path_name

if TYPE_CHECKING:
    from starscan.settings.config import Settings
    from starscan.storage.stores import Storage
    from starscan.tables.file_columns import FolderColumns

#: Opening a small Parquet file and reading its footer with pyarrow takes about 0.3 ms here,
#: the time it reads ~80 KB of column data (measured on 500 ten-row files against a 3M-row
#: file); a little more is charged for what each file costs later (a push frame, a task).
DEFAULT_OPEN_COST_BYTES = 128 << 10


def hash_int(text: str, bits: int) -> int:
    """A positive ``bits``-bit hash of ``text`` (never 0), the same on every host."""
    return _hash_int_of(text.encode("utf-8"), b"", bits)


class DataFileLike(Protocol):
    """What splitting needs of a data file (starscan.tables.catalog.DataFile)."""

    @property
    def path(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def mtime_ns(self) -> int: ...
    @property
    def partition(self) -> tuple[tuple[str, str | None], ...]: ...
    @property
    def deletes(self) -> str | None: ...
    @property
    def recorded_partition(self) -> str | None: ...


@dataclass(frozen=True)
class Sizing:
    target_bytes: int = 128 << 20
    open_cost_bytes: int = DEFAULT_OPEN_COST_BYTES

    @classmethod
    def of(cls, settings: Settings) -> Sizing:
        """The tablet sizes a configuration asks for."""
        return cls(settings.tablet_target_bytes, settings.tablet_open_cost_bytes)


@dataclass(frozen=True)
class RowGroup:
    rows: int
    compressed_bytes: int


class Footers:
    """Row-group layouts of Parquet files, read once per file identity (LRU-bounded). One per
    process (``FOOTERS``): the FE cuts files with it, the BE splits and checks tablets."""

    def __init__(self, maxsize: int = 4096):
        self._lock = threading.Lock()
        self._cache: LRUCache[tuple[str, int, int], tuple[RowGroup, ...] | None] = LRUCache(maxsize=maxsize)

    def row_groups(self, path: Path | str, size: int, mtime_ns: int,
                   storage: Storage | None = None) -> tuple[RowGroup, ...] | None:
        """The file's row groups, or None when its footer cannot be read (the file then stays
        one tablet, and the scan reports what is wrong with it). A store that refuses or
        does not answer raises (starscan.storage.stores): that is not a property of the file."""
        key = (str(path), size, mtime_ns)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        import pyarrow.parquet as pq

        try:
            meta = pq.read_metadata(storage.open(str(path)) if storage is not None else path)
            groups: tuple[RowGroup, ...] | None = tuple(
                RowGroup(meta.row_group(i).num_rows,
                         sum(meta.row_group(i).column(j).total_compressed_size
                             for j in range(meta.row_group(i).num_columns)))
                for i in range(meta.num_row_groups))
        except StarscanError:
            raise  # the store refused or is gone: not a property of the file
        except Exception:  # noqa: BLE001 - unreadable footer: the file is not cut
            groups = None
        with self._lock:
            self._cache[key] = groups
        return groups


FOOTERS = Footers()


@dataclass(frozen=True)
class Tablet:
    """Whole files of one partition, or (``first_row_group`` set) a run of ``row_groups`` row
    groups of its single file, holding rows ``[first_row, first_row + rows)`` of it."""

    tablet_id: int
    files: tuple[DataFileLike, ...]
    first_row_group: int | None = None
    row_groups: int | None = None
    first_row: int | None = None
    rows: int | None = None

    @property
    def is_cut(self) -> bool:
        return self.first_row_group is not None

    @property
    def raw_partition(self) -> dict[str, str | None]:
        """Partition column -> the folder's value as spelled (None: NULL)."""
        return dict(self.files[0].partition) if self.files else {}

    @property
    def partition(self) -> dict[str, str | None]:
        """Partition column -> its value as Spark reads it into a string column."""
        return {col: None if raw is None else unescape_path_name(raw) for col, raw in self.raw_partition.items()}


#: A run of a file's row groups: (first_row_group, row_groups, first_row, rows).
_Run = tuple[int, int, int, int]
_Item = TypeVar("_Item")


def tablet_id(table: str, files: tuple[DataFileLike, ...], run: _Run | None = None) -> int:
    """A hash of the table and its files' identities (path, size, modification time, and its
    deletes where it has any: other deleted rows are another tablet), with the run of row
    groups of a cut file. A whole single file keeps the id it always had."""
    # Written out, not a call per file: that was a second of a million files' tablets.
    text = "\n".join([f"{f.path}|{f.size}|{f.mtime_ns}|{deletes}" if (deletes := getattr(f, "deletes", None))
                      else f"{f.path}|{f.size}|{f.mtime_ns}" for f in files])
    if run is not None:
        text += f"#rg{run[0]}+{run[1]}"
    return hash_int(f"{table}/" + text, 63)


def cut_file(groups: tuple[RowGroup, ...], target_bytes: int) -> list[_Run]:
    """Runs of whole row groups of about ``target_bytes`` (a run ends before the group that
    would take it past the target; a larger group is a run of its own)."""
    out: list[_Run] = []
    first_group, first_row, run_groups, run_rows, run_bytes = 0, 0, 0, 0, 0
    for i, g in enumerate(groups):
        if run_groups and run_bytes + g.compressed_bytes > target_bytes:
            out.append((first_group, run_groups, first_row, run_rows))
            first_group, first_row = i, first_row + run_rows
            run_groups, run_rows, run_bytes = 0, 0, 0
        run_groups += 1
        run_rows += g.rows
        run_bytes += g.compressed_bytes
    if run_groups:
        out.append((first_group, run_groups, first_row, run_rows))
    return out


def pack(items: Iterable[_Item], size_of: Callable[[_Item], int], target_bytes: int, open_cost_bytes: int
         ) -> list[list[_Item]]:
    """Spark's packing of files into partitions: largest first (ties in the given order), a
    group closed when the next item, counted with ``open_cost_bytes``, would take it past
    ``target_bytes``."""
    out: list[list[_Item]] = []
    current: list[_Item] = []
    current_bytes = 0
    for item in sorted(items, key=size_of, reverse=True):
        cost = size_of(item) + open_cost_bytes
        if current and current_bytes + cost > target_bytes:
            out.append(current)
            current, current_bytes = [], 0
        current.append(item)
        current_bytes += cost
    if current:
        out.append(current)
    return out


_path, _size = attrgetter("path"), attrgetter("size")  # sort keys a million files long: in C


def split_files(table: str, files: Iterable[DataFileLike], sizing: Sizing,
                row_groups_of: Callable[[DataFileLike], tuple[RowGroup, ...] | None],
                unchanged: Mapping[tuple[tuple[str, str | None], ...], list[Tablet]] | None = None) -> list[Tablet]:
    """The tablets of ``table``'s files, in path order. ``unchanged``: partitions known to
    hold exactly the files of the tablets given (cut before with the same sizing): those
    tablets are taken as they are (a streaming job's append re-cuts only its partition)."""
    by_partition: dict[tuple[tuple[str, str | None], ...], list[DataFileLike]] = {}
    for f in files:
        by_partition.setdefault(f.partition, []).append(f)
    return split_partitions(table, by_partition, sizing, row_groups_of, unchanged)


def split_partitions(table: str, by_partition: Mapping[tuple[tuple[str, str | None], ...], Sequence[DataFileLike]],
                     sizing: Sizing, row_groups_of: Callable[[DataFileLike], tuple[RowGroup, ...] | None],
                     unchanged: Mapping[tuple[tuple[str, str | None], ...], list[Tablet]] | None = None,
                     columns: Mapping[tuple[tuple[str, str | None], ...], FolderColumns] | None = None) -> list[Tablet]:
    """``split_files`` of files already grouped by partition. ``columns``: a partition's
    files as a listing's columns (starscan.tables.file_columns), aligned with its list, which
    is then in path order: its tablets are cut and named from them, not file by file."""
    splits: list[tuple[tuple[DataFileLike, ...], _Run | None, int | None]] = []
    tablets = []
    for partition, members in by_partition.items():
        if unchanged and partition in unchanged:
            tablets.extend(unchanged[partition])
            continue
        found = columns.get(partition) if columns else None
        if found is not None and len(found) == len(members):
            _split_by_columns(table, members, found, sizing, row_groups_of, splits)
            continue
        target = sizing.target_bytes
        small: list[DataFileLike] = [f for f in members if f.size < target]
        for f in (f for f in members if f.size >= target):
            splits.extend(_large_file(f, target, row_groups_of))
        small.sort(key=_path)
        # Packed by their places in path order: a group back in path order is a sort of
        # ints, not of paths (a million files' groups took 1.9 s sorted by path).
        sizes = [f.size for f in small]
        splits.extend((tuple([small[i] for i in sorted(group)]), None, None)
                      for group in pack(range(len(small)), sizes.__getitem__, sizing.target_bytes,
                                        sizing.open_cost_bytes))
    for members_of, run, known_id in splits:
        tablets.append(Tablet(tablet_id(table, members_of, run) if known_id is None else known_id, members_of,
                              *(run or (None, None, None, None))))
    tablets.sort(key=lambda t: (t.files[0].path, t.first_row_group or 0))
    return tablets


def _large_file(f: DataFileLike, target: int, row_groups_of: Callable[[DataFileLike], tuple[RowGroup, ...] | None]
                ) -> list[tuple[tuple[DataFileLike, ...], _Run | None, None]]:
    """A file of ``target`` bytes or more: runs of its row groups, or the whole file."""
    groups = row_groups_of(f) if f.size > target else None
    runs = cut_file(groups, target) if groups is not None and len(groups) > 1 else []
    if len(runs) > 1:
        return [((f,), run, None) for run in runs]
    return [((f,), None, None)]


def _split_by_columns(table: str, members: Sequence[DataFileLike], columns: FolderColumns, sizing: Sizing,
                      row_groups_of: Callable[[DataFileLike], tuple[RowGroup, ...] | None],
                      splits: list[tuple[tuple[DataFileLike, ...], _Run | None, int | None]]) -> None:
    """The Python path's tablets of one partition, from its columns: sizes compared and
    packed by numpy, each tablet's id hashed from the identity lines the listing made
    (the same bytes ``tablet_id`` writes: a folder's files carry no deletes)."""
    target = sizing.target_bytes
    large = np.flatnonzero(columns.sizes >= target)
    for place in large.tolist():
        splits.extend(_large_file(members[place], target, row_groups_of))
    small = np.flatnonzero(columns.sizes < target) if large.size else None  # None: every file
    prefix = f"{table}/".encode()
    for group in pack_places(columns.sizes if small is None else columns.sizes[small], target, sizing.open_cost_bytes):
        places = np.sort(group) if small is None else small[np.sort(group)]
        chosen = places.tolist()
        files = (members[chosen[0]],) if len(chosen) == 1 else itemgetter(*chosen)(members)
        splits.append((files, None, _hash_int_of(prefix, columns.identities(places))))


def pack_places(sizes: np.ndarray, target_bytes: int, open_cost_bytes: int) -> list[np.ndarray]:
    """``pack`` of items of these sizes by numpy: each group as the items' places (in
    packing order). Largest first, ties in place order; a group closes before the item that,
    with ``open_cost_bytes``, would take it past ``target_bytes``, and holds at least one."""
    order = np.argsort(-sizes, kind="stable")
    ends = np.cumsum(sizes[order] + open_cost_bytes)
    groups: list[np.ndarray] = []
    start, base = 0, 0
    while start < len(order):
        end = max(int(np.searchsorted(ends, base + target_bytes, side="right")), start + 1)
        groups.append(order[start:end])
        start, base = end, int(ends[end - 1])
    return groups


def _hash_int_of(prefix: bytes, text: bytes | memoryview, bits: int = 63) -> int:
    """``hash_int`` of ``prefix`` followed by ``text`` (UTF-8), without joining them."""
    h = hashlib.blake2b(prefix, digest_size=8)
    h.update(text)
    value = int.from_bytes(h.digest(), "big") & ((1 << bits) - 1)
    return value or 1


def row_range_problem(groups: tuple[RowGroup, ...] | None, first_row_group: int, row_groups: int,
                      first_row: int | None, rows: int | None) -> str | None:
    """Why a planned run of row groups does not fit the file's footer, or None when it does."""
    if groups is None:
        return "its footer cannot be read"
    end = first_row_group + row_groups
    if first_row_group < 0 or row_groups < 1 or end > len(groups):
        return (f"the plan reads row groups {first_row_group}-{end - 1} and the file has {len(groups)}")
    start = sum(g.rows for g in groups[:first_row_group])
    count = sum(g.rows for g in groups[first_row_group:end])
    if (first_row, rows) != (start, count):
        return (f"the plan reads rows {first_row}+{rows} as row groups {first_row_group}-{end - 1}, "
                f"which hold rows {start}+{count}")
    return None
