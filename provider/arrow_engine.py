"""The ``arrow`` engine's planning, on the driver: whether a plan can run on it, and its
splits.

A plan runs on the arrow engine only when every part of it has an exact pyarrow reading:
the predicate translates (provider/arrow_expr.py), every output column has a type this
module maps (no nested types), and every partition value it reads is spelled so that its
value is certain (starscan.hadoop_paths.exact_partition_value). Otherwise ``NotArrowable``
says why, and the scan runs on the ``sql`` engine (``scan_engine = auto``) or is refused
(``scan_engine = arrow``).

Splits: the planned files, a large file cut into runs of whole row groups of about
``split_size`` bytes (its footer says where), small files packed together up to that size with
an open cost per file, as Spark packs files into partitions. Spark then runs one task per
split (provider/spark_scan.py).
"""

from __future__ import annotations

import json

import pyarrow.compute as pc
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type

from starscan.expr import Expr, unflatten
from starscan.hadoop_paths import exact_partition_value, partition_of
from starscan.provider.arrow_expr import NotArrowable, to_arrow_filter
from starscan.provider.arrow_reader import ArrowRead, ArrowSplit, FilePart
from starscan.storage import LOCAL, Storage
from starscan.tablets import FOOTERS, cut_file, pack
from starscan.types import SPARK_INTEGER_RANGES

_SCALAR_TYPES = (T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType,
                 T.DecimalType, T.StringType, T.DateType, T.TimestampType, T.TimestampNTZType, T.BinaryType)
#: What opening one more file costs, in bytes of reading (Spark's openCostInBytes).
OPEN_COST_BYTES = 4 << 20


MIN_SPLIT_BYTES, MAX_SPLIT_BYTES = 16 << 20, 256 << 20


