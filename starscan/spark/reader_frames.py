"""DataFrames whose rows the kernel's file reader (starscan.arrow.read) gives, in Spark tasks:
``mapInArrow`` over a list of splits, one input partition per split.

Spark's own file readers read a file whole: they know nothing of the rows a table format
deletes without rewriting the file (Delta deletion vectors). Where a scan's files have such
deletes, the sql engine (the BE) and the MySQL port read them through this instead, and Spark
SQL evaluates the rest as on any DataFrame: the rows are those every other path reads,
because the reader is the same code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from starscan.arrow.split_plan import ArrowRead, ArrowSplit

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def reader_frame(spark: SparkSession, read: ArrowRead, splits: list[ArrowSplit], schema: StructType) -> DataFrame:
    """The splits' rows as a DataFrame of ``schema`` (``read`` gives exactly its columns, in
    Spark's Arrow types for the session's time zone, with no filter)."""
    if not splits:
        return spark.createDataFrame([], schema)
    return spark.range(len(splits), numPartitions=len(splits)).mapInArrow(split_reader(read, tuple(splits)), schema)


def split_reader(read: ArrowRead, splits: tuple[ArrowSplit, ...]) -> Any:
    """The ``mapInArrow`` function: its input rows are split numbers (``spark.range``), its
    output those splits' batches."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from starscan.arrow.read import read_split

        for batch in batches:
            for number in batch.column(0).to_pylist():
                yield from read_split(read, splits[number])

    return run
