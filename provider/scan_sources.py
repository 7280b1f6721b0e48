"""What a scan reads, apart from how it is driven (provider/spark_scan.py): a signed plan's
tablets (``PlannedRead``, every reader's scan) or any DataFrame (``FrameRead``, the
start-up warm-up). A source is checked when it is made (open_scanner answers from those
checks) and builds its Spark work only when the scan's producer thread asks."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql import types as T

from starscan.arrow.filter import NotArrowable
from starscan.arrow.rebase import CalendarRules
from starscan.arrow.split_plan import ArrowRead, ArrowSplit
from starscan.core.errors import InvalidArgument, ScanFailed, SnapshotGone, StarscanError
from starscan.expr import unflatten
from starscan.provider.arrow_engine import plan_arrow
from starscan.spark.columns import column_ref, to_column
from starscan.spark.handle import calendar_rules
from starscan.spark.reader_choice import Reader, table_reader
from starscan.spark.reader_frames import reader_frame
from starscan.spark.session import filters_floats, read_metastore_files, read_parquet_files, scan_session
from starscan.spark.types import is_supported, sql_type
from starscan.storage.stores import LOCAL, Storage
from starscan.tables.tablets import DEFAULT_OPEN_COST_BYTES, FOOTERS, row_range_problem

#: (output name, its SQL type, nullable): what the wire conversion needs of each column.
Columns = tuple[tuple[str, Any, bool], ...]


def check_snapshot(plan: Any, plan_tablets: list[Any], tablet_ids: list[int], storage: Storage = LOCAL) -> list[str]:
    """Locations of the requested tablets' files, verified to be the planned ones."""
    location = plan.table_location
    by_id = {t.tablet_id: t for t in plan_tablets}
    paths = []
    for tid in tablet_ids:
        for f in by_id[tid].files:
            path = storage.join(location, f.path)
            identity = storage.file_identity(path)
            if identity is None:
                raise SnapshotGone(
                    f"table {plan.database}.{plan.table} version {plan.version} is gone: file {f.path} was removed; "
                    "ask the FE for a new plan"
                )
            if identity != (f.size, f.mtime_ns):
                raise SnapshotGone(
                    f"table {plan.database}.{plan.table} version {plan.version} is gone: file {f.path} was rewritten; "
                    "ask the FE for a new plan"
                )
            paths.append(str(path))
    return paths