def split_size(total_bytes: int, tasks: int) -> int:
    """Bytes per split: about two splits per task the scanner runs at once, within
    [16 MiB, 256 MiB]. Each split costs a Spark job (tens of milliseconds to schedule), so
    fewer is faster; a split's size does not delay the first rows (tasks stream)."""
    return min(max(MIN_SPLIT_BYTES, total_bytes // max(1, 2 * tasks)), MAX_SPLIT_BYTES)


def plan_arrow(plan, plan_tablets: list, tablet_ids: list[int], time_zone: str,
               tasks: int = 2, storage: Storage = LOCAL) -> tuple[ArrowRead, list[ArrowSplit]]:
    """The read instructions and splits of ``plan`` on the arrow engine, or NotArrowable."""
    schema = T.StructType.fromJson(json.loads(plan.table_schema))
    by_lower = {f.name.lower(): f for f in schema.fields}

    def field_of(name: str) -> T.StructField:
        found = by_lower.get((name or "").lower())
        if found is None:
            raise NotArrowable(f"column {name!r} is not in the table")
        return found

    predicate: Expr | None = unflatten(plan.predicate) if plan.predicate is not None else None
    arrow_filter = to_arrow_filter(predicate, field_of) if predicate is not None else None

    output, out_fields = [], []
    for c in plan.columns:
        if not c.is_slot_ref:
            raise NotArrowable("an output expression")
        f = field_of(c.source)
        _check_type(f)
        declared = str((f.metadata or {}).get("__CHAR_VARCHAR_TYPE_STRING", "")).lower()
        char_len = int(declared[5:-1]) if declared.startswith("char(") else None
        output.append((c.name, f.name, char_len))
        out_fields.append(T.StructField(c.name, f.dataType, f.nullable))

    if plan.file_format not in (None, "parquet"):
        raise NotArrowable(f"the table's files are {plan.file_format}, which Spark SQL reads")
    folders = plan.partition_columns is None  # else the partition values are in the files (Iceberg)
    partition_names = _partition_names(plan_tablets, by_lower) if folders else set()
    used = {src for _, src, _ in output} | {field_of(n).name for n in (predicate.columns() if predicate else set())}
    for name in used:
        _check_type(field_of(name))
    file_columns = sorted(n for n in used if n.lower() not in partition_names)
    part_columns = sorted(n for n in used if n.lower() in partition_names)

    def arrow_of(name: str):
        return to_arrow_type(field_of(name).dataType, timezone=time_zone, prefers_large_types=False)

    pushdown = _file_conjuncts(predicate, field_of, partition_names) if predicate is not None else None
    dates = any(isinstance(field_of(n).dataType, (T.DateType, T.TimestampType, T.TimestampNTZType))
                for n in file_columns)
    read = ArrowRead(
        table=f"{plan.database}.{plan.table}", version=plan.version,
        needed=tuple((n, arrow_of(n)) for n in file_columns),
        partition_columns=tuple((n, arrow_of(n)) for n in part_columns),
        output=tuple(output),
        output_schema=to_arrow_schema(T.StructType(out_fields), timezone=time_zone, prefers_large_types=False),
        filter=arrow_filter, pushdown=pushdown, dates=dates, storage=storage,
    )
    location = plan.table_location
    by_id = {t.tablet_id: t for t in plan_tablets}
    parts = []
    for tid in tablet_ids:
        for f in by_id[tid].files:
            values = []
            for col, raw in partition_of(f.path) if folders else ():
                canonical = field_of(col).name
                if canonical not in part_columns:
                    continue
                dtype = field_of(col).dataType
                try:
                    values.append((canonical, exact_partition_value(raw, dtype, SPARK_INTEGER_RANGES.get(type(dtype)))))
                except ValueError as exc:
                    raise NotArrowable(f"partition folder {col}={raw}: {exc}") from None
            tablet = by_id[tid]
            row_groups = None if tablet.first_row_group is None else tuple(
                range(tablet.first_row_group, tablet.first_row_group + (tablet.row_groups or 0)))
            parts.append(FilePart(storage.join(location, f.path), f.path, f.size, f.mtime_ns, row_groups, tuple(values)))
    return read, _splits(parts, split_size(sum(p.size for p in parts), tasks), storage)


def _check_type(f: T.StructField) -> None:
    if not isinstance(f.dataType, _SCALAR_TYPES):
        raise NotArrowable(f"column {f.name} has type {f.dataType.simpleString()}")


def _partition_names(plan_tablets: list, by_lower: dict) -> set[str]:
    names: set[str] = set()
    for t in plan_tablets[:1]:
        for f in t.files[:1]:
            names = {col.lower() for col, _ in partition_of(f.path)}
    return {n for n in names if n in by_lower}


def _file_conjuncts(predicate: Expr, field_of, partition_names: set[str]) -> pc.Expression | None:
    """The AND of the predicate's top-level conjuncts that read file columns only: what the
    Parquet reader may use to skip row groups by their statistics (the whole predicate is
    applied to every batch afterwards in any case)."""
    conjuncts, stack = [], [predicate]
    while stack:
        e = stack.pop()
        if e.kind == "op" and e.name == "and":
            stack.extend(e.children)
        elif not any(c.lower() in partition_names for c in e.columns()):
            conjuncts.append(to_arrow_filter(e, field_of))
    out = None
    for c in conjuncts:
        out = c if out is None else (out & c)
    return out


def _splits(parts: list[FilePart], split_bytes: int, storage: Storage = LOCAL) -> list[ArrowSplit]:
    """The scanner's tablets split again for its tasks, by the FE's rules (starscan.tablets):
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
    out.extend(ArrowSplit(tuple(group)) for group in pack(small, lambda p: p.size, split_bytes, OPEN_COST_BYTES))
    return out


def _with_row_groups(part: FilePart, row_groups: list[int]) -> FilePart:
    return FilePart(part.path, part.relative, part.size, part.mtime_ns, tuple(row_groups), part.partition)
