"""The tablet list a plan pins: carried in the plan, or kept by the server under its digest.

A plan must say exactly which files (and row groups) each of its tablets reads, so that a
scan reads the version that was planned. For a small table the list travels in the plan
itself. A table of thousands of files would make every plan, and every ``open_scanner`` that
carries it, hundreds of kilobytes; its plans carry instead a 128-bit digest of the table's
whole tablet list and the ids of the tablets planned, and the list stays with the server:

- in memory (FE and BE of one process share it): the version's tablets as listed, at once,
  and packed, in a store bounded by bytes, once a background thread has packed them;
- and, when a BE does not hold it (another process, or after a restart), it lists the table
  again, builds the same list by the same rules (starscan.tables.tablets) and compares digests.
  Equal digests mean the same files, row groups and ids, so the plan reads exactly what was
  planned; a table that changed since gives "version ... is gone", as a rewritten file does.

The digest is taken over the tablets' ids and shapes, not over the packed list: a tablet's
id is already a hash of its files' identities and its row groups, and packing a million
files' list only to name it took 3.5 s of a first plan (issue 39).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

from starscan.core.collector import collector_paused
from starscan.core.errors import SnapshotGone, StarscanError
from starscan.core.thrift_defs import plan as plan_idl
from starscan.plans import codec as plan_codec

if TYPE_CHECKING:
    from starscan.tables.catalog import Warehouse
    from starscan.tables.tablets import Tablet

log = logging.getLogger("starscan.plans.tablet_lists")

#: Digest size in bytes: two different tablet lists sharing a digest is not a concern.
DIGEST_BYTES = 16


def plan_tablets(tablets: Iterable[Tablet]) -> Iterator[Any]:
    """catalog ``Tablet``s -> ``TPlanTablet``s, one at a time (``plan_codec.pack_tablets``)."""
    for t in tablets:
        yield plan_idl.TPlanTablet(
            tablet_id=t.tablet_id,
            files=[plan_idl.TPlanFile(path=f.path, size=f.size, mtime_ns=f.mtime_ns, deletes=f.deletes,
                                      partition=f.recorded_partition) for f in t.files],
            first_row_group=t.first_row_group, row_groups=t.row_groups, first_row=t.first_row, rows=t.rows,
        )


def to_plan_tablets(tablets: Iterable[Tablet]) -> list[Any]:
    """catalog ``Tablet``s -> ``TPlanTablet``s."""
    return list(plan_tablets(tablets))


def digest_of(tablets: Iterable[Any]) -> bytes:
    """The digest that names a table version's whole tablet list (catalog ``Tablet``s or
    ``TPlanTablet``s, in the list's order). Each tablet's id hashes its files' identities
    (path, size, modification time, deletes) and its run of row groups
    (starscan.tables.tablets.tablet_id); its file count and rows complete its shape."""
    h = hashlib.blake2b(b"starscan tablet list 2\n", digest_size=DIGEST_BYTES)
    for t in tablets:
        h.update(f"{t.tablet_id},{len(t.files)},{t.first_row_group},{t.row_groups},{t.first_row},{t.rows}\n"
                 .encode("ascii"))
    return h.digest()


@dataclass(frozen=True)
class _PackedList:
    """A packed tablet list and where each of its tablets is in it (tablet id -> from, to)."""

    packed: bytes
    index: dict[int, tuple[int, int]]

    @property
    def nbytes(self) -> int:
        return len(self.packed) + _INDEX_ENTRY_BYTES * len(self.index)


#: What one tablet's entry in a packed list's index costs (a dict slot, an int, a tuple of two).
_INDEX_ENTRY_BYTES = 200


class TabletLists:
    """Tablet lists by digest: a version's tablets as listed (``hold``) until a background
    thread has packed them into the store, where the least recently used are dropped beyond
    ``max_bytes``. A scanner's tablets are decoded from the packed list alone, where the list's
    index says they are: decoding whole lists, and keeping the last eight decoded, held a
    million files' list as a million ``TPlanFile`` objects per version read."""

    def __init__(self, max_bytes: int):
        self._lock = threading.Lock()
        self._packed: LRUCache[bytes, _PackedList] = LRUCache(maxsize=max(1, max_bytes), getsizeof=attrgetter("nbytes"))
        self._held: dict[bytes, dict[int, Tablet]] = {}  # digest -> a version's tablets by id, until packed
        self._too_large: LRUCache[bytes, None] = LRUCache(maxsize=64)  # packed, and larger than the store

    def hold(self, digest: bytes, by_id: dict[int, Tablet]) -> None:
        """Keep a version's tablets (``TableSnapshot.by_id``, in the list's order) under its
        ``digest`` (``digest_of``): answered from them at once, and packed into the store on
        a thread of its own, after which they are let go (a snapshot's objects take far more
        memory than its packed list)."""
        with self._lock:
            if digest in self._held or digest in self._packed or digest in self._too_large:
                return  # (a list too large for the store is rebuilt from a listing when asked for)
            self._held[digest] = by_id
        threading.Thread(target=self._pack, args=(digest, by_id), name="starscan-tablet-list", daemon=True).start()

    def _pack(self, digest: bytes, by_id: dict[int, Tablet]) -> None:
        try:
            with collector_paused():
                index: dict[int, tuple[int, int]] = {}
                packed = _PackedList(plan_codec.pack_tablets(plan_tablets(by_id.values()), index), index)
            with self._lock:
                if packed.nbytes > self._packed.maxsize:
                    self._too_large[digest] = None
                elif digest not in self._packed:
                    self._packed[digest] = packed
        except Exception:  # noqa: BLE001 - the list is then rebuilt from a listing when asked for
            log.warning("packing a tablet list failed", exc_info=True)
        finally:
            with self._lock:
                self._held.pop(digest, None)

    def planned(self, digest: bytes, tablet_ids: Iterable[int]) -> list[Any] | None:
        """The ``TPlanTablet``s of ``tablet_ids`` (those the list has, in that order) from the
        list under ``digest``, or None when it is not held."""
        with self._lock:
            held = self._held.get(digest)
        if held is not None:
            return to_plan_tablets(held[i] for i in tablet_ids if i in held)
        with self._lock:
            stored = self._packed.get(digest)
        if stored is None:
            return None
        return [plan_codec.unpack_tablet(stored.packed, *stored.index[i]) for i in tablet_ids if i in stored.index]


def planned_tablets(plan: Any, lists: TabletLists, warehouse: Warehouse | None = None) -> list[Any]:
    """The ``TPlanTablet``s a (signature-checked) plan planned. A list held by digest and not
    in ``lists`` is rebuilt from ``warehouse`` when the table is unchanged; otherwise the
    plan's version is gone."""
    if plan.tablets_digest is None:
        return plan_codec.tablets_of(plan)
    ids = plan.tablet_ids or []
    found = lists.planned(plan.tablets_digest, ids)
    if found is None and warehouse is not None:
        try:
            snap = warehouse.snapshot(plan.database, plan.table)
        except StarscanError:
            snap = None
        if snap is not None and str(snap.location) == plan.table_location and \
                digest_of(snap.tablets) == plan.tablets_digest:
            lists.hold(plan.tablets_digest, snap.by_id)
            found = to_plan_tablets(snap.by_id[i] for i in ids if i in snap.by_id)
    if found is None:
        raise SnapshotGone(
            f"table {plan.database}.{plan.table} version {plan.version} is gone: its files changed since the plan "
            "was made; ask the FE for a new plan")
    return found
