"""Which engine reads a scan, and what its Spark tasks are (docs/architecture.md "Two
engines"): the ``arrow`` engine when the kernel's exact reader can read the scan
(``source.arrow``: the files, filters and types it knows), else the ``sql`` engine, Spark
SQL's own reading of the source's DataFrame (``scan_engine = arrow`` refuses a scan the
arrow engine cannot read instead)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starscan.arrow.filter import NotArrowable
from starscan.core.errors import InvalidArgument
from starscan.provider.push.task import push_arrow_splits, push_spark_arrow
from starscan.provider.scan_sources import Source
from starscan.provider.scheduler import ArrowReaders, ScanReaders, SqlSplitReaders
from starscan.provider.spark_failures import jvm_gone
from starscan.spark import compat, pyspark_internals
from starscan.spark.handle import calendar_rules


@dataclass
class Engine:
    """A scan's engine and its tasks: ``rdd_of(sc)`` the RDD the tasks run over, ``schema``
    the Arrow schema they produce, ``task_function(target)`` the partition function, and
    ``readers`` how its jobs go. The arrow engine's ``splits`` and ``read`` (its read
    instructions) are None on the sql engine; ``reason`` says why a scan is not on arrow."""

    name: str
    rdd_of: Callable[[Any], Any]
    schema: Any
    task_function: Callable[[Any], Any]
    readers: ScanReaders
    splits: list[Any] | None = None
    read: Any = None
    reason: str | None = None


def choose_engine(spark: Any, source: Source, setting: str, time_zone: str, tasks_per_scanner: int,
                  chosen: Callable[[str, str | None], None]) -> Engine:
    """The engine of a scan: the ``arrow`` engine runs one partition per task the scanner
    runs at once, each reading split after split from the scan's board
    (push_task.push_arrow_splits); the ``sql`` engine one job per split of Spark's own scan.
    ``chosen(engine, why not arrow)`` is told as soon as it is known, before the sql engine's
    DataFrame is made (which may fail: the scan failed on that engine)."""
    reason = None
    if setting in ("auto", "arrow"):
        try:
            read, splits = source.arrow(time_zone, tasks_per_scanner, calendar_rules(spark))
        except NotArrowable as why:
            if setting == "arrow":
                raise InvalidArgument(f"scan_engine = arrow cannot run this scan: {why}; "
                                      "scan_engine = auto runs it on the sql engine") from None
            reason = str(why)
        else:
            readers = min(tasks_per_scanner, len(splits))

            def readers_rdd(sc: Any) -> Any:
                return sc.parallelize(range(readers), readers) if splits else sc.emptyRDD()

            readers_of_scan = ArrowReaders.for_splits(splits, readers)
            # A reader lost with Spark's JVM is read on by the next one: in the BE's own
            # slots, or as a Spark job once the node's new SparkSession is up.
            readers_of_scan.jvm_died = lambda exc: jvm_gone(exc, spark)
            chosen("arrow", None)
            return Engine("arrow", readers_rdd, read.output_schema,
                          lambda target: push_arrow_splits(target, read, tuple(splits)), readers_of_scan,
                          splits=splits, read=read)
    chosen("sql", reason)
    df = source.dataframe()
    schema = compat.arrow_schema(df.schema, time_zone)
    rdd = pyspark_internals.arrow_batch_rdd(df, spark.sparkContext)
    return Engine("sql", lambda _sc: rdd, schema, push_spark_arrow,
                  SqlSplitReaders(rdd.getNumPartitions(), tasks_per_scanner, source.ordered), reason=reason)
