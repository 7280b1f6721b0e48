"""The storage part of a direct plan (starscan.arrow.direct): which tablets a reader may read from
the files itself, and where those files are.

A tablet is direct only when its rows can be read exactly from its files alone, by the same
kernel rules the BE's ``arrow`` engine follows (starscan.arrow.scan): Parquet files, a
predicate with an exact pyarrow translation, scalar output columns, partition values whose
reading is certain. Everything else answers ``"direct": false`` with the reason, and the
reader uses the BE for it. starscan has no column grants, masks or row filters today. A
file's row-level deletes (Delta deletion vectors, Iceberg position and equality delete
files) go into the plan beside it, their files as storage locations, when the reader says
it applies them (``"direct_row_deletes": true``, which the bundled client sends); for a
reader that does not say so such a tablet is not direct, and the BE leaves the rows out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starscan.arrow.deletes import with_paths
from starscan.arrow.direct import FORMAT, DirectFile, DirectRead
from starscan.arrow.filter import NotArrowable
from starscan.arrow.rebase import CalendarRules
from starscan.arrow.scan import Fields, file_part, partition_names, plan_read
from starscan.core.sql_types import parse_schema
from starscan.expr import Expr
from starscan.storage.stores import is_uri
from starscan.tables.catalog import TableSnapshot


@dataclass(frozen=True)
class DirectPlan:
    read: dict[str, Any] | None      # the answer's top-level "direct" section; None: nothing is direct
    tablets: dict[int, dict[str, Any]]  # tablet id -> the fields added to its "partitions" entry
    disclosed: list[str]             # every storagePath the answer names (the audit line lists them)


def storage_path(snap: TableSnapshot, relative: str) -> str:
    """A data file's URI: the store's own (s3://bucket/key), or file:// and the absolute path
    of a local file; not percent-encoded."""
    location = snap.storage.join(snap.location, relative)
    return location if is_uri(location) else "file://" + location


def direct_plan(snap: TableSnapshot, schema_json: str, columns: list[Any], predicate: Expr | None,
                tablets: list[Any], time_zone: str, calendar: CalendarRules = CalendarRules(),
                row_deletes: bool = False) -> DirectPlan:
    """The direct part of a plan of ``columns`` (the plan's TPlanColumns) of ``tablets``."""
    fields = Fields(parse_schema(schema_json))
    first = next((t.files[0].path for t in tablets if t.files), None)
    partition_columns = partition_names(first, fields, snap.plan_partition_columns)
    try:
        read = plan_read(snap.qualified_name, snap.version, fields,
                         [(c.name, c.source if c.is_slot_ref else None) for c in columns], predicate, time_zone,
                         None if snap.file_format == "parquet" else snap.file_format, partition_columns, snap.storage,
                         calendar, dict(snap.file_columns))
    except NotArrowable as why:
        reason = f"not readable from the files alone: {why}"
        return DirectPlan(None, {t.tablet_id: {"direct": False, "reason": reason} for t in tablets}, [])
    out: dict[int, dict[str, Any]] = {}
    disclosed: list[str] = []
    for t in tablets:
        try:
            files = [_file(snap, read, f, t, fields, row_deletes) for f in t.files]
        except NotArrowable as why:
            out[t.tablet_id] = {"direct": False, "reason": f"not readable from the files alone: {why}"}
            continue
        out[t.tablet_id] = {"direct": True, "format": FORMAT, "files": [f.to_json() for f in files]}
        disclosed.extend(f.storage_path for f in files)
        disclosed.extend(path for f in files for path in f.delete_files())
    section = DirectRead(snap.qualified_name, snap.version, json.loads(schema_json),
                         tuple((c.name, c.source) for c in columns), predicate, time_zone,
                         tuple(sorted(partition_columns)), calendar, snap.file_columns).to_json()
    return DirectPlan(section, out, disclosed)


def _file(snap: TableSnapshot, read: Any, f: Any, tablet: Any, fields: Fields, row_deletes: bool) -> DirectFile:
    """A planned file as a direct plan names it; its partition values are read as the BE's
    arrow engine reads them (starscan.arrow.scan.file_part), NotArrowable when uncertain."""
    deletes = getattr(f, "deletes", None)
    if deletes and not row_deletes:
        raise NotArrowable(f"file {f.path} has rows deleted by row-level deletes (a Delta deletion vector or Iceberg "
                           "delete files), which this reader did not say it applies (direct_row_deletes)")
    row_groups = None if tablet.first_row_group is None else (tablet.first_row_group, tablet.row_groups or 0)
    part = file_part(read, fields, snap.location, f.path, f.size, f.mtime_ns, None, snap.partitions_in_folders,
                     deletes, f.recorded_partition)
    return DirectFile(storage_path(snap, f.path), f.size, f.mtime_ns, row_groups, dict(part.partition),
                      _as_uris(part.deletes))


def _as_uris(deletes: str | None) -> str | None:
    """A file's placed deletes with local paths as file:// URIs, as storage paths are named."""
    if deletes is None:
        return None
    return with_paths(deletes, lambda path: path if is_uri(path) else "file://" + path)
