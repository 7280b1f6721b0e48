"""Whether a scan has an exact pyarrow reading, and its read instructions: shared by the
BE's ``arrow`` engine (provider/arrow_engine.py, which also cuts the splits) and the
client's direct reads (starscan.client.direct), so both read the same rows the same way.

A scan reads exactly with pyarrow only when every part of it does: the files are Parquet,
the predicate translates (starscan.arrow.filter), every column it reads has a scalar type
(no nested types), and every partition value it reads is spelled so that its value is
certain (starscan.storage.hadoop_paths.exact_partition_value). Otherwise ``NotArrowable`` says
why: the BE then runs the scan on Spark SQL, and a direct plan marks it not direct.

Everything here works from the plan's own description of the table (Spark's schema JSON
read into starscan.core.sql_types), so the client needs no Spark.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from starscan.arrow.deletes import with_paths
from starscan.arrow.filter import NotArrowable, to_arrow_filter
from starscan.arrow.nested import FileName
from starscan.arrow.rebase import CalendarRules
from starscan.arrow.split_plan import ArrowRead, FilePart
from starscan.core.sql_types import Field, SqlType
from starscan.expr import Expr
from starscan.storage.hadoop_paths import exact_partition_value, partition_of
from starscan.storage.stores import LOCAL, Storage

__all__ = ["NotArrowable", "Fields", "file_part", "partition_names", "plan_read"]


class Fields:
    """A table's columns by name, case-insensitively (Spark's default resolution)."""

    def __init__(self, fields: Iterable[Field]):
        self.fields = tuple(fields)
        # The last of names differing only in case wins, as the FE resolves them.
        self._by_lower: dict[str, Field] = {f.name.lower(): f for f in self.fields}

    def __call__(self, name: str | None) -> Field:
        found = self._by_lower.get((name or "").lower())
        if found is None:
            raise NotArrowable(f"column {name!r} is not in the table")
        return found

    def has(self, name: str) -> bool:
        return name.lower() in self._by_lower


def plan_read(table: str, version: int, fields: Fields, columns: Sequence[tuple[str, str | None]],
              predicate: Expr | None, time_zone: str, file_format: str | None, partition_columns: set[str],
              storage: Storage = LOCAL, calendar: CalendarRules = CalendarRules(),
              file_columns_map: Mapping[str, FileName] | None = None, nested: bool = False) -> ArrowRead:
    """The read instructions for ``columns`` ((output name, source column; None for an
    expression)) of ``table`` filtered by ``predicate``, or NotArrowable. ``partition_columns``:
    the lower-case names whose values are in the files' folders (empty when the values are
    inside the files). ``calendar``: the session's rules for dates and timestamps of files
    from older writers (starscan.arrow.rebase). ``file_columns_map``: each column's name in
    the files (Delta column mapping) or its field id (an int: Iceberg), with its nested
    fields' where they are named apart too (starscan.arrow.nested), where the table format
    resolves columns apart from the schema's names. ``nested``: arrays, maps and structs may
    be read (the reader under Spark SQL, which evaluates everything else)."""
    arrow_filter = to_arrow_filter(predicate, fields) if predicate is not None else None
    renamed = {k: v for k, v in (file_columns_map or {}).items() if k != v}

    def check(f: Field) -> None:
        if not (nested and f.type.is_nested):
            _check_type(f)

    output, out_fields = [], []
    for name, source in columns:
        if source is None:
            raise NotArrowable("an output expression")
        f = fields(source)
        check(f)
        output.append((name, f.name, f.declared_char_length))
        out_fields.append((name, f))
    if file_format == "metastore":
        raise NotArrowable("the table's files are read by Spark's own reader for the table (its SerDe or data source)")
    if file_format not in (None, "parquet"):
        raise NotArrowable(f"the table's files are {file_format}, which Spark SQL reads")
    used = {src for _, src, _ in output} | {fields(n).name for n in (predicate.columns() if predicate else set())}
    for name in used:
        check(fields(name))
    for name in predicate.columns() if predicate is not None else ():
        _check_type(fields(name))
    file_columns = sorted(n for n in used if n.lower() not in partition_columns)
    part_columns = sorted(n for n in used if n.lower() in partition_columns)

    def arrow_of(name: str) -> pa.DataType:
        return fields(name).type.spark_arrow_type(time_zone)

    pushdown = _file_conjuncts(predicate, fields, partition_columns) if predicate is not None else None
    dates = tuple(n for n in file_columns if _holds_datetime(fields(n).type))
    if calendar.int96_conversion and any(fields(n).type.kind == "timestamp" for n in file_columns):
        raise NotArrowable("spark.sql.parquet.int96TimestampConversion is on (INT96 timestamps of files not written "
                           "by parquet-mr are moved to the session's zone)")
    return ArrowRead(
        table=table, version=version,
        needed=tuple((n, arrow_of(n)) for n in file_columns),
        partition_columns=tuple((n, arrow_of(n)) for n in part_columns),
        output=tuple(output),
        output_schema=pa.schema([pa.field(name, f.type.spark_arrow_type(time_zone), f.nullable) for name, f in out_fields]),
        filter=arrow_filter, pushdown=pushdown, dates=dates, calendar=calendar, storage=storage,
        output_columns=tuple((name, f.type, f.nullable) for name, f in out_fields),
        file_names=tuple((n, renamed[n]) for n in file_columns if n in renamed),
    )


def file_part(read: ArrowRead, fields: Fields, location: str, path: str, size: int, mtime_ns: int,
              row_groups: tuple[int, ...] | None, folders: bool, deletes: str | None = None,
              recorded: str | None = None) -> FilePart:
    """One planned file as the reader reads it: its place, identity, row groups, its row-level
    deletes (the plan's JSON) and the typed values of the partition columns ``read`` uses:
    those its folders spell (``folders``), or those the table format records for it
    (``recorded``: the plan's JSON, for a table whose folders do not spell them)."""
    values = []
    wanted = {name for name, _ in read.partition_columns}
    spelled: list[tuple[str, str | None]] = list(partition_of(path)) if folders and recorded is None else []
    if recorded is not None:
        try:
            spelled = [(str(col), None if v is None else str(v)) for col, v in json.loads(recorded).items()]
        except (ValueError, AttributeError):
            raise NotArrowable(f"file {path}: its partition values in the plan are malformed") from None
    for col, raw in spelled:
        canonical = fields(col).name if fields.has(col) else col
        if canonical not in wanted:
            continue
        try:
            values.append((canonical, exact_partition_value(raw, fields(col).type, escaped=recorded is None)))
        except ValueError as exc:
            where = f"partition folder {col}={raw}" if recorded is None else f"file {path}: partition value {col}={raw!r}"
            raise NotArrowable(f"{where}: {exc}") from None
    return FilePart(read.storage.join(location, path), path, size, mtime_ns, row_groups, tuple(values),
                    place_deletes(deletes, read.storage, location))


def place_deletes(deletes: str | None, storage: Storage, location: str) -> str | None:
    """The plan's deletes of a file with a vector file's path made a location of ``storage``
    (relative paths are under the table folder, ``file://`` URIs are local paths)."""
    if deletes is None:
        return None

    def place(path: str) -> str:
        if path.startswith("file://"):
            return unquote(path[len("file://"):])
        if "://" in path or path.startswith("/"):
            return path
        return storage.join(location, path)

    return with_paths(deletes, place)


def partition_names(first_file_path: str | None, fields: Fields, planned: Sequence[str] | None = None) -> set[str]:
    """The lower-case names of the table's partition columns whose values are read apart
    from the files' columns. ``planned`` is where the plan says they are
    (TScanPlan.partition_columns): None, in folders (named by the path of one of the
    table's files: every file of a table has the same folders); empty, inside the files;
    otherwise these columns, whose values each file carries."""
    if planned is not None:
        return {c.lower() for c in planned}
    if first_file_path is None:
        return set()
    return {col.lower() for col, _ in partition_of(first_file_path) if fields.has(col)}


def _check_type(f: Field) -> None:
    if not f.type.is_scalar:
        raise NotArrowable(f"column {f.name} has type {f.type.simple_string()}")


def _file_conjuncts(predicate: Expr, fields: Fields, partition_columns: set[str]) -> pc.Expression | None:
    """The AND of the predicate's top-level conjuncts that read file columns only: what the
    Parquet reader may use to skip row groups by their statistics (the whole predicate is
    applied to every batch afterwards in any case)."""
    conjuncts, stack = [], [predicate]
    while stack:
        e = stack.pop()
        if e.kind == "op" and e.name == "and":
            stack.extend(e.children)
        elif not any(c.lower() in partition_columns for c in e.columns()):
            condition = to_arrow_filter(e, fields)
            if _statistics_see_all_rows(e, condition, fields):
                conjuncts.append(condition)
    out = None
    for c in conjuncts:
        out = c if out is None else (out & c)
    return out


def _statistics_see_all_rows(e: Expr, condition: pc.Expression, fields: Fields) -> bool:
    """Whether skipping row groups by ``condition`` (the conjunct ``e``) and the files'
    statistics keeps every row that meets it. Parquet's min and max of a FLOAT or DOUBLE
    column leave NaN out, and pyarrow takes them for the bounds of every value, so a row group
    whose numbers all fail ``not (x < 499)`` is skipped although its NaN rows meet it (NaN is
    above every number in Spark). A condition on one floating-point column is used only when
    a NaN row fails it; one that reads such a column and another is not used at all."""
    used = {fields(name).name: fields(name) for name in e.columns()}
    floating = [f for f in used.values() if f.type.kind in ("float", "double")]
    if not floating:
        return True
    if len(used) > 1:
        return False
    (f,) = floating
    probe = pa.table({f.name: pa.array([math.nan], f.type.spark_arrow_type("UTC"))})
    return bool(probe.filter(condition).num_rows == 0)


def _holds_datetime(kind: SqlType) -> bool:
    """Whether a column's type is DATE or TIMESTAMP (never TIMESTAMP_NTZ), or holds one in a
    struct, array or map: the values Spark's calendar rule applies to."""
    if kind.kind in ("date", "timestamp"):
        return True
    parts = [kind.element, kind.key, kind.value, *(f.type for f in kind.fields)]
    return any(p is not None and _holds_datetime(p) for p in parts)
