"""The ``arrow`` engine's planning, on the driver: whether a plan can run on it
(starscan.arrow.scan, shared with the client's direct reads), and its splits.

A plan that has no exact pyarrow reading raises ``NotArrowable`` saying why, and the scan
runs on the ``sql`` engine (``scan_engine = auto``) or is refused (``scan_engine = arrow``).

Splits: the planned files, a large file cut into runs of whole row groups of about
``split_size`` bytes (its footer says where), small files packed together up to that size with
an open cost per file, as Spark packs files into partitions. The scanner's tasks then take
the splits one after another from the BE (provider/push/task.py).

The open cost is the FE's (``tablet_open_cost_bytes``, 128 KiB: what opening a small Parquet
file costs here in bytes of reading). It was Spark's 4 MiB until issue 39: a split then held
at most four small files, and a table of 50,000 ten-row files became 12,500 splits, each
claimed by a task from the BE over its push connection; that hand-off, not the reading, was
where its time went.
"""

from __future__ import annotations

import json
from dataclasses import replace

from starscan.arrow.rebase import CalendarRules
from starscan.arrow.scan import Fields, file_part, partition_names, plan_read
from starscan.arrow.split_plan import ArrowRead, ArrowSplit, FilePart
from starscan.core.sql_types import parse_schema
from starscan.expr import unflatten
from starscan.storage.stores import LOCAL, Storage
from starscan.tables.tablets import DEFAULT_OPEN_COST_BYTES, FOOTERS, cut_file, pack

MIN_SPLIT_BYTES, MAX_SPLIT_BYTES = 16 << 20, 256 << 20


def split_size(total_bytes: int, tasks: int) -> int:
    """Bytes per split: about two splits per task the scanner runs at once, within
    [16 MiB, 256 MiB]. A task that ends its split early takes another, so more splits even
    out the tasks' ends; each costs a connection and opening its files, so not many more.
    A split's size does not delay the first rows (tasks stream)."""
    return min(max(MIN_SPLIT_BYTES, total_bytes // max(1, 2 * tasks)), MAX_SPLIT_BYTES)


def plan_arrow(plan, plan_tablets: list, tablet_ids: list[int], time_zone: str,
               tasks: int = 2, storage: Storage = LOCAL,
               calendar: CalendarRules = CalendarRules(), nested: bool = False,
               open_cost_bytes: int = DEFAULT_OPEN_COST_BYTES) -> tuple[ArrowRead, list[ArrowSplit]]:
    """The read instructions and splits of ``plan`` on the arrow engine, or NotArrowable
    (``nested``: see starscan.arrow.scan.plan_read). ``open_cost_bytes`` is the FE's
    ``tablet_open_cost_bytes``: splits pack small files by the same rule as tablets."""
    fields = Fields(parse_schema(plan.table_schema))
    folders = plan.partition_columns is None  # else in the files (Iceberg), or each file carries them
    first = next((t.files[0].path for t in plan_tablets[:1] if t.files), None)
    read = plan_read(
        f"{plan.database}.{plan.table}", plan.version, fields,
        [(c.name, c.source if c.is_slot_ref else None) for c in plan.columns],
        unflatten(plan.predicate) if plan.predicate is not None else None,
        time_zone, plan.file_format, partition_names(first, fields, plan.partition_columns), storage, calendar,
        json.loads(plan.file_columns) if plan.file_columns else None, nested)
    by_id = {t.tablet_id: t for t in plan_tablets}
    parts = []
    for tid in tablet_ids:
        tablet = by_id[tid]
        row_groups = None if tablet.first_row_group is None else tuple(
            range(tablet.first_row_group, tablet.first_row_group + (tablet.row_groups or 0)))
        for f in tablet.files:
            parts.append(file_part(read, fields, plan.table_location, f.path, f.size, f.mtime_ns, row_groups, folders,
                                   f.deletes, f.partition))
    return read, _splits(parts, split_size(sum(p.size for p in parts), tasks), storage, open_cost_bytes)


def _splits(parts: list[FilePart], split_bytes: int, storage: Storage = LOCAL,
            open_cost_bytes: int = DEFAULT_OPEN_COST_BYTES) -> list[ArrowSplit]:
    """The scanner's tablets split again for its tasks, by the FE's rules (starscan.tables.tablets):
    a large file or cut tablet in runs of its row groups, small files packed."""
    out: list[ArrowSplit] = []
    small: list[FilePart] = []
    for part in parts:
        if part.size <= split_bytes and part.row_groups is None:
            small.append(part)
            continue
        groups = FOOTERS.row_groups(part.path, part.size, part.mtime_ns, storage)
        chosen = list(range(len(groups or ()))) if part.row_groups is None else list(part.row_groups)
        if groups is None or any(not 0 <= rg < len(groups) for rg in chosen):
            out.append(ArrowSplit((part,)))  # unreadable, or past the end of the file: the task says so
            continue
        if not chosen:
            out.append(ArrowSplit((_with_row_groups(part, []),)))
            continue
        first = chosen[0]  # a tablet's row groups are a contiguous run
        for run_first, run_groups, _, _ in cut_file(groups[first:chosen[-1] + 1], split_bytes):
            out.append(ArrowSplit((_with_row_groups(part, list(range(first + run_first, first + run_first + run_groups))),)))
    out.extend(ArrowSplit(tuple(group)) for group in pack(small, lambda p: p.size, split_bytes, open_cost_bytes))
    return out


def _with_row_groups(part: FilePart, row_groups: list[int]) -> FilePart:
    return replace(part, row_groups=tuple(row_groups))