class PlannedRead:
    """The tablets of a signed plan: the output columns and the planned files checked at
    once; the DataFrame (the sql engine) or the read instructions and splits (the arrow
    engine) built when the scan starts."""

    planned = True

    def __init__(self, spark: Any, plan: Any, plan_tablets: list[Any], tablet_ids: list[int],
                 storage: Storage = LOCAL, ordered: bool = False, reader_always: bool = False,
                 open_cost_bytes: int = DEFAULT_OPEN_COST_BYTES):
        self.spark, self.plan, self.storage, self.ordered = spark, plan, storage, ordered
        self.open_cost_bytes = open_cost_bytes  # splits pack small files as the FE's tablets do
        self.reader_always = reader_always  # the sql engine reads every file with starscan's reader
        self.description = f"{plan.database}.{plan.table}"
        self.query_id, self.user = plan.query_id, plan.user
        table_schema = T.StructType.fromJson(json.loads(plan.table_schema))
        by_lower = {f.name.lower(): f for f in table_schema.fields}
        out_cols = []
        for c in plan.columns:
            if not c.is_slot_ref:
                raise InvalidArgument("output expr is not slot ref")
            field = by_lower.get(c.source.lower())
            if field is None:
                raise InvalidArgument(f"column {c.source!r} does not exist in {self.description}")
            if not is_supported(field.dataType):
                raise InvalidArgument(
                    f"column {c.name} has Spark type {field.dataType.simpleString()}, which StarRocks clients cannot read"
                )
            out_cols.append((c.name, field))
        self._plan_tablets, self._tablet_ids = plan_tablets, tablet_ids
        self.check_files()
        self._table_schema, self._by_lower, self._out_cols = table_schema, by_lower, out_cols
        self.columns: Columns = tuple((name, sql_type(f.dataType), f.nullable) for name, f in out_cols)

    def check_files(self) -> None:
        """SnapshotGone when a planned file was removed or rewritten."""
        check_snapshot(self.plan, self._plan_tablets, self._tablet_ids, self.storage)

    def _resolve(self, name: str) -> str:
        field = self._by_lower.get(name.lower())
        if field is None:
            raise InvalidArgument(f"column {name!r} does not exist in {self.description}")
        return str(field.name)

    def arrow(self, time_zone: str, tasks: int, calendar: CalendarRules) -> tuple[ArrowRead, list[ArrowSplit]]:
        """The arrow engine's read instructions and splits, or NotArrowable saying why not.
        An ordered read's splits are cut as for one task, whatever ``tasks`` runs them: its
        rows come split after split, so its splits must not depend on the BE's settings
        (as ``scan_session(ordered=True)`` keeps the sql engine's from depending on Spark's)."""
        tasks = 1 if self.ordered else tasks
        return plan_arrow(self.plan, self._plan_tablets, self._tablet_ids, time_zone, tasks, self.storage, calendar,
                          open_cost_bytes=self.open_cost_bytes)

    def dataframe(self) -> Any:
        """The scan as a Spark DataFrame (py4j work: the file index, the plan's analysis)."""
        plan = self.plan
        self.check_files()
        predicate = unflatten(plan.predicate) if plan.predicate is not None else None
        df = self._read_tablets(predicate)
        if predicate is not None:
            try:
                df = df.filter(to_column(predicate, self._resolve))
            except StarscanError:
                raise
            except Exception as exc:  # noqa: BLE001 - AnalysisException: types that do not fit, etc.
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise InvalidArgument(f"the predicate cannot be evaluated on {self.description}: {first[:500]}") from None
        return df.select(*[column_ref(field.name) for _, field in self._out_cols])

    def _read_tablets(self, predicate: Any) -> Any:
        """The planned tablets' rows: whole files read as they are; a tablet that is a run of
        a file's row groups selects the rows those groups hold by their index in the file
        (Spark's ``_metadata.row_index``), since Spark cannot be told which row groups to read."""
        plan, storage = self.plan, self.storage
        location = plan.table_location
        by_id = {t.tablet_id: t for t in self._plan_tablets}
        whole: list[str] = []
        cuts: list[tuple[str, int, int]] = []
        for tid in self._tablet_ids:
            t = by_id[tid]
            if t.first_row_group is None:
                whole.extend(storage.spark_path(storage.join(location, f.path)) for f in t.files)
            else:
                f = t.files[0]
                path = storage.join(location, f.path)
                problem = row_range_problem(FOOTERS.row_groups(path, f.size, f.mtime_ns, storage),
                                            t.first_row_group, t.row_groups or 0, t.first_row, t.rows)
                if problem is not None:
                    raise ScanFailed(f"table {self.description}: file {f.path} does not hold the planned "
                                     f"tablet {tid}: {problem}")
                cuts.append((storage.spark_path(path), t.first_row or 0, t.rows or 0))
        has_deletes = any(f.deletes for tid in self._tablet_ids for f in by_id[tid].files)
        reader = table_reader(plan.file_format, bool(plan.file_columns), bool(plan.partition_columns), has_deletes,
                              storage.is_local, self.reader_always)
        if reader is Reader.METASTORE:  # Spark's own reader for the table (starscan.tables.hive)
            return read_metastore_files(scan_session(self.spark, ordered=self.ordered), plan.database, plan.table,
                                        [storage.join(location, f.path) for tid in self._tablet_ids
                                         for f in by_id[tid].files])
        frames = []
        folders = plan.partition_columns is None  # else the partition values are in the files
        spark = scan_session(self.spark, ordered=self.ordered, exact_floats=filters_floats(predicate, self._table_schema))
        if reader in (Reader.OWN, Reader.OWN_FIRST):
            try:
                return self._through_reader(spark, predicate)
            except NotArrowable as why:
                if reader is Reader.OWN:
                    raise InvalidArgument(f"table {self.description} has rows deleted by deletion vectors, or columns "
                                          "or partition values its files record apart (column mapping), which only "
                                          f"starscan's file reader reads, and it cannot read this scan: {why}") from None
                # Spark's own reader, which needs Hadoop's connector for the store (docs/storage.md).
        if whole:
            frames.append(read_parquet_files(spark, self._table_schema, storage.spark_path(location), whole,
                                             folders, plan.file_format or "parquet"))
        for path, first_row, rows in cuts:
            frame = read_parquet_files(spark, self._table_schema, storage.spark_path(location), [path],
                                       folders, plan.file_format or "parquet")
            index = F.col("_metadata.row_index")  # after the read: that waits for a session (re)starting
            frames.append(frame.filter((index >= first_row) & (index < first_row + rows)))
        df = frames[0]
        for more in frames[1:]:
            df = df.unionByName(more)
        return df

    def _through_reader(self, spark: Any, predicate: Any) -> Any:
        """The planned tablets' rows read by the kernel's file reader (starscan.arrow.read) in
        Spark tasks (``mapInArrow`` over the splits), for what Spark's own file readers cannot
        read exactly (files with row-level deletes, or whose columns the files name apart
        from the schema: Delta column mapping) or cannot open (an object store, for which
        Spark has no Hadoop connector out of the box). Every column the scan uses, in Spark's
        types; NotArrowable when the reader cannot read them (ORC files; nested columns of a
        table whose files name its columns apart); Spark SQL then evaluates the predicate as
        for any DataFrame."""
        used = {field.name for _, field in self._out_cols}
        if predicate is not None:
            used |= {self._resolve(name) for name in predicate.columns()}
        names = sorted(used, key=lambda n: [f.name for f in self._table_schema.fields].index(n))
        time_zone = spark.conf.get("spark.sql.session.timeZone")
        read, splits = plan_arrow(_columns_only(self.plan, names), self._plan_tablets, self._tablet_ids, time_zone,
                                  max(1, spark.sparkContext.defaultParallelism), self.storage,
                                  calendar_rules(spark), nested=True,
                                  open_cost_bytes=self.open_cost_bytes)
        return reader_frame(spark, read, splits, T.StructType([self._by_lower[n.lower()] for n in names]))

    def table_location(self) -> str:
        return str(self.storage.spark_path(self.plan.table_location))


def _columns_only(plan: Any, names: list[str]) -> Any:
    """``plan`` reading the table columns ``names`` as they are, with no predicate."""
    from copy import copy

    from starscan.core.thrift_defs import plan as plan_idl

    out = copy(plan)
    out.columns = [plan_idl.TPlanColumn(name=n, source=n, spark_type="", primitive_type=0, nullable=True,
                                        is_slot_ref=True) for n in names]
    out.predicate = None
    return out


class FrameRead:
    """Any DataFrame, read through the same push path (the start-up warm-up): the sql engine
    only, and no plan's files to check."""

    planned = False
    storage = LOCAL
    ordered = False
    query_id = user = None

    def __init__(self, df: Any, description: str):
        self.df = df
        self.description = description
        self.columns: Columns = tuple((f.name, sql_type(f.dataType), f.nullable) for f in df.schema.fields)

    def check_files(self) -> None:
        pass

    def arrow(self, time_zone: str, tasks: int, calendar: CalendarRules) -> tuple[ArrowRead, list[ArrowSplit]]:
        raise NotArrowable("not a plan's files")

    def dataframe(self) -> Any:
        return self.df

    def table_location(self) -> str:
        return ""


Source = PlannedRead | FrameRead
