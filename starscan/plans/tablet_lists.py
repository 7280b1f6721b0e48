"""The tablet list a plan pins: carried in the plan, or kept by the server under its digest.

A plan must say exactly which files (and row groups) each of its tablets reads, so that a
scan reads the version that was planned. For a small table the list travels in the plan
itself. A table of thousands of files would make every plan, and every ``open_scanner`` that
carries it, hundreds of kilobytes; its plans carry instead a 128-bit digest of the table's
whole tablet list and the ids of the tablets planned, and the list stays with the server:

- in memory, in a store bounded by bytes (FE and BE of one process share it);
- and, when a BE does not hold it (another process, or after a restart), it lists the table
  again, builds the same list by the same rules (starscan.tables.tablets) and compares digests.
  Equal digests mean the same files, row groups and ids, so the plan reads exactly what was
  planned; a table that changed since gives "version ... is gone", as a rewritten file does.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

from starscan.core.errors import SnapshotGone, StarscanError
from starscan.core.thrift_defs import plan as plan_idl
from starscan.plans import codec as plan_codec

if TYPE_CHECKING:
    from starscan.tables.catalog import TableSnapshot, Warehouse
    from starscan.tables.tablets import Tablet

#: Digest size in bytes: two different tablet lists sharing a digest is not a concern.
DIGEST_BYTES = 16


def to_plan_tablets(tablets: Iterable[Tablet]) -> list[Any]:
    """catalog ``Tablet``s -> ``TPlanTablet``s."""
    return [
        plan_idl.TPlanTablet(
            tablet_id=t.tablet_id,
            files=[plan_idl.TPlanFile(path=f.path, size=f.size, mtime_ns=f.mtime_ns, deletes=f.deletes,
                                      partition=f.recorded_partition) for f in t.files],
            first_row_group=t.first_row_group, row_groups=t.row_groups, first_row=t.first_row, rows=t.rows,
        )
        for t in tablets
    ]


def digest_of(packed: bytes) -> bytes:
    return hashlib.blake2b(packed, digest_size=DIGEST_BYTES).digest()


class TabletLists:
    """Packed tablet lists by digest, least recently used dropped beyond ``max_bytes``."""

    def __init__(self, max_bytes: int):
        self._lock = threading.Lock()
        self._packed: LRUCache[bytes, bytes] = LRUCache(maxsize=max(1, max_bytes), getsizeof=len)
        self._decoded: LRUCache[bytes, dict[int, Any]] = LRUCache(maxsize=8)  # digest -> {tablet_id: TPlanTablet}

    def put(self, packed: bytes, digest: bytes | None = None) -> bytes:
        """Store ``packed``; ``digest``: its digest when the caller has it already."""
        digest = digest if digest is not None else digest_of(packed)
        with self._lock:
            if digest not in self._packed and len(packed) <= self._packed.maxsize:
                self._packed[digest] = packed
        return digest

    def tablets(self, digest: bytes) -> dict[int, Any] | None:
        """``{tablet_id: TPlanTablet}`` of a stored list, or None when it is not held."""
        with self._lock:
            decoded = self._decoded.get(digest)
            if decoded is not None:
                return decoded
            packed = self._packed.get(digest)
        if packed is None:
            return None
        decoded = {t.tablet_id: t for t in plan_codec.unpack_tablets(packed)}
        with self._lock:
            self._decoded[digest] = decoded
        return decoded


def pack_snapshot(snap: TableSnapshot) -> bytes:
    """A table snapshot's whole tablet list, packed as plans carry it."""
    return plan_codec.pack_tablets(to_plan_tablets(snap.tablets))


def planned_tablets(plan: Any, lists: TabletLists, warehouse: Warehouse | None = None) -> list[Any]:
    """The ``TPlanTablet``s a (signature-checked) plan planned. A list held by digest and not
    in ``lists`` is rebuilt from ``warehouse`` when the table is unchanged; otherwise the
    plan's version is gone."""
    if plan.tablets_digest is None:
        return plan_codec.tablets_of(plan)
    by_id = lists.tablets(plan.tablets_digest)
    if by_id is None and warehouse is not None:
        try:
            snap = warehouse.snapshot(plan.database, plan.table)
        except StarscanError:
            snap = None
        if snap is not None and str(snap.location) == plan.table_location:
            packed = pack_snapshot(snap)
            if digest_of(packed) == plan.tablets_digest:
                lists.put(packed, plan.tablets_digest)
                by_id = lists.tablets(plan.tablets_digest) or {
                    t.tablet_id: t for t in plan_codec.unpack_tablets(packed)}  # too large to keep
    if by_id is None:
        raise SnapshotGone(
            f"table {plan.database}.{plan.table} version {plan.version} is gone: its files changed since the plan "
            "was made; ask the FE for a new plan")
    return [by_id[i] for i in plan.tablet_ids or [] if i in by_id]
