"""Direct plans: what a `_query_plan` answer tells a reader that reads the data files
itself (docs/direct-reads.md), written by the FE and read by the client.

The answer keeps everything a plan has (the opaque plan, ``partitions`` with routings), so
the BE can still serve any tablet. Beside it:

* ``"direct"`` at the top: how to read the files as the BE would (``DirectRead``): the
  table's Spark schema, the output columns and their source columns, the predicate as a
  node list (starscan.expr.to_json), the session time zone timestamps are read in, and the
  columns whose values are in the files' folders.
* per tablet in ``partitions``: ``"direct": true`` with ``"format"`` and ``"files"``
  (``DirectFile``: ``storagePath``, its identity ``size`` and ``modificationTimeNs``, the
  ``rowGroups`` run [first, count] of a cut file, the typed ``partitionValues``), or
  ``"direct": false`` with the ``"reason"`` the tablet must be read through the BE.

Never a credential: a direct reader reaches the storage with its own.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from starscan.arrow.deletes import delete_files, with_paths
from starscan.arrow.nested import FileName, parse_file_name
from starscan.arrow.rebase import CalendarRules
from starscan.arrow.scan import Fields, plan_read
from starscan.arrow.split_plan import ArrowRead, FilePart
from starscan.core.errors import PlanInvalid
from starscan.core.sql_types import parse_schema
from starscan.expr import Expr, from_json, to_json
from starscan.storage.stores import Storage, local_path

FORMAT = "parquet"


@dataclass(frozen=True)
class DirectFile:
    storage_path: str                    # a URI (s3://bucket/key, file:///path), not percent-encoded
    size: int
    mtime_ns: int
    row_groups: tuple[int, int] | None = None        # [first, count] of a cut file; None: the whole file
    partition_values: dict[str, Any] = field(default_factory=dict)  # column -> int, str, 'YYYY-MM-DD' or None
    # The file's row-level deletes (starscan.arrow.deletes JSON), their files as storage URIs.
    deletes: str | None = None

    def delete_files(self) -> list[str]:
        """The storage URIs of the files its deletes are read from."""
        return delete_files(self.deletes) if self.deletes is not None else []

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"storagePath": self.storage_path, "size": self.size, "modificationTimeNs": self.mtime_ns}
        if self.deletes is not None:
            out["rowDeletes"] = json.loads(self.deletes)
        if self.row_groups is not None:
            out["rowGroups"] = list(self.row_groups)
        if self.partition_values:
            out["partitionValues"] = {k: v.isoformat() if isinstance(v, dt.date) else v
                                      for k, v in self.partition_values.items()}
        return out

    @classmethod
    def from_json(cls, doc: Any) -> DirectFile:
        try:
            row_groups = doc.get("rowGroups")
            deletes = doc.get("rowDeletes")
            return cls(str(doc["storagePath"]), int(doc["size"]), int(doc["modificationTimeNs"]),
                       (int(row_groups[0]), int(row_groups[1])) if row_groups is not None else None,
                       dict(doc.get("partitionValues") or {}),
                       json.dumps(deletes, separators=(",", ":"), sort_keys=True) if deletes is not None else None)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            raise PlanInvalid(f"a direct plan's file is malformed: {str(doc)[:200]}") from None


@dataclass(frozen=True)
class DirectRead:
    """How to read a direct plan's files as the BE reads them."""

    table: str                           # db.table
    version: int
    schema: dict[str, Any]               # Spark's schema JSON of the table
    columns: tuple[tuple[str, str], ...]  # (output name, source column)
    predicate: Expr | None
    time_zone: str
    partition_columns: tuple[str, ...]   # lower-case names whose values are in the folders
    calendar: CalendarRules = CalendarRules()  # how files of older writers are read (starscan.arrow.rebase)
    # column -> its name in the files (Delta column mapping, Iceberg field ids: starscan.arrow.nested)
    file_columns: tuple[tuple[str, FileName], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "version": self.version, "format": FORMAT, "schema": self.schema,
                "columns": [list(c) for c in self.columns],
                "predicate": to_json(self.predicate) if self.predicate is not None else None,
                "timeZone": self.time_zone, "partitionColumns": list(self.partition_columns),
                "calendar": self.calendar.to_json(),
                **({"fileColumns": dict(self.file_columns)} if self.file_columns else {})}

    @classmethod
    def from_json(cls, doc: Any) -> DirectRead:
        try:
            predicate = doc.get("predicate")
            return cls(str(doc["table"]), int(doc["version"]), dict(doc["schema"]),
                       tuple((str(name), str(source)) for name, source in doc["columns"]),
                       from_json(predicate) if predicate is not None else None, str(doc["timeZone"]),
                       tuple(str(c).lower() for c in doc.get("partitionColumns") or ()),
                       CalendarRules.from_json(doc.get("calendar")),
                       tuple((str(k), parse_file_name(v)) for k, v in (doc.get("fileColumns") or {}).items()))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise PlanInvalid("the plan's \"direct\" section is malformed") from None

    def arrow_read(self, storage: Storage) -> ArrowRead:
        """The kernel's read instructions for files in ``storage`` (the BE's arrow engine
        reads with the same), or NotArrowable when they cannot be read exactly."""
        fields = Fields(parse_schema(self.schema))
        return plan_read(self.table, self.version, fields, list(self.columns), self.predicate, self.time_zone,
                         FORMAT, set(self.partition_columns), storage, self.calendar, dict(self.file_columns))


def file_part(read: ArrowRead, f: DirectFile, location: str) -> FilePart:
    """One direct file as the kernel reader takes it (``location``: where this reader's
    storage finds ``f.storage_path``)."""
    types = dict(read.partition_columns)
    values = []
    for name, value in f.partition_values.items():
        if name in types and value is not None and str(types[name]) == "date32[day]":
            value = dt.date.fromisoformat(value)
        values.append((name, value))
    row_groups = None if f.row_groups is None else tuple(range(f.row_groups[0], f.row_groups[0] + f.row_groups[1]))
    return FilePart(location, f.storage_path, f.size, f.mtime_ns, row_groups, tuple(values),
                    _placed(f.deletes, location))


def _placed(deletes: str | None, location: str) -> str | None:
    """The deletes' file URIs as this reader's storage finds them: local paths for a local
    file (``location`` is then a path), URIs otherwise."""
    if deletes is None or "://" in location:
        return deletes
    return with_paths(deletes, lambda path: local_path(path) if path.startswith("file://") else path)
