"""A warehouse table as a Spark DataFrame: the rows Spark SQL reads from it, for the SQL the
FE runs itself (the MySQL port's SELECTs, queries over several tables on the SQL fronts)."""

from __future__ import annotations

import json

from pyspark.sql import types as T

from starscan.arrow.filter import NotArrowable
from starscan.arrow.scan import Fields, file_part, partition_names, plan_read
from starscan.arrow.split_plan import ArrowSplit
from starscan.core.errors import SqlInvalid
from starscan.core.sql_types import parse_schema
from starscan.planner.statements.catalog_view import CatalogView
from starscan.spark.handle import calendar_rules
from starscan.spark.reader_choice import Reader, table_reader
from starscan.spark.reader_frames import reader_frame
from starscan.spark.session import filters_floats, read_metastore_files, read_parquet_files, scan_session


def table_frame(spark, view: CatalogView, db: str, table: str, predicate=None):
    """A DataFrame of the table's rows as Spark SQL reads them, in a session of ``spark``'s
    context, read by the reader ``table_reader`` chooses (the BE's sql engine's rule);
    ``predicate`` (a plan expression) chooses the session's float rule."""
    snap = view.warehouse.snapshot(db, table)
    if not snap.tablets:
        raise SqlInvalid(f"table {db}.{table} has no data files yet")
    schema = view.schemas.schema(snap)
    storage = snap.storage
    session = scan_session(spark, exact_floats=predicate is not None and filters_floats(predicate, schema))
    reader = table_reader(snap.file_format, bool(snap.file_columns), snap.partitions_recorded,
                          any(f.deletes for f in snap.files), storage.is_local)
    df = None
    if reader is Reader.METASTORE:  # Spark's reader for the table (starscan.tables.hive)
        df = read_metastore_files(session, snap.db, snap.name, [storage.join(snap.location, f.path) for f in snap.files])
    elif reader in (Reader.OWN, Reader.OWN_FIRST):
        try:
            df = _through_reader(session, snap, schema)
        except NotArrowable as why:
            if reader is Reader.OWN:
                raise SqlInvalid(f"table {snap.qualified_name} has deleted rows or mapped columns, which only "
                                 f"starscan's file reader reads, and it cannot read this table: {why}") from None
    if df is None:  # Spark's own readers (on an object store: with Hadoop's connector)
        paths = [storage.spark_path(storage.join(snap.location, f.path)) for f in snap.files]
        df = read_parquet_files(session, schema, storage.spark_path(snap.location), paths, snap.partitions_in_folders,
                                snap.file_format)
    return df, schema


def _through_reader(spark, snap, schema: T.StructType):
    """The table's rows read by the kernel's file reader (starscan.spark.reader_frames), one
    Spark task per file: its files have rows deleted without being rewritten (Delta
    deletion vectors), which Spark's Parquet reader would return, or name their columns
    apart from the schema (Delta column mapping), or are in an object store Spark has no
    connector for. NotArrowable when the reader cannot read the table (ORC; nested columns of
a table whose files name its columns apart)."""
    fields = Fields(parse_schema(json.dumps(schema.jsonValue())))
    names = [f.name for f in schema.fields]
    first = snap.files[0].path if snap.files else None
    folders = snap.partitions_in_folders
    read = plan_read(snap.qualified_name, snap.version, fields, [(n, n) for n in names], None,
                     spark.conf.get("spark.sql.session.timeZone"), snap.file_format,
                     partition_names(first, fields, snap.plan_partition_columns), snap.storage,
                     calendar_rules(spark), dict(snap.file_columns), nested=True)
    splits = [ArrowSplit((file_part(read, fields, snap.location, f.path, f.size, f.mtime_ns, None, folders,
                                    f.deletes, f.recorded_partition),)) for f in snap.files]
    return reader_frame(spark, read, splits, schema)
